"""How a finding's evidence reads on a page: display names and formats for the keys summary.json keeps.

summary.json keeps each detector's evidence under its own keys (`alpha_abs_mean`, `negative_delta_share`); a page
shows them as people read them ("mean |α| (engine)  0.0131", "rollout ≥ trainer  96.3%"), a standard error beside
its value, and leaves out what was not computed (no "—") and the detectors' own thresholds and subsampling steps
(they are in summary.json). A key of the catalogue's metrics takes the metric's name and format.
"""

from __future__ import annotations

import math
from typing import Any

from .metrics import BY_KEY
from .numbers import fmt, pct

# key → (name, kind): share (a percentage), x (a multiple), bool (yes / no), anything else a number
NAMES: dict[str, tuple[str, str]] = {
    "tokens": ("tokens", "count"), "sequences": ("sequences", "count"), "pairs": ("pairs compared", "count"),
    "kl_k3": ("KL k3", "num"), "abs_delta_mean": ("mean |δ| (nats)", "num"), "abs_delta_max": ("max |δ| (nats)", "num"),
    "bias": ("bias, mean δ (nats)", "num"), "corr_logp": ("log-prob correlation", "num"),
    "ppl_ratio": ("perplexity ratio", "x"), "ess": ("ESS", "num"), "phantom_clip": ("phantom clipping", "share"),
    "z": ("z", "num"), "ratio": ("ratio", "x"), "token_share": ("share of tokens", "share"),
    "abs_delta_share": ("share of Σ|δ|", "share"), "share_of_abs_delta": ("share of Σ|δ|", "share"),
    # dummy_zero
    "all_exact_zero": ("every value 0.0", "bool"), "exact_zero_tokens": ("exact zeros", "count"),
    "in_runs_share": ("share in contiguous runs", "share"), "mean_other_side_logp": ("other side's mean log-prob", "num"),
    "trainer_side": ("on the trainer side", "bool"),
    # first_token, turn_boundary, position_onset, low_prob_tail
    "abs_delta_first_mean": ("mean |δ| at position 0", "num"), "abs_delta_first_median": ("median |δ| at position 0", "num"),
    "abs_delta_rest_mean": ("mean |δ| elsewhere", "num"), "abs_delta_rest_median": ("median |δ| elsewhere", "num"),
    "mean_delta_first": ("mean δ at position 0", "num"), "rank_mean": ("mean rank percentile", "num"),
    "abs_delta_by_offset": ("mean |δ| by offset in the turn", "num"), "abs_delta_head_mean": ("mean |δ| at turn heads", "num"),
    "abs_delta_turn0_mean": ("mean |δ| in turn 0", "num"), "head_tokens": ("head tokens per turn", "count"),
    "turn_starts": ("turn starts", "count"), "turns_affected": ("turns affected", "num"),
    "abs_delta_mean_before": ("mean |δ| before", "num"), "abs_delta_mean_after": ("mean |δ| after", "num"),
    "abs_delta_median_before": ("median |δ| before", "num"), "abs_delta_median_after": ("median |δ| after", "num"),
    "position": ("position", "count"), "positions_scanned": ("positions scanned", "count"),
    "tokens_before": ("tokens before", "count"), "tokens_after": ("tokens after", "count"),
    "kernel_boundary": ("kernel boundary", "count"), "explained_by_other_finding": ("explained by another finding", "bool"),
    "abs_delta_mean_tail": ("mean |δ| in the tail", "num"), "abs_delta_mean_rest": ("mean |δ| elsewhere", "num"),
    "k3_share": ("share of the KL", "share"), "tail_p": ("tail: p below", "num"),
    # mixed_policy_versions
    "versions": ("versions", "count"), "values": ("versions seen", "num"), "oldest": ("oldest", "count"),
    "newest": ("newest", "count"), "spread": ("versions apart", "count"), "stale_sequence_share": ("stale sequences", "share"),
    "abs_delta_mean_newest": ("mean |δ|, newest version", "num"), "abs_delta_mean_stale": ("mean |δ|, older versions", "num"),
    # precision_gap
    "alpha_abs_mean": ("mean |α| (engine)", "num"), "beta_abs_mean": ("mean |β| (precision)", "num"),
    "beta_bias": ("β bias (nats)", "num"), "beta_share_abs": ("β's share of Σ|log r|", "share"),
    "beta_share_sq": ("β's share of Σ(log r)²", "share"), "clip_fraction_beta": ("PPO-clipped on β alone", "share"),
    "clip_fraction_total": ("PPO-clipped in all", "share"), "corr_beta_advantage": ("correlation of β with advantage", "num"),
    # shift
    "mean_abs_diff_same_position": ("mean |δ| aligned", "num"), "mean_abs_diff_shifted": ("mean |δ| shifted", "num"),
    "shift": ("offset (positions)", "num"),
    # temperature
    "temperature_ratio": ("T_rollout / T_trainer, fitted", "num"), "temperature_ratio_far": ("T_rollout / T_trainer, far end", "num"),
    "inverse_ratio": ("T_trainer / T_rollout, fitted", "num"), "slope": ("slope of δ on the log-prob", "num"),
    "r2": ("R²", "num"), "fit_coverage": ("least share the fit recovers", "share"),
    "fitted_on_trainer": ("fitted on the trainer side", "bool"), "trainer_off": ("the trainer is off", "bool"),
    "log_mean_ratio": ("log mean r", "num"), "log_mean_inverse_ratio": ("log mean 1/r", "num"),
    "tokens_fitted": ("tokens fitted", "count"),
    # drift_with_length
    "bias_per_token": ("bias per token (nats)", "num"), "exponent": ("exponent", "num"),
    "z_vs_random_walk": ("z against a random walk", "num"),
    "expected_seq_log_ratio_at_p90_length": ("expected Σδ at the p90 length", "num"),
    # processed_logprobs
    "declared_in_meta": ("declared in the batch's meta", "bool"), "implied_min_kept_mass": ("smallest kept mass", "num"),
    "mean_delta": ("mean δ (nats)", "num"), "min_delta": ("min δ (nats)", "num"),
    "negative_delta_share": ("rollout ≥ trainer", "share"), "rollout_exact_zero_share": ("rollout exact zeros", "share"),
    "rollout_exact_zero_trainer_below": ("of them, trainer below", "count"), "tokens_compared": ("tokens compared", "count"),
    # one_side_broken
    "constant_value": ("constant value", "num"), "ppl_rollout": ("rollout perplexity", "num"),
    "ppl_trainer": ("trainer perplexity", "num"), "trainer_broken": ("the trainer is off", "bool"),
    # trainer_floor, routing_flips, routes_unusable
    "kl_share": ("floor's share of the KL", "x_or_share"), "clip_fraction": ("PPO-clipped on the floor", "share"),
    "clipped_explained": ("clipped tokens it explains", "share"), "clip_inside_floor": ("clip band inside the floor", "bool"),
    "tis_fraction": ("TIS-capped on the floor", "share"), "ess_loss_share": ("its share of 1 − ESS", "x_or_share"),
    "clip_band": ("clip band", "num"), "abs_max": ("max |φ|", "num"),
    "any_flip_share": ("tokens with a routing flip", "share"), "decision_flip_share": ("routing decisions flipped", "share"),
    "kl_k3_flipped": ("KL k3, flipped tokens", "num"), "kl_k3_unflipped": ("KL k3, the others", "num"),
    "kl_explained": ("KL routing explains", "share"), "identical": ("identical routes", "bool"),
    "layers": ("layers", "count"), "k": ("experts per token", "count"), "reason": ("why", "text"),
}
HIDDEN_PREFIXES = ("threshold_", "every_nth_", "min_tokens_")  # the detector's own settings: in summary.json


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v)) or v == []


def _value(v: Any, kind: str) -> str:
    if isinstance(v, list):
        return ", ".join(_value(x, kind) for x in v[:12]) + (" …" if len(v) > 12 else "")
    if kind == "bool":
        return "yes" if v else "no"
    if kind == "share":
        return pct(v)
    if kind == "x":
        return fmt(v, 3) + "×"
    if kind == "x_or_share":
        return fmt(v, 3) + "×" if isinstance(v, (int, float)) and v > 1 else pct(v)
    return fmt(v)


def items(evidence: Any) -> list[tuple[str, str]]:
    """(display name, formatted value) for each computed evidence value, in the detector's order; `x_se` beside `x`."""
    if not isinstance(evidence, dict):
        return []
    out = []
    for key, v in evidence.items():
        if key.endswith("_se") or key.startswith(HIDDEN_PREFIXES) or _missing(v) or isinstance(v, dict):
            continue
        if isinstance(v, list) and v and isinstance(v[0], dict):
            continue  # a table (render.views.kv_tables)
        name, kind = NAMES.get(key, (key.replace("_", " "), "num"))
        m = BY_KEY.get(key)  # a catalogue metric is written as every table writes it
        text = m.write(v) if m is not None and kind != "x" and not isinstance(v, list) else _value(v, kind)
        se = evidence.get(key + "_se")
        if not _missing(se) and se:
            text += f" ± {fmt(se, 2)}"
        out.append((name, text))
    return out

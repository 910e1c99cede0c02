"""The glossary as data: every number the reports show, in plain words, with its formula and verl's name.

Sentences that state a threshold or band read it from `tim_report.config`, so the page, the
markdown and the numbers never disagree. `reading()` turns a headline number into a one-line verdict
with the READINGS bands. Conventions: δ = trainer_logp − rollout_logp in nats, r = exp(δ) = p_train / p_rollout.
"""

from __future__ import annotations

import math
from typing import Any

from .config import (HEALTH, MEDIAN_ABS_DELTA_LARGE, MEDIAN_ABS_DELTA_NOISE, MEDIAN_NOISE_MEASURED, OUTSIDE_2X_FEW,
                     OUTSIDE_5X_FEW, PHANTOM_CLIP_MANY, PUBLISHED_BF16_KL, SAFETY_BOUND, TOKEN_MULT_PROB_ERROR_SUSPICIOUS,
                     TOP1PCT_CONCENTRATED, TOP1PCT_UNIFORM, TOPK_LOGPROBS_DEFAULT, TOPK_TOP1_DIFFER_BAD,
                     TOPK_TOP1_DIFFER_WARN, TOPK_UNRESOLVED_WARN, VERL_ALERTS, VETO, DiagnosisThresholds, Thresholds)

CONVENTIONS = (
    "δ_t = trainer_logp − rollout_logp (nats); r_t = exp(δ_t) = p_train / p_rollout. "
    "Token-mean: over all masked, valid tokens of the batch. Seq-mean: mean over sequences of per-sequence values."
)


def _pct(x: float) -> str:
    """A share of tokens as a percentage with the digits it needs: 0.1%, 0.01%, 10%."""
    return f"{x * 100:.2g}%"


def sci(x: float) -> str:
    """A threshold as the literature writes it: 1e-4, 4e-4, 0.3 (exponents for small values)."""
    if x == 0 or abs(x) > 1e-2:
        return f"{x:g}"
    mant, exp = f"{x:.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"


_KL_LO, _KL_HI = (sci(x) for x in PUBLISHED_BF16_KL)
_TH = Thresholds()
_DT = DiagnosisThresholds()
_MED_NOISE, _MED_LARGE = sci(MEDIAN_ABS_DELTA_NOISE), sci(MEDIAN_ABS_DELTA_LARGE)
HEALTH_LEGEND = f"green ≥ {HEALTH.green:g}, amber {HEALTH.amber:g}–{HEALTH.green:g}, red < {HEALTH.amber:g}"

# (bound, level, text): the first band whose bound the value is below wins; `higher_is_better`
# metrics list their bands from bad to good.

READINGS: dict[str, list[tuple[float, str, str]]] = {
    "abs_delta_median": [(1e-9, "ok", "identical: both sides produce the same numbers"),
                         (MEDIAN_ABS_DELTA_NOISE, "ok", f"the size of bf16/fp16 numerical noise (below {_MED_NOISE} nats)"),
                         (MEDIAN_ABS_DELTA_LARGE, "warn", f"elevated: above {_MED_NOISE} nats, more than precision noise gives"),
                         (math.inf, "bad", f"large (above {_MED_LARGE} nats): a bug, not precision; the two sides do not "
                                           "score the same model, context or distribution")],
    "corr_logp": [(_DT.systematic_corr_max, "bad", "weak: the two sides do not score the same model or context"),
                  (_DT.noise_corr_min, "warn", "more scatter around y = x than numerical noise gives"),
                  (math.inf, "ok", "tight: the points sit on y = x")],
    "kl_k3": [(1e-9, "ok", "identical distributions on these tokens"),
              (PUBLISHED_BF16_KL[0], "ok", f"below the range of published bf16 runs ({_KL_LO} to {_KL_HI}): "
                                           "fp16-sized or a small model"),
              (PUBLISHED_BF16_KL[1], "ok", f"within the range of published bf16 runs ({_KL_LO} to {_KL_HI})"),
              (VERL_ALERTS.max_kl_k3, "warn", "elevated: above what precision noise usually gives"),
              (math.inf, "bad", f"above verl's |kl| > {VERL_ALERTS.max_kl:g} alert")],
    "ess": [(VERL_ALERTS.min_ess, "bad", f"below verl's {VERL_ALERTS.min_ess:g} alert: the correction rests on a "
                                         "handful of tokens"),
            (HEALTH.amber, "bad", "red: the weights are concentrated"),
            (HEALTH.green, "warn", "amber: a correction loses a few percent of the batch"),
            (math.inf, "ok", "green: almost every token counts fully")],
    "outside_2x": [(1e-12, "ok", "no token would be touched by a 2x band"),
                   (OUTSIDE_2X_FEW, "warn", f"a few tokens (under {_pct(OUTSIDE_2X_FEW)}) would be clipped by a 2x band"),
                   (math.inf, "bad", f"many tokens ({_pct(OUTSIDE_2X_FEW)} or more) fall outside the 2x band, where "
                                     "precision noise puts none")],
    "outside_5x": [(1e-12, "ok", "no token outside the 5x band"),
                   (OUTSIDE_5X_FEW, "warn", f"a handful of tokens (under {_pct(OUTSIDE_5X_FEW)}) outside the 5x band"),
                   (math.inf, "bad", f"many tokens ({_pct(OUTSIDE_5X_FEW)} or more) outside the 5x band: look for a bug")],
    "phantom_clip": [(1e-12, "ok", "PPO clips nothing because of the mismatch"),
                     (PHANTOM_CLIP_MANY, "warn", f"PPO clips some tokens because of the mismatch alone (under "
                                                 f"{_pct(PHANTOM_CLIP_MANY)}, where the routing asks for a correction)"),
                     (math.inf, "bad", f"PPO clips many tokens because of the mismatch alone ({_pct(PHANTOM_CLIP_MANY)} "
                                       "or more: the routing asks for a correction)")],
    "veto_token_fraction": [(1e-12, "ok", "no token would veto its sequence"),
                            (math.inf, "bad", "some sequences would be rejected by verl's veto")],
    "top1_differ": [(1e-12, "ok", "both sides always rank the same token first"),
                    (TOPK_TOP1_DIFFER_WARN, "ok", "only near-ties flip, as precision noise does"),
                    (TOPK_TOP1_DIFFER_BAD, "warn", "the most likely token moves more often than precision noise moves it"),
                    (math.inf, "bad", "the two sides often disagree on the most likely token")],
}
READINGS["kl_union"] = READINGS["kl_k3"]  # the same quantity (mean KL per position), from the distributions

# Each entry: key (as in summary.json metrics where one exists), name, plain, formula, verl (name and
# differences, or None), and optionally higher_is_better; readings come from READINGS.
GLOSSARY: list[dict[str, Any]] = [
    {
        "key": "delta", "name": "δ (log-ratio, diff)",
        "plain": "How much more (positive) or less (negative) likely the trainer finds a sampled token than the rollout engine did, in nats.",
        "formula": "δ_t = trainer_logp_t − rollout_logp_t", "verl": "log_ratio (old_log_prob − rollout_log_prob)",
    },
    {
        "key": "r", "name": "r (importance ratio)",
        "plain": "The per-token importance weight an off-policy correction would use. 1 means both sides agree exactly.",
        "formula": "r_t = exp(δ_t) = p_train / p_rollout", "verl": "rollout_is weight (before truncation)",
    },
    {
        "key": "abs_delta_median", "name": "median |δ|",
        "plain": ("The typical size of the disagreement on one token, in nats. bf16 and fp16 against fp32 measure "
                  f"{sci(MEDIAN_NOISE_MEASURED[0])} to {sci(MEDIAN_NOISE_MEASURED[1])} nats on our fixtures; numerical "
                  f"noise stays below {_MED_NOISE}."),
        "formula": "median_t |δ_t|", "verl": None,
    },
    {
        "key": "abs_delta_mean", "name": "mean |δ|",
        "plain": "The average size of the per-token disagreement, in nats, with its standard error.",
        "formula": "token-mean |δ_t|", "verl": None,
    },
    {
        "key": "abs_delta_p99", "name": "p99 |δ|", "plain": "99% of tokens disagree by less than this many nats.",
        "formula": "99th percentile of |δ_t|", "verl": None,
    },
    {
        "key": "abs_delta_max", "name": "max |δ|", "plain": "The single worst token's disagreement, in nats.",
        "formula": "max_t |δ_t|", "verl": None,
    },
    {
        "key": "bias", "name": "bias", "plain": "The signed mean of δ: positive means the trainer is systematically more confident than the rollout engine.",
        "formula": "token-mean δ_t", "verl": "equals −rollout_corr/kl",
    },
    {
        "key": "corr_logp", "name": "log-prob correlation",
        "plain": f"Pearson correlation between the two sides' log-probs over all tokens. Noise keeps it above {_DT.noise_corr_min:g} "
                 "(the diagnosis's limit; bf16 usually gives 0.999 or more); a bug drags it down.",
        "formula": "pearson(rollout_logp, trainer_logp)", "verl": None, "higher_is_better": True,
    },
    {
        "key": "spearman_logp", "name": "Spearman log-prob correlation",
        "plain": "Rank correlation of the log-probs; insensitive to outliers (computed on a subsample of tokens when the batch is large).",
        "formula": "spearman(rollout_logp, trainer_logp)", "verl": None,
    },
    {
        "key": "corr_prob", "name": "probability correlation", "plain": "Pearson correlation between the two sides' token probabilities.",
        "formula": "pearson(p_rollout, p_train)", "verl": "training/rollout_actor_probs_pearson_corr",
    },
    {
        "key": "kl_k3", "name": "KL (k3)",
        "plain": f"An always-positive estimate of KL(rollout ‖ trainer) per token. Published dense bf16 runs sit around "
                 f"{_KL_LO} to {_KL_HI}.",
        "formula": "token-mean (r_t − 1 − δ_t)", "verl": "rollout_corr/k3_kl (same formula; verl does not clamp δ)",
    },
    {
        "key": "kl_k1", "name": "KL (k1)",
        "plain": "The plain estimate of KL(rollout ‖ trainer); unbiased but noisy, and it can be negative on a finite batch.",
        "formula": "token-mean (−δ_t)", "verl": "rollout_corr/kl (ms-swift reports the opposite sign)",
    },
    {
        "key": "kl_k2", "name": "KL (k2)", "plain": "A low-variance second-order estimate of the KL.",
        "formula": "token-mean δ_t² / 2", "verl": None,
    },
    {
        "key": "chi2_token", "name": "χ² (token)",
        "plain": "How far the importance weights spread from their mean; it sets the variance of a token-level IS correction. "
                 "Never negative, and equal to 1/ESS − 1.",
        "formula": "token-mean(r_t²) / token-mean(r_t)² − 1",
        "verl": f"rollout_corr/chi2_token is token-mean r_t² − 1 without the normalisation (it can go below 0 when mean r < 1); "
                f"alert above {VERL_ALERTS.max_chi2_token:g}",
    },
    {
        "key": "chi2_seq", "name": "χ² (sequence)",
        "plain": "The same for whole-sequence weights, which multiply per-token ratios and so blow up with length.",
        "formula": f"seq-mean(w_i²) / seq-mean(w_i)² − 1, w_i = exp(Σ_t δ_t), Σδ clamped to ±{SAFETY_BOUND:g}",
        "verl": "rollout_corr/chi2_seq (seq-mean w_i² − 1, not normalised)",
    },
    {
        "key": "ess", "name": "ESS (token)",
        "plain": "Effective sample size of the token weights as a fraction of the batch: 1 means every token counts fully, lower means a few tokens carry the weight.",
        "formula": "(Σ_t r_t)² / (N · Σ_t r_t²)",
        "verl": f"verl alerts below {VERL_ALERTS.min_ess:g}; tim-report colours {HEALTH_LEGEND}",
        "higher_is_better": True,
    },
    {
        "key": "ess_seq", "name": "ESS (sequence)", "plain": "The same with one weight per sequence, exp(Σ_t δ_t).",
        "formula": "(Σ_i w_i)² / (N · Σ_i w_i²), w_i = exp(Σ_t δ_t)", "verl": None,
    },
    {
        "key": "outside_2x", "name": "outside 2x",
        "plain": f"Share of tokens whose ratio lies outside [1/{_TH.band_2x:g}, {_TH.band_2x:g}]: what a 2x truncation or mask would touch.",
        "formula": f"mean_t [r_t < 1/{_TH.band_2x:g} or r_t > {_TH.band_2x:g}]", "verl": "verl's documented 2x band",
    },
    {
        "key": "outside_5x", "name": "outside 5x",
        "plain": f"Share of tokens whose ratio lies outside [1/{_TH.band_5x:g}, {_TH.band_5x:g}]; such tokens are almost never explained by precision noise.",
        "formula": f"mean_t [r_t < 1/{_TH.band_5x:g} or r_t > {_TH.band_5x:g}]", "verl": "verl's documented 5x band",
    },
    {
        "key": "phantom_clip", "name": "phantom clip",
        "plain": "Share of tokens PPO would clip before the policy has moved at all, because the mismatch alone pushes r outside the clip range.",
        "formula": "mean_t [r_t < 1 − ε_low or r_t > 1 + ε_high]", "verl": "part of actor/pg_clipfrac at the first mini-batch",
    },
    {
        "key": "veto_token_fraction", "name": "veto",
        "plain": "Share of tokens with r below verl's veto threshold; any such token makes verl reject its whole sequence.",
        "formula": f"mean_t [r_t < {sci(VETO)}]; sequences: share holding one", "verl": "rollout_token_veto_threshold",
    },
    {
        "key": "token_mult_prob_error", "name": "token mult. prob error",
        "plain": f"The average factor by which the two probabilities differ; about 1 when healthy, above "
                 f"{TOKEN_MULT_PROB_ERROR_SUSPICIOUS:g} suspicious.",
        "formula": "token-mean exp(|δ_t|)", "verl": "NeMo-RL token_mult_prob_error",
    },
    {
        "key": "top1pct_mass", "name": "top-1% weight mass",
        "plain": f"Share of the total weight carried by the largest 1% of weights: about {TOP1PCT_UNIFORM:g} when uniform, "
                 f"above {TOP1PCT_CONCENTRATED:g} concentrated.",
        "formula": "Σ(top 1% of r_t) / Σ r_t", "verl": None,
    },
    {
        "key": "abs_dp", "name": "|Δp|", "plain": "Absolute difference of the two probabilities of a token; small on unlikely tokens even when δ is large.",
        "formula": "|exp(trainer_logp) − exp(rollout_logp)|", "verl": "training/rollout_probs_diff_mean / _max",
    },
    {
        "key": "ppl", "name": "perplexity (rollout, trainer)",
        "plain": "Per-sequence perplexity under each side, averaged over sequences. A trainer perplexity far above the rollout's on the same tokens means a different model or context.",
        "formula": "seq-mean exp(−mean_t logp_t)", "verl": "rollout_corr/rollout_ppl, rollout_corr/training_ppl",
    },
    {
        "key": "log_ppl_diff", "name": "log-perplexity difference", "plain": "Per-sequence difference of the mean log-probs, averaged over sequences.",
        "formula": "seq-mean (mean_t rollout_logp − mean_t trainer_logp)", "verl": "rollout_corr/log_ppl_diff",
    },
    {
        "key": "seq_log_ratio", "name": "sequence log-ratio Σδ",
        "plain": "The sum of δ over a response: the log of the product of its token ratios, the weight a sequence-level correction uses.",
        "formula": "Σ_t δ_t per sequence", "verl": f"verl's sequence-level IS uses the same sum (clamped to ±{SAFETY_BOUND:g})",
    },
    {
        "key": "length_growth", "name": "drift exponent b",
        "plain": "How |Σδ| grows with response length: b ≈ 0.5 is a random walk (noise cancels), b ≈ 1 means δ has a consistent sign (systematic drift).",
        "formula": "fit log|Σδ| = a + b·log(length) over sequences", "verl": None,
    },
    {
        "key": "routing", "name": "routing",
        "plain": "What to do with each group: train, train with an IS correction, or quarantine it.",
        "formula": f"quarantine if any r < veto; train_with_correction if PPO-clipped share > {_TH.route_clip_fraction:g}; else train",
        "verl": None,
    },
    {
        "key": "what_if", "name": "what-if corrections",
        "plain": "The share of tokens and sequences each common correction would truncate, mask or reject on this batch.",
        "formula": (f"token TIS r > {_TH.tis_token_cap:g}; sequence mask Πr > {_TH.seq_mask_cap:g}; IcePop r ∉ "
                    f"[{_TH.icepop_low:g}, {_TH.icepop_high:g}]; Geo-RS exp(mean δ) ∉ [{_TH.geo_low:g}, {_TH.geo_high:g}]; "
                    f"veto r < {sci(VETO)}"),
        "verl": "rollout_is=token, rollout_rs=geometric, rollout_token_veto_threshold; TRL sequence_mask; OpenRLHF IcePop",
    },
    {
        "key": "top1_differ", "name": "top-1 differs",
        "plain": f"Share of positions where the two sides' most likely next token is not the same (llama.cpp's \"Same top p\" "
                 f"turned around). Needs both sides' top-k log-probs (capture records {TOPK_LOGPROBS_DEFAULT} by default). "
                 f"Up to {TOPK_TOP1_DIFFER_WARN:.0%} is near-ties flipping under precision noise; above "
                 f"{TOPK_TOP1_DIFFER_BAD:.0%} the two sides rank tokens differently.",
        "formula": "token-mean [argmax_x p_rollout(x) ≠ argmax_x p_train(x)]", "verl": None,
    },
    {
        "key": "kl_union", "name": "KL on the top-k union",
        "plain": "KL(rollout ‖ trainer) of the whole next-token distributions, averaged over positions: the quantity KL k3 "
                 "estimates from one sampled token per position, computed instead from both sides' top-k lists, so far less noisy. "
                 "A token in one list but not the other gets that side's k-th probability at most (and no more than its "
                 "leftover mass shared out); the mass outside both lists is one 'other' bucket.",
        "formula": "mean_t Σ_{x ∈ A∪B∪{other}} p̂_t(x) log(p̂_t(x) / q̂_t(x)); p̂ = min(p_(k), m_P / |B∖A|) off A, m_P = 1 − Σ_A p",
        "verl": None,
    },
    {
        "key": "kl_lower", "name": "KL lower bound (shared top-k)",
        "plain": "The same KL with only the tokens in both top-k lists kept apart and everything else lumped into one bucket: "
                 "merging outcomes never raises a KL, so the true KL is at least this.",
        "formula": "mean_t Σ_{x ∈ A∩B} p log(p/q) + p_o log(p_o/q_o), p_o = 1 − Σ_{A∩B} p, q_o = 1 − Σ_{A∩B} q",
        "verl": None,
    },
    {
        "key": "hidden_tv", "name": "what truncation can hide",
        "plain": "Total variation between the two distributions is known to within this: the tokens outside the shared top-k "
                 f"can add at most min(p_o, q_o). When the mass outside the shared top-k averages more than {TOPK_UNRESOLVED_WARN:g}, "
                 "the report calls the top-k estimates loose (capture with a larger --top-k-logprobs).",
        "formula": "½Σ_{A∩B}|p − q| + ½|p_o − q_o| ≤ TV ≤ ½Σ_{A∩B}|p − q| + ½(p_o + q_o); hidden = mean_t min(p_o, q_o)",
        "verl": None,
    },
    {
        "key": "se", "name": "± (standard error)",
        "plain": "The standard error of a mean: how much the number would move on another batch of the same size. Tokens of one "
                 "sequence are not independent, so token-means use sequences as clusters, which is wider and more honest than std/√N.",
        "formula": "cluster-robust (CR1) over sequences: √(Σ_g (S_g − n_g·mean)² · G/(G−1)) / N; seq-means: std / √(sequences)",
        "verl": None,
    },
]

for _entry in GLOSSARY:
    if _entry["key"] in READINGS:
        _entry["readings"] = READINGS[_entry["key"]]

BY_KEY: dict[str, dict[str, Any]] = {e["key"]: e for e in GLOSSARY}


def reading(key: str, value: float | None) -> tuple[str, str]:
    """(level, sentence) for a headline number; ("na", ...) when the value is missing or has no bands."""
    bands = READINGS.get(key)
    if value is None or key not in BY_KEY or bands is None or not math.isfinite(value):
        return "na", "not available" if value is None else ""
    for bound, level, text in bands:
        if value < bound:
            return level, text
    return bands[-1][1], bands[-1][2]

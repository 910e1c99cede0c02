"""The glossary as data: every number the reports show, in plain words, with its formula and verl's name.

The HTML page and the markdown report both render from `GLOSSARY`; `reading()` turns a headline
number into a one-line verdict using the `readings` bands (first band whose bound the value is
below wins; `higher_is_better` flips the comparison). Conventions: δ = trainer_logp − rollout_logp
in nats, r = exp(δ) = p_train / p_rollout.
"""

from __future__ import annotations

import math
from typing import Any

CONVENTIONS = (
    "δ_t = trainer_logp − rollout_logp (nats); r_t = exp(δ_t) = p_train / p_rollout. "
    "Token-mean: over all masked, valid tokens of the batch. Seq-mean: mean over sequences of per-sequence values."
)

# Each entry: key (as in summary.json metrics where one exists), name, plain, formula, verl (name and
# differences, or None), and optionally readings: [(bound, level, text)] with level in ok / warn / bad.
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
        "plain": "The typical size of the disagreement on one token, in nats. bf16 engine drift is usually around 1e-3 to 1e-2.",
        "formula": "median_t |δ_t|", "verl": None,
        "readings": [(1e-9, "ok", "identical: both sides produce the same numbers"),
                     (0.02, "ok", "the size of bf16/fp16 numerical noise"),
                     (0.5, "warn", "elevated: more than precision noise alone usually gives"),
                     (math.inf, "bad", "large: the two sides are probably not scoring the same model or context")],
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
        "plain": "Pearson correlation between the two sides' log-probs over all tokens. Noise keeps it above 0.999; a bug drags it down.",
        "formula": "pearson(rollout_logp, trainer_logp)", "verl": None, "higher_is_better": True,
        "readings": [(0.95, "bad", "weak: the two sides rank tokens differently"),
                     (0.999, "warn", "visible scatter around y = x"),
                     (math.inf, "ok", "tight: the points sit on y = x")],
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
        "plain": "An always-positive estimate of KL(rollout ‖ trainer) per token. Published dense bf16 runs sit around 4e-4 to 1e-2.",
        "formula": "token-mean (r_t − 1 − δ_t)", "verl": "rollout_corr/k3_kl (same formula; verl does not clamp δ)",
        "readings": [(1e-9, "ok", "identical distributions on these tokens"),
                     (4e-4, "ok", "below the range of published bf16 runs (4e-4 to 1e-2): fp16-sized or a small model"),
                     (1e-2, "ok", "within the range of published bf16 runs (4e-4 to 1e-2)"),
                     (0.1, "warn", "elevated: above what precision noise usually gives"),
                     (math.inf, "bad", "above verl's |kl| > 0.1 alert")],
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
        "plain": "How far the importance weights spread from 1; it sets the variance of a token-level IS correction.",
        "formula": "token-mean r_t² − 1", "verl": "rollout_corr/chi2_token (alert above 1)",
    },
    {
        "key": "chi2_seq", "name": "χ² (sequence)",
        "plain": "The same for whole-sequence weights, which multiply per-token ratios and so blow up with length.",
        "formula": "seq-mean exp(2·Σ_t δ_t) − 1, Σδ clamped to ±20", "verl": "rollout_corr/chi2_seq",
    },
    {
        "key": "ess", "name": "ESS (token)",
        "plain": "Effective sample size of the token weights as a fraction of the batch: 1 means every token counts fully, lower means a few tokens carry the weight.",
        "formula": "(Σ_t r_t)² / (N · Σ_t r_t²)", "verl": "verl alerts below 0.3; tim-report colours green ≥ 0.99, amber 0.95–0.99, red < 0.95",
        "higher_is_better": True,
        "readings": [(0.3, "bad", "below verl's 0.3 alert: the correction rests on a handful of tokens"),
                     (0.95, "bad", "red: the weights are concentrated"),
                     (0.99, "warn", "amber: a correction loses a few percent of the batch"),
                     (math.inf, "ok", "green: almost every token counts fully")],
    },
    {
        "key": "ess_seq", "name": "ESS (sequence)", "plain": "The same with one weight per sequence, exp(Σ_t δ_t).",
        "formula": "(Σ_i w_i)² / (N · Σ_i w_i²), w_i = exp(Σ_t δ_t)", "verl": None,
    },
    {
        "key": "outside_2x", "name": "outside 2x",
        "plain": "Share of tokens whose ratio lies outside [1/2, 2]: what a 2x truncation or mask would touch.",
        "formula": "mean_t [r_t < 1/2 or r_t > 2]", "verl": "verl's documented 2x band",
        "readings": [(1e-12, "ok", "no token would be touched by a 2x band"),
                     (1e-3, "warn", "a few tokens would be clipped by a 2x band"),
                     (math.inf, "bad", "many tokens fall outside the 2x band")],
    },
    {
        "key": "outside_5x", "name": "outside 5x",
        "plain": "Share of tokens whose ratio lies outside [1/5, 5]; such tokens are almost never explained by precision noise.",
        "formula": "mean_t [r_t < 1/5 or r_t > 5]", "verl": "verl's documented 5x band",
        "readings": [(1e-12, "ok", "no token outside the 5x band"),
                     (1e-4, "warn", "a handful of tokens outside the 5x band"),
                     (math.inf, "bad", "many tokens outside the 5x band: look for a bug")],
    },
    {
        "key": "phantom_clip", "name": "phantom clip",
        "plain": "Share of tokens PPO would clip before the policy has moved at all, because the mismatch alone pushes r outside the clip range.",
        "formula": "mean_t [r_t < 1 − ε_low or r_t > 1 + ε_high]", "verl": "part of actor/pg_clipfrac at the first mini-batch",
        "readings": [(1e-12, "ok", "PPO clips nothing because of the mismatch"),
                     (0.01, "warn", "PPO clips some tokens because of the mismatch alone"),
                     (math.inf, "bad", "PPO clips many tokens because of the mismatch alone")],
    },
    {
        "key": "veto_token_fraction", "name": "veto",
        "plain": "Share of tokens with r below verl's veto threshold; any such token makes verl reject its whole sequence.",
        "formula": "mean_t [r_t < 1e-4]; sequences: share holding one", "verl": "rollout_token_veto_threshold",
        "readings": [(1e-12, "ok", "no token would veto its sequence"),
                     (math.inf, "bad", "some sequences would be rejected by verl's veto")],
    },
    {
        "key": "token_mult_prob_error", "name": "token mult. prob error",
        "plain": "The average factor by which the two probabilities differ; about 1 when healthy, above 1.05 suspicious.",
        "formula": "token-mean exp(|δ_t|)", "verl": "NeMo-RL token_mult_prob_error",
    },
    {
        "key": "top1pct_mass", "name": "top-1% weight mass",
        "plain": "Share of the total weight carried by the largest 1% of weights: about 0.01 when uniform, above 0.05 concentrated.",
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
        "formula": "Σ_t δ_t per sequence", "verl": "verl's sequence-level IS uses the same sum (clamped to ±20)",
    },
    {
        "key": "length_growth", "name": "drift exponent b",
        "plain": "How |Σδ| grows with response length: b ≈ 0.5 is a random walk (noise cancels), b ≈ 1 means δ has a consistent sign (systematic drift).",
        "formula": "fit log|Σδ| = a + b·log(length) over sequences", "verl": None,
    },
    {
        "key": "routing", "name": "routing",
        "plain": "What to do with each group: train, train with an IS correction, or quarantine it.",
        "formula": "quarantine if any r < veto; train_with_correction if PPO-clipped share > 0.1; else train", "verl": None,
    },
    {
        "key": "what_if", "name": "what-if corrections",
        "plain": "The share of tokens and sequences each common correction would truncate, mask or reject on this batch.",
        "formula": "token TIS r > 2; sequence mask Πr > 3; IcePop r ∉ [0.5, 5]; Geo-RS exp(mean δ) ∉ [0.999, 1.001]; veto r < 1e-4",
        "verl": "rollout_is=token, rollout_rs=geometric, rollout_token_veto_threshold; TRL sequence_mask; OpenRLHF IcePop",
    },
    {
        "key": "se", "name": "± (standard error)", "plain": "The standard error of a mean: how much the number would move on another batch of the same size.",
        "formula": "std / √N", "verl": None,
    },
]

BY_KEY: dict[str, dict[str, Any]] = {e["key"]: e for e in GLOSSARY}


def reading(key: str, value: float | None) -> tuple[str, str]:
    """(level, sentence) for a headline number; ("na", ...) when the value is missing or has no bands."""
    entry = BY_KEY.get(key)
    if value is None or entry is None or "readings" not in entry or not math.isfinite(value):
        return "na", "not available" if value is None else ""
    for bound, level, text in entry["readings"]:
        if value < bound:
            return level, text
    return entry["readings"][-1][1], entry["readings"][-1][2]


def health(ess: float | None) -> str:
    """The batch colour: green ESS ≥ 0.99, amber 0.95–0.99, red < 0.95 (design §4)."""
    if ess is None or not math.isfinite(ess):
        return "unknown"
    return "green" if ess >= 0.99 else ("amber" if ess >= 0.95 else "red")

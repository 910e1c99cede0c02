"""The metric catalogue: one entry per metric, and the views that name which metrics each place shows.

An entry says everything a layer needs to show or judge a metric without restating it: its key (as in
summary.json), its name, unit (how it is written), which way is worse and what the ideal is, its glossary
text, its reading bands and their sources, its trend and history floors, and whether `check` gates it and
with which option. The glossary, headline cards, index columns, trend panels, markdown tables, index rows,
`compare`, the history gate and `check`'s options all read it. Adding a metric is the function that
computes it (`tim_report.analysis`), its entry here (and its key in the views that show it), and its tests.

Terms that are not a number of the batch (δ, r, routing, …) are entries too, of unit "term", so the
glossary is the catalogue read in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import (
    CONFIDENT_GAP,
    CONFIDENT_P,
    HEALTH,
    MEDIAN_ABS_DELTA_LARGE,
    MEDIAN_ABS_DELTA_NOISE,
    MEDIAN_NOISE_MEASURED,
    NOISE_BANDS,
    OUTSIDE_2X_FEW,
    OUTSIDE_5X_FEW,
    PHANTOM_CLIP_MANY,
    PHANTOM_CLIP_NOISE,
    PUBLISHED_BANDS,
    PUBLISHED_BF16_KL,
    SAFETY_BOUND,
    TOKEN_MULT_PROB_ERROR_SUSPICIOUS,
    TOP1PCT_CONCENTRATED,
    TOP1PCT_UNIFORM,
    TOPK_LOGPROBS_DEFAULT,
    TOPK_TOP1_DIFFER_BAD,
    TOPK_TOP1_DIFFER_WARN,
    TOPK_UNRESOLVED_WARN,
    VERL_ALERTS,
    VETO,
    DiagnosisThresholds,
    Thresholds,
)
from .numbers import fixed, fmt, pct, plain, sci

UNITS = ("nats", "kl", "share", "ess", "corr", "count", "factor", "number", "term")


@dataclass(frozen=True)
class Reading:
    """A band of values and what a value in it means: the first band whose `below` the value is under wins."""

    below: float
    level: str  # ok | warn | bad
    text: str


@dataclass(frozen=True)
class Trend:
    """What counts as a change of the metric's level over a run's steps (analysis/trend.py)."""

    scale: str  # "ratio": searched in logs, a change reads "N× higher"; "difference": "a → b"
    min_ratio: float  # the levels must differ by this factor (from 0 counts) ...
    min_diff: float  # ... and by this much in absolute terms


@dataclass(frozen=True)
class Gate:
    """`tim-report check`'s limit on the metric: the option that sets it and its default (None: off)."""

    option: str
    default: float | None
    help: str
    absolute: bool = False  # compare |value| (kl_k1 can be negative)


@dataclass(frozen=True)
class Metric:
    key: str
    name: str
    unit: str = "number"  # how a value is written (UNITS); "term": a word of the glossary, not a number
    ideal: float | None = None  # the value of a perfect match (None: context, no direction)
    worse: str | None = None  # "up", "down" or "both" (away from the ideal either way)
    plain: str | None = None  # the glossary's sentence; None keeps the entry out of the glossary
    formula: str | None = None
    verl: str | None = None  # verl's name and how it differs
    readings: tuple[Reading, ...] = ()
    trend: Trend | None = None
    history_floor: float | None = None  # `check --history`: the least a band reaches past the median
    gate: Gate | None = None
    also: tuple[str, str] | None = None  # (companion key, what it counts): said beside the reading

    def write(self, x) -> str:
        """A value as every table writes it."""
        if self.unit == "share":
            return pct(x)
        if self.unit == "ess":
            return fixed(x, 4)
        if self.unit == "corr":
            return fixed(x, 6) if x is not None else "—"
        return fmt(x)

    def card(self, metrics: dict) -> str:
        """The value with its standard error and unit, as a headline card shows it."""
        text = self.write(metrics.get(self.key))
        se = metrics.get(self.key + "_se")
        if se is not None and self.unit not in ("share", "ess", "corr"):
            text += f" ± {fmt(se, 2)}"
        return text + (" nats" if self.unit == "nats" else "")

    def reading(self, value) -> tuple[str, str]:
        """(level, sentence) for a value; ("na", ...) when it is missing or the metric has no bands."""
        if value is None or not self.readings or not math.isfinite(value):
            return "na", "not available" if value is None else ""
        for band in self.readings:
            if value < band.below:
                return band.level, band.text
        return self.readings[-1].level, self.readings[-1].text

    @property
    def better(self) -> str | None:
        """compare.json's label for which way is better: lower, zero (|value| lower), one (closer to 1), or None."""
        if self.ideal is None:
            return None
        return "one" if self.ideal == 1 else ("lower" if self.worse == "up" else "zero")

    @property
    def better_text(self) -> str:
        if self.ideal is None:
            return "context"
        return "lower is better" if self.ideal == 0 and self.worse == "up" else f"closer to {plain(self.ideal)} is better"


_TH, _DT = Thresholds(), DiagnosisThresholds()
_DENSE = PUBLISHED_BANDS[("dense", "bf16")]
_KL_LO, _KL_HI = (sci(x) for x in _DENSE.kl_k3)
_MED_NOISE, _MED_LARGE = sci(MEDIAN_ABS_DELTA_NOISE), sci(MEDIAN_ABS_DELTA_LARGE)
HEALTH_LEGEND = f"green ≥ {plain(HEALTH.green)}, amber {plain(HEALTH.amber)}–{plain(HEALTH.green)}, red < {plain(HEALTH.amber)}"
# config.step_health: the ESS's colour, never greener than the verdict beside it
HEALTH_VERDICT = "never greener than the verdict: red when systematic or not to be trained on, at least amber when elevated"


def _p(x: float) -> str:
    """A threshold share in a sentence: 0.1%, 0.01%, 10%."""
    return pct(x, 2)


# The one KL band table (every place that says what KL k3 is normal reads it): the published bands of config.
KL_BANDS = tuple((b.name, sci(b.kl_k3[0]), sci(b.kl_k3[1])) for b in PUBLISHED_BANDS.values())
KL_BANDS_SENTENCE = "; ".join(f"{name} {lo} to {hi}" for name, lo, hi in KL_BANDS)


def kl_band_table() -> dict:
    """The KL band table as the page, report.md and the index show it: band, typical KL k3 of published runs, the
    noise ceilings the diagnosis reads a batch of that band against, and the source."""
    return {"columns": ["band", "KL k3 of published runs", "noise ceiling (KL k3, mean |δ|)", "source"],
            "rows": [[b.name, f"{sci(b.kl_k3[0])} to {sci(b.kl_k3[1])}", f"{sci(b.kl_k3[1])}, {sci(b.abs_delta_mean_max)}",
                      b.source] for b in PUBLISHED_BANDS.values()]}


KL_READINGS = (
    Reading(1e-9, "ok", "identical distributions on these tokens"),
    Reading(_DENSE.kl_k3[0], "ok", f"below the published {_DENSE.name} band ({_KL_LO} to {_KL_HI}): fp16-sized or a small model"),
    Reading(_DENSE.kl_k3[1], "ok", f"within the published {_DENSE.name} band ({_KL_LO} to {_KL_HI})"),
    Reading(VERL_ALERTS.max_kl_k3, "warn", "elevated: above what precision noise usually gives"),
    Reading(math.inf, "bad", f"above verl's |kl| > {plain(VERL_ALERTS.max_kl)} alert"),
)

# Floors on the size of a change over a run's steps, on top of the change-point test (which asks that a shift stand
# out of the series' own step-to-step noise): bf16 runs wander by 10-30% in |δ| from step to step with the batch's
# content, so a level change under 1.5× (|δ|, and the shares of tokens) or 2× (KL, which goes roughly as |δ|²) is not
# worth a sentence; a share of tokens must also move by a tenth of a percentage point (outside 2x / 5x, phantom
# clipping) or one in 100k tokens (veto); ESS by 0.005 (a tenth of the amber band's width); and data problems by one
# token per step, since a healthy run has none.
_RATIO_15, _KL_TREND = Trend("ratio", 1.5, 0.0), Trend("ratio", 2.0, 0.0)
_SHARE_TREND = Trend("difference", 1.5, 1e-3)

# The history floors (`check --history`) keep a near-zero median (identical engines, fp32) from turning sampling noise
# into a failure: a rise smaller than this is never a violation. KL: the bottom of the published bf16 band; |δ|: the
# fp16 noise band's mean |δ|; token fractions: one token in a thousand; ESS: a drop of 0.01.
_DELTA_FLOOR, _SHARE_FLOOR, _ESS_FLOOR = NOISE_BANDS["fp16"].abs_delta_mean_max, 1e-3, 1e-2

CATALOGUE: tuple[Metric, ...] = (
    Metric("delta", "δ (log-ratio, diff)", "term",
           plain="How much more (positive) or less (negative) likely the trainer finds a sampled token than the rollout "
                 "engine did, in nats.",
           formula="δ_t = trainer_logp_t − rollout_logp_t", verl="log_ratio (old_log_prob − rollout_log_prob)"),
    Metric("r", "r (importance ratio)", "term",
           plain="The per-token importance weight an off-policy correction would use. 1 means both sides agree exactly.",
           formula="r_t = exp(δ_t) = p_train / p_rollout", verl="rollout_is weight (before truncation)"),
    Metric("abs_delta_median", "median |δ|", "nats", 0, "up",
           plain=("The typical size of the disagreement on one token, in nats. bf16 and fp16 against fp32 measure "
                  f"{sci(MEDIAN_NOISE_MEASURED[0])} to {sci(MEDIAN_NOISE_MEASURED[1])} nats on a tiny model and on "
                  f"SmolLM2-135M; numerical noise stays below {_MED_NOISE}."),
           formula="median_t |δ_t|",
           readings=(Reading(1e-9, "ok", "identical: both sides produce the same numbers"),
                     Reading(MEDIAN_ABS_DELTA_NOISE, "ok", f"the size of bf16/fp16 numerical noise (below {_MED_NOISE} nats)"),
                     Reading(MEDIAN_ABS_DELTA_LARGE, "warn", f"elevated: above {_MED_NOISE} nats, more than precision noise gives"),
                     Reading(math.inf, "bad", f"large (above {_MED_LARGE} nats): a bug, not precision; the two sides do not "
                                              "score the same model, context or distribution")),
           trend=_RATIO_15, history_floor=_DELTA_FLOOR),
    Metric("abs_delta_mean", "mean |δ|", "nats", 0, "up",
           plain="The average size of the per-token disagreement, in nats, with its standard error.",
           formula="token-mean |δ_t|", trend=_RATIO_15, history_floor=_DELTA_FLOOR),
    Metric("abs_delta_p99", "p99 |δ|", "nats", 0, "up", plain="99% of tokens disagree by less than this many nats.",
           formula="99th percentile of |δ_t|"),
    Metric("abs_delta_max", "max |δ|", "nats", 0, "up", plain="The single worst token's disagreement, in nats.",
           formula="max_t |δ_t|"),
    Metric("bias", "bias", "nats", 0, "both",
           plain="The signed mean of δ: positive means the trainer is systematically more confident than the rollout engine.",
           formula="token-mean δ_t", verl="equals −rollout_corr/kl"),
    Metric("corr_logp", "log-prob correlation", "corr", 1, "down",
           plain=f"Pearson correlation between the two sides' log-probs over all tokens. Noise keeps it above "
                 f"{plain(_DT.noise_corr_min)} (the diagnosis's limit; bf16 usually gives 0.999 or more); a bug drags it down.",
           formula="pearson(rollout_logp, trainer_logp)",
           readings=(Reading(_DT.systematic_corr_max, "bad", "weak: the two sides do not score the same model or context"),
                     Reading(_DT.noise_corr_min, "warn", "more scatter around y = x than numerical noise gives"),
                     Reading(math.inf, "ok", "tight: the points sit on y = x"))),
    Metric("spearman_logp", "Spearman log-prob correlation", "corr", 1, "down",
           plain="Rank correlation of the log-probs; insensitive to outliers (computed on a subsample of tokens when the "
                 "batch is large).",
           formula="spearman(rollout_logp, trainer_logp)"),
    Metric("corr_prob", "probability correlation", "corr", 1, "down",
           plain="Pearson correlation between the two sides' token probabilities.",
           formula="pearson(p_rollout, p_train)", verl="training/rollout_actor_probs_pearson_corr"),
    Metric("kl_k3", "KL k3", "kl", 0, "up",
           plain=f"An always-positive estimate of KL(rollout ‖ trainer) per token. Published runs sit at: {KL_BANDS_SENTENCE} "
                 "(the KL band table).",
           formula="token-mean (r_t − 1 − δ_t)", verl="rollout_corr/k3_kl (same formula; verl does not clamp δ)",
           readings=KL_READINGS, trend=_KL_TREND, history_floor=PUBLISHED_BF16_KL[0],
           gate=Gate("--max-kl-k3", VERL_ALERTS.max_kl_k3, "Fail when kl_k3 exceeds this.")),
    Metric("kl_k1", "KL k1", "kl", 0, "both",
           plain="The plain estimate of KL(rollout ‖ trainer); unbiased but noisy, and it can be negative on a finite batch.",
           formula="token-mean (−δ_t)", verl="rollout_corr/kl (ms-swift reports the opposite sign)",
           gate=Gate("--max-kl", VERL_ALERTS.max_kl, "Fail when |kl_k1| (verl rollout_corr/kl) exceeds this.", absolute=True)),
    Metric("kl_k2", "KL k2", "kl", 0, "up", plain="A low-variance second-order estimate of the KL.",
           formula="token-mean δ_t² / 2"),
    Metric("chi2_token", "χ² (token)", "number", 0, "up",
           plain="How far the importance weights spread from their mean; it sets the variance of a token-level IS "
                 "correction. Never negative, and equal to 1/ESS − 1.",
           formula="token-mean(r_t²) / token-mean(r_t)² − 1",
           verl=f"rollout_corr/chi2_token is token-mean r_t² − 1 without the normalisation (it can go below 0 when mean "
                f"r < 1); alert above {plain(VERL_ALERTS.max_chi2_token)}",
           gate=Gate("--max-chi2-token", VERL_ALERTS.max_chi2_token, "Fail when chi2_token exceeds this.")),
    Metric("chi2_seq", "χ² (sequence)", "number", 0, "up",
           plain="The same for whole-sequence weights, which multiply per-token ratios and so blow up with length.",
           formula=f"seq-mean(w_i²) / seq-mean(w_i)² − 1, w_i = exp(Σ_t δ_t), Σδ clamped to ±{plain(SAFETY_BOUND)}",
           verl="rollout_corr/chi2_seq (seq-mean w_i² − 1, not normalised)"),
    Metric("ess", "ESS", "ess", 1, "down",
           plain="Effective sample size of the token weights as a fraction of the batch: 1 means every token counts "
                 "fully, lower means a few tokens carry the weight.",
           formula="(Σ_t r_t)² / (N · Σ_t r_t²)",
           verl=f"verl alerts below {plain(VERL_ALERTS.min_ess)}; tim-report colours {HEALTH_LEGEND}",
           readings=(Reading(VERL_ALERTS.min_ess, "bad", f"below verl's {plain(VERL_ALERTS.min_ess)} alert: the correction "
                                                         "rests on a handful of tokens"),
                     Reading(HEALTH.amber, "bad", "red: the weights are concentrated"),
                     Reading(HEALTH.green, "warn", "amber: a correction loses a few percent of the batch"),
                     Reading(math.inf, "ok", "green: almost every token counts fully")),
           trend=Trend("difference", 1.0, 0.005), history_floor=_ESS_FLOOR,
           gate=Gate("--min-ess", VERL_ALERTS.min_ess, "Fail when token ESS is below this.")),
    Metric("ess_seq", "ESS (sequence)", "ess", 1, "down", plain="The same with one weight per sequence, exp(Σ_t δ_t).",
           formula="(Σ_i w_i)² / (N · Σ_i w_i²), w_i = exp(Σ_t δ_t)",
           gate=Gate("--min-ess-seq", None, "Fail when sequence ESS is below this (off by default).")),
    Metric("outside_2x", "outside 2x", "share", 0, "up",
           plain=f"Share of tokens whose ratio lies outside [1/{plain(_TH.band_2x)}, {plain(_TH.band_2x)}]: what a 2x truncation "
                 "or mask would touch.",
           formula=f"mean_t [r_t < 1/{plain(_TH.band_2x)} or r_t > {plain(_TH.band_2x)}]", verl="verl's documented 2x band",
           readings=(Reading(1e-12, "ok", "no token would be touched by a 2x band"),
                     Reading(OUTSIDE_2X_FEW, "warn", f"a few tokens (under {_p(OUTSIDE_2X_FEW)}) would be clipped by a 2x band"),
                     Reading(math.inf, "bad", f"many tokens ({_p(OUTSIDE_2X_FEW)} or more) fall outside the 2x band, where "
                                              "precision noise puts none")),
           trend=_SHARE_TREND, history_floor=_SHARE_FLOOR),
    Metric("outside_5x", "outside 5x", "share", 0, "up",
           plain=f"Share of tokens whose ratio lies outside [1/{plain(_TH.band_5x)}, {plain(_TH.band_5x)}]; such tokens are almost "
                 "never explained by precision noise.",
           formula=f"mean_t [r_t < 1/{plain(_TH.band_5x)} or r_t > {plain(_TH.band_5x)}]", verl="verl's documented 5x band",
           readings=(Reading(1e-12, "ok", "no token outside the 5x band"),
                     Reading(OUTSIDE_5X_FEW, "warn", f"a handful of tokens (under {_p(OUTSIDE_5X_FEW)}) outside the 5x band"),
                     Reading(math.inf, "bad", f"many tokens ({_p(OUTSIDE_5X_FEW)} or more) outside the 5x band: look for a bug")),
           trend=_SHARE_TREND, history_floor=_SHARE_FLOOR,
           gate=Gate("--max-outside-5x", None, "Fail when the fraction of tokens with r outside [1/5, 5] exceeds this "
                                               "(off by default).")),
    Metric("phantom_clip", "phantom clip", "share", 0, "up",
           plain="Share of tokens PPO would clip before the policy has moved at all, because the mismatch alone pushes r "
                 "outside the clip range.",
           formula="mean_t [r_t < 1 − ε_low or r_t > 1 + ε_high]", verl="part of actor/pg_clipfrac at the first mini-batch",
           readings=(Reading(1e-12, "ok", "PPO clips nothing because of the mismatch"),
                     Reading(PHANTOM_CLIP_NOISE, "ok", f"PPO clips a few tokens (under {_p(PHANTOM_CLIP_NOISE)}), as bf16 "
                                                       "precision noise alone does"),
                     Reading(PHANTOM_CLIP_MANY, "warn", f"PPO clips more tokens than precision noise does (under "
                                                        f"{_p(PHANTOM_CLIP_MANY)}, where the routing asks for a correction)"),
                     Reading(math.inf, "bad", f"PPO clips many tokens because of the mismatch alone ({_p(PHANTOM_CLIP_MANY)} "
                                              "or more: the routing asks for a correction)")),
           trend=_SHARE_TREND, history_floor=_SHARE_FLOOR,
           gate=Gate("--max-phantom-clip", None, "Fail when the fraction of tokens outside the PPO clip range exceeds this "
                                                 "(off by default).")),
    Metric("veto_token_fraction", "veto", "share", 0, "up",
           plain="Share of tokens with r below verl's veto threshold; any such token makes verl reject its whole sequence.",
           formula=f"mean_t [r_t < {sci(VETO)}]; sequences: share holding one", verl="rollout_token_veto_threshold",
           readings=(Reading(1e-12, "ok", "no token would veto its sequence"),
                     Reading(math.inf, "bad", "some sequences would be rejected by verl's veto")),
           trend=Trend("difference", 1.5, 1e-5), history_floor=_SHARE_FLOOR,
           also=("veto_seq_fraction", "of sequences")),
    Metric("confident_disagree", "confident disagreements", "count", 0, "up",
           plain=f"Tokens the engine sampled with probability ≥ {plain(CONFIDENT_P)} that the trainer puts more than "
                 f"{plain(CONFIDENT_GAP)} nats lower: a token spliced in or garbled after sampling (inference-atlas #192 "
                 "saw one in 8,000). Precision noise puts none there; a count beyond the clean rate is a finding.",
           formula=f"Σ_t [p_rollout,t ≥ {plain(CONFIDENT_P)} and δ_t < −{plain(CONFIDENT_GAP)}]",
           also=("confident_disagree_rate", "per token")),
    Metric("confident_disagree_rate", "confident disagreements per token", "number", 0, "up"),
    Metric("token_mult_prob_error", "token mult. prob error", "factor", 1, "up",
           plain=f"The average factor by which the two probabilities differ; about 1 when healthy, above "
                 f"{plain(TOKEN_MULT_PROB_ERROR_SUSPICIOUS)} suspicious.",
           formula="token-mean exp(|δ_t|)", verl="NeMo-RL token_mult_prob_error"),
    Metric("top1pct_mass", "top-1% weight mass", "number", 0, "up",
           plain=f"Share of the total weight carried by the largest 1% of weights: about {plain(TOP1PCT_UNIFORM)} when uniform, "
                 f"above {plain(TOP1PCT_CONCENTRATED)} concentrated.",
           formula="Σ(top 1% of r_t) / Σ r_t"),
    Metric("abs_dp", "|Δp|", "term",
           plain="Absolute difference of the two probabilities of a token; small on unlikely tokens even when δ is large.",
           formula="|exp(trainer_logp) − exp(rollout_logp)|", verl="training/rollout_probs_diff_mean / _max"),
    Metric("ppl", "perplexity (rollout, trainer)", "term",
           plain="Per-sequence perplexity under each side, averaged over sequences. A trainer perplexity far above the "
                 "rollout's on the same tokens means a different model or context.",
           formula="seq-mean exp(−mean_t logp_t)", verl="rollout_corr/rollout_ppl, rollout_corr/training_ppl"),
    Metric("log_ppl_diff", "log-perplexity difference", "number", 0, "both",
           plain="Per-sequence difference of the mean log-probs, averaged over sequences.",
           formula="seq-mean (mean_t rollout_logp − mean_t trainer_logp)", verl="rollout_corr/log_ppl_diff"),
    Metric("seq_log_ratio", "sequence log-ratio Σδ", "term",
           plain="The sum of δ over a response: the log of the product of its token ratios, the weight a sequence-level "
                 "correction uses.",
           formula="Σ_t δ_t per sequence", verl=f"verl's sequence-level IS uses the same sum (clamped to ±{plain(SAFETY_BOUND)})"),
    Metric("length_growth", "drift exponent b", "term",
           plain="How |Σδ| grows with response length: b ≈ 0.5 is a random walk (noise cancels), b ≈ 1 means δ has a "
                 "consistent sign (systematic drift).",
           formula="fit log|Σδ| = a + b·log(length) over sequences"),
    Metric("routing", "routing", "term",
           plain="What to do with each group: train, train with an IS correction, or quarantine it.",
           formula=f"quarantine if any r < veto; train_with_correction if PPO-clipped share > {plain(_TH.route_clip_fraction)}; "
                   "else train"),
    Metric("what_if", "what-if corrections", "term",
           plain="The share of tokens and sequences each common correction would truncate, mask or reject on this batch.",
           formula=(f"token TIS r > {plain(_TH.tis_token_cap)}; sequence mask Πr > {plain(_TH.seq_mask_cap)}; IcePop r ∉ "
                    f"[{plain(_TH.icepop_low)}, {plain(_TH.icepop_high)}]; "
                    f"Geo-RS exp(mean δ) ∉ [{plain(_TH.geo_low)}, {plain(_TH.geo_high)}]; "
                    f"veto r < {sci(VETO)}"),
           verl="rollout_is=token, rollout_rs=geometric, rollout_token_veto_threshold; TRL sequence_mask; OpenRLHF IcePop"),
    Metric("top1_differ", "top-1 differs", "share", 0, "up",
           plain=f"Share of positions where the two sides' most likely next token is not the same (llama.cpp's \"Same top "
                 f"p\" turned around). Needs both sides' top-k log-probs (capture records {TOPK_LOGPROBS_DEFAULT} by "
                 f"default). Up to {pct(TOPK_TOP1_DIFFER_WARN)} is near-ties flipping under precision noise; above "
                 f"{pct(TOPK_TOP1_DIFFER_BAD)} the two sides rank tokens differently.",
           formula="token-mean [argmax_x p_rollout(x) ≠ argmax_x p_train(x)]",
           readings=(Reading(1e-12, "ok", "both sides always rank the same token first"),
                     Reading(TOPK_TOP1_DIFFER_WARN, "ok", "only near-ties flip, as precision noise does"),
                     Reading(TOPK_TOP1_DIFFER_BAD, "warn", "the most likely token moves more often than precision noise moves it"),
                     Reading(math.inf, "bad", "the two sides often disagree on the most likely token"))),
    Metric("kl_union", "KL on the top-k union", "kl", 0, "up",
           plain="KL(rollout ‖ trainer) of the whole next-token distributions, averaged over positions: the quantity KL k3 "
                 "estimates from one sampled token per position, computed instead from both sides' top-k lists, so far less "
                 "noisy. A token in one list but not the other gets that side's k-th probability at most (and no more than "
                 "its leftover mass shared out); the mass outside both lists is one 'other' bucket.",
           formula="mean_t Σ_{x ∈ A∪B∪{other}} p̂_t(x) log(p̂_t(x) / q̂_t(x)); p̂ = min(p_(k), m_P / |B∖A|) off A, m_P = 1 − Σ_A p",
           readings=KL_READINGS),  # the same quantity as KL k3 (mean KL per position), from the distributions
    Metric("kl_lower", "KL lower bound (shared top-k)", "kl", 0, "up",
           plain="The same KL with only the tokens in both top-k lists kept apart and everything else lumped into one "
                 "bucket: merging outcomes never raises a KL, so the true KL is at least this.",
           formula="mean_t Σ_{x ∈ A∩B} p log(p/q) + p_o log(p_o/q_o), p_o = 1 − Σ_{A∩B} p, q_o = 1 − Σ_{A∩B} q"),
    Metric("hidden_tv", "what truncation can hide", "number", 0, "up",
           plain="Total variation between the two distributions is known to within this: the tokens outside the shared "
                 f"top-k can add at most min(p_o, q_o). When the mass outside the shared top-k averages more than "
                 f"{plain(TOPK_UNRESOLVED_WARN)}, the report calls the top-k estimates loose (capture with a larger "
                 "--top-k-logprobs).",
           formula="½Σ_{A∩B}|p − q| + ½|p_o − q_o| ≤ TV ≤ ½Σ_{A∩B}|p − q| + ½(p_o + q_o); hidden = mean_t min(p_o, q_o)"),
    Metric("se", "± (standard error)", "term",
           plain="The standard error of a mean: how much the number would move on another batch of the same size. Tokens "
                 "of one sequence are not independent, so token-means use sequences as clusters, which is wider and more "
                 "honest than std/√N.",
           formula="cluster-robust (CR1) over sequences: √(Σ_g (S_g − n_g·mean)² · G/(G−1)) / N; seq-means: std / √(sequences)"),
    # numbers the tables show that need no glossary sentence of their own
    Metric("tokens", "tokens", "count"),
    Metric("sequences", "sequences", "count"),
    Metric("abs_delta_p90", "p90 |δ|", "nats", 0, "up"),
    Metric("veto_seq_fraction", "veto (sequences)", "share", 0, "up"),
    Metric("abs_dp_mean", "mean |Δp|", "number", 0, "up"),
    Metric("abs_dp_max", "max |Δp|", "number", 0, "up"),
    Metric("seq_log_ratio_abs_max", "max |Σδ| of a sequence", "nats", 0, "up"),
    Metric("seq_log_ratio_mean", "mean Σδ", "nats", 0, "both"),
    Metric("seq_log_ratio_abs_mean", "mean |Σδ| of a sequence", "nats", 0, "up"),
    Metric("data_problems", "data problems", "count", 0, "up", trend=Trend("difference", 1.5, 1.0)),
)

BY_KEY: dict[str, Metric] = {m.key: m for m in CATALOGUE}

# ---- views: which metrics each place shows, in its order -------------------------------------------------

HEADLINE = ("abs_delta_median", "corr_logp", "kl_k3", "ess", "outside_2x", "outside_5x", "phantom_clip",
            "veto_token_fraction")  # the run page's cards and report.md's summary table
SUMMARY_EXTRA = ("abs_delta_mean", "abs_delta_max", "chi2_token", "confident_disagree")  # report.md's summary, after the headline
INDEX = ("abs_delta_median", "kl_k3", "ess", "outside_2x", "outside_5x", "phantom_clip", "veto_token_fraction")
INDEX_NARROW = ("abs_delta_median", "kl_k3", "ess")  # the index columns a phone-width page keeps (of INDEX)
TREND = ("abs_delta_mean", "abs_delta_median", "kl_k3", "ess", "outside_2x", "outside_5x", "phantom_clip",
         "veto_token_fraction", "data_problems")  # the run view's panels and change points (each has `trend`)
HISTORY = tuple(k for k in TREND if BY_KEY[k].history_floor is not None)  # `check --history`'s band
GATES = ("kl_k1", "kl_k3", "ess", "ess_seq", "chi2_token", "outside_5x", "phantom_clip")  # `check`'s limits, in option order
COMPARE = ("tokens", "sequences", "abs_delta_median", "abs_delta_mean", "abs_delta_p90", "abs_delta_p99", "abs_delta_max",
           "bias", "kl_k1", "kl_k2", "kl_k3", "chi2_token", "chi2_seq", "ess", "ess_seq", "corr_logp", "spearman_logp",
           "corr_prob", "outside_2x", "outside_5x", "phantom_clip", "veto_token_fraction", "veto_seq_fraction",
           "token_mult_prob_error", "top1pct_mass", "abs_dp_mean", "abs_dp_max", "log_ppl_diff", "seq_log_ratio_abs_max",
           "confident_disagree")
ARMS = INDEX  # an A/B comparison of arms (compare A/ B/): each arm's level with its interval, the effect, a verdict
# what an experiment logger gets (Report.scalars(), `watch --log-to`, `export --tensorboard`), as "tim/<key>": the
# headline and the summary's numbers and the batch's size; the index row carries every one, so all three log the same
SCALARS = (*HEADLINE, *SUMMARY_EXTRA, "tokens", "sequences")
# the metrics an index row (index.json, the cache) carries: what the index, the trend, the history gate, the
# engine-pair table and the loggers read without the Report (every one of SCALARS)
ROW = ("tokens", "sequences", "ess", "kl_k3", "abs_delta_median", "abs_delta_mean", "abs_delta_max", "outside_2x",
       "outside_5x", "phantom_clip", "veto_token_fraction", "veto_seq_fraction", "seq_log_ratio_mean",
       "seq_log_ratio_abs_mean", "corr_logp", "chi2_token", "confident_disagree", "confident_disagree_rate")

VIEWS = {"headline": HEADLINE, "summary_extra": SUMMARY_EXTRA, "index": INDEX, "trend": TREND, "history": HISTORY,
         "gates": GATES, "compare": COMPARE, "arms": ARMS, "row": ROW, "scalars": SCALARS}


def metric(key: str) -> Metric:
    return BY_KEY[key]


def glossary() -> list[Metric]:
    """The glossary: every entry with a sentence, in catalogue order."""
    return [m for m in CATALOGUE if m.plain]


CONVENTIONS = (
    "δ_t = trainer_logp − rollout_logp (nats); r_t = exp(δ_t) = p_train / p_rollout. "
    "Token-mean: over all masked, valid tokens of the batch. Seq-mean: mean over sequences of per-sequence values."
)

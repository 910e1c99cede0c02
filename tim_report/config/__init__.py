"""Every threshold, band and default tim-report uses, each beside its source (the noise bands' tables in bands.py).

This is the one home for numbers: the analysis computes with them, the glossary
(`tim_report.glossary`), chart captions and the markdown state them by reading them from here, so
changing a value here changes every sentence that quotes it. Nothing in this module computes
anything from data.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace

from .bands import LMSYS_DENSE_BF16_KL as LMSYS_DENSE_BF16_KL  # the bands keep their config.NAME (re-exported)
from .bands import LMSYS_MOE_BF16_KL as LMSYS_MOE_BF16_KL
from .bands import MODEL_CLASSES as MODEL_CLASSES
from .bands import NOISE_BANDS as NOISE_BANDS
from .bands import PUBLISHED_BANDS as PUBLISHED_BANDS
from .bands import PUBLISHED_BF16_KL as PUBLISHED_BF16_KL
from .bands import NoiseBand as NoiseBand
from .bands import PublishedBand as PublishedBand
from .history import CHANGE_POINT_ALPHA as CHANGE_POINT_ALPHA
from .history import CHANGE_POINT_MIN_SIZE as CHANGE_POINT_MIN_SIZE
from .history import CHANGE_POINT_PENALTY as CHANGE_POINT_PENALTY
from .history import CHANGE_POINT_PRIOR_DF as CHANGE_POINT_PRIOR_DF
from .history import FLOOR_Z as FLOOR_Z
from .history import HISTORY_MARGIN as HISTORY_MARGIN
from .history import HISTORY_MAX_BYTES as HISTORY_MAX_BYTES
from .history import HISTORY_MIN_STEPS as HISTORY_MIN_STEPS
from .history import HISTORY_WINDOW as HISTORY_WINDOW
from .history import LAG_HISTORY_MARGIN as LAG_HISTORY_MARGIN
from .history import LAG_HISTORY_MIN_STEPS as LAG_HISTORY_MIN_STEPS
from .history import LAG_JUMP as LAG_JUMP
from .history import LAG_SUSTAINED as LAG_SUSTAINED
from .history import LR_STEP_MAX as LR_STEP_MAX
from .history import NEVER_GROWTH as NEVER_GROWTH
from .history import NEVER_MIN_STEPS as NEVER_MIN_STEPS
from .history import NEVER_TOTAL as NEVER_TOTAL
from .history import RISE_KEEP as RISE_KEEP
from .history import RUN_FINDING_Z as RUN_FINDING_Z
from .history import RUN_GROWTH_MIN_RATIO as RUN_GROWTH_MIN_RATIO
from .history import RUN_GROWTH_MIN_STEPS as RUN_GROWTH_MIN_STEPS
from .history import RUN_JUMP_RATIO as RUN_JUMP_RATIO
from .history import RUN_MEDIAN_LOG_SE as RUN_MEDIAN_LOG_SE
from .history import RUN_SPIKE_MAX_STEPS as RUN_SPIKE_MAX_STEPS
from .history import RUN_VERDICT_SHARE as RUN_VERDICT_SHARE
from .history import TREND_LOG_AXIS_SPAN as TREND_LOG_AXIS_SPAN
from .history import TREND_POINTS_MAX as TREND_POINTS_MAX
from .history import TREND_TABLE_MAX_STEPS as TREND_TABLE_MAX_STEPS

# ---- conventions ------------------------------------------------------------------------------------

# |log r| is clamped to this before exponentiating (verl's SAFETY_BOUND in rollout_corr_helper:
# exp(20) ≈ 4.9e8). Token log-ratios, sequence log-ratio sums and the sample tables all use it.
SAFETY_BOUND = 20.0
# ... so no token's k3 = r − 1 − log r exceeds this (4.85e8), nor any mean of them: a KL k3 read back above it (index.json, the
# build cache) was not written by tim-report.
KL_K3_MAX = math.expm1(SAFETY_BOUND) - SAFETY_BOUND
# rescore's nearest side: sides whose mean (side − rollout)² differs from the nearest's by at most this many standard
# errors (paired, clustered by sequence) tie with it (analysis/chain.py, docs/chain.md)
NEAREST_TIE_SE = 2.0
# A rescored bucket is `stale_weights` when its labelled version's own weights were scored (a checkpoint of that
# version, or the trainer's at lag 0), another candidate is nearest alone, and the labelled weights' KL k3 against the
# rollout is at least this many times the nearest's (analysis/lag/rescored.mislabelled). On the tiny model's real
# versions (docs/staleness.md) the engine's own weights sit at the bf16 floor (1.1e-4 to 1.3e-4) and one Adam step away
# is 22× that or more; an honest bucket's labelled weights are its nearest (1×). Two leaves a wide margin on each side,
# and keeps a near-tie that the 2-standard-error rule splits by chance from being called an error.
RESCORE_LABEL_RATIO = 2.0
# The what-if table explains a Geometric RS row that rejects at least this share of sequences when the batch's own
# per-token noise, averaged over a typical sequence, already strays past the band (catalogue.verdicts.geo_rs_note).
GEO_RS_NOTE_SHARE = 0.5
# A log-prob above this is impossible rather than rounding: such tokens are excluded as data problems.
POSITIVE_LOGP_TOLERANCE = 1e-6
# The percentile ladder of δ, |δ|, k3 and |Δp| (design §4; llama.cpp's KL-divergence statistics).
PERCENTILES = (0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9)
# Rollout-probability buckets of the breakdown and precision-gap tables: log-spaced in the tail, where
# precision noise concentrates, finer near 1, where most sampled tokens sit.
PROB_EDGES = (0.0, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 0.9, 0.99, 1.0)
# The growth of |Σδ| with length is only fitted when lengths vary: the longest fitted sequence at least
# this many times the shortest, and no single length shared by more than this share of the sequences
# (a batch where most responses hit the same max_new_tokens cap says nothing about growth with length).
LENGTH_FIT_MIN_SPAN = 2.0
LENGTH_FIT_MAX_SAME_LENGTH = 0.5
# Above this many tokens Spearman ranks an even subsample (ranking is the cost; its SE stays < 2e-3).
SPEARMAN_MAX_TOKENS = 250_000
# From this many values on, a percentile ladder is taken by selection or by one sort, whichever a one-time probe
# finds faster on this CPU (analysis.stats.selection_wins; docs/performance.md): below it either costs milliseconds.
SELECTION_PROBE_MIN = 1 << 20
# The group table keeps its worst rows (the page shows as many) and the distribution of every group's numbers.
GROUP_TABLE_ROWS = 50
# Detectors that regress or compare neighbours use an even subsample of at most this many tokens
# (pairs); their z ≥ 5 tests have ample power at 2M and the evidence says how many were used.
DETECTOR_MAX_TOKENS = 2_000_000
# position_onset's change-point search (PELT, a cost per pair of points) sees at most this many points: longer
# responses are binned to this many, then the onset is placed exactly within the bins around the change.
ONSET_MAX_POINTS = 256
# From this many tokens the analysis runs its families on two threads (numpy releases the GIL); below, the
# thread costs more than it saves (docs/performance.md).
THREAD_MIN_TOKENS = 1_000_000


# ---- reading inputs -------------------------------------------------------------------------------------

# `--max-tokens`: the most token positions a batch's log-prob arrays may hold (padding included). The
# analysis peaks near 3× the raw bytes (25 bytes a token, docs/performance.md), so 50M tokens is about
# 4 GB; a file declaring more is refused before anything large is read (a memory bomb is bounded too).
MAX_TOKENS = 50_000_000

# A training step's processes (save_step's `world_size`, a step folder's rank files): the largest training jobs run
# on some 100,000 accelerators; 2**20 leaves room and keeps a step's rank bookkeeping (the ranks a step misses, said in
# one line) bounded, whatever a file records.
MAX_WORLD_SIZE = 1 << 20
# A step beyond this is no step a run reaches, and would not survive a float (the trend, index.json, TensorBoard).
MAX_STEP = 2**53
# The widest string one element of an `.npz` string column may be (token text, a prompt's text, a group id): a
# 128k-token prompt is some 512k characters; a `<U1000000000` column of one element is 4 GB before it is converted.
MAX_STRING_CHARS = 1 << 20
# The most of a `capture --prompts` file read: 100,000 prompts of 600 characters; a larger file (or /dev/zero) is
# refused before it is read into memory.
PROMPTS_MAX_BYTES = 64 * 1024 * 1024

# `capture --top-k-logprobs`: how many of each side's most likely tokens a capture records per position.
# 20 is vLLM's default `max_logprobs` (the most an engine returns without raising its limit) and the
# number OpenAI's chat API allows; TOPK_MAX bounds what capture asks for and what a reader accepts
# ([T, k] arrays up to --max-tokens × TOPK_MAX elements).
TOPK_LOGPROBS_DEFAULT = 20
TOPK_MAX = 64

# The most of a --notes markdown file a build reads: a narrative of a few pages is under 100 kB, and the notes are
# copied into every page of the site.
NOTES_MAX_BYTES = 1024 * 1024
# The most a --tokenizer folder's tokenizer files (tokenizer.json, vocabularies, merges, .model) may hold: the largest
# tokenizers shipped with open models are about 35 MB (Gemma 3's tokenizer.json 33 MB plus its 4.7 MB
# tokenizer.model); loading takes some 25× the file's size in memory (a 75 MB tokenizer.json took 2 GB, issue 24).
TOKENIZER_MAX_BYTES = 64 * 1024 * 1024


# ---- the analysis ------------------------------------------------------------------------------------

PPO_EPS_LOW = 0.2  # PPO clip range [1 − ε_low, 1 + ε_high]: 0.2 / 0.28 is DAPO's clip-higher default
PPO_EPS_HIGH = 0.28
VETO = 1e-4  # verl rollout_token_veto_threshold: a token with r below this vetoes its sequence


@dataclass(frozen=True)
class Thresholds:
    """What `analyze` uses; every field can be overridden (`--ppo-eps` on the command line)."""

    ppo_eps_low: float = PPO_EPS_LOW
    ppo_eps_high: float = PPO_EPS_HIGH
    veto: float = VETO
    band_2x: float = 2.0  # verl's documented bands: r outside [1/2, 2] / [1/5, 5]
    band_5x: float = 5.0
    route_clip_fraction: float = 0.1  # routing: a group with more PPO-clipped tokens than this trains with correction
    tis_token_cap: float = 2.0  # token-level TIS cap (verl rollout_is_threshold default)
    seq_mask_cap: float = 3.0  # TRL vllm_importance_sampling_cap with sequence_mask mode
    icepop_low: float = 0.5  # IcePop token mask band as in OpenRLHF
    icepop_high: float = 5.0
    geo_low: float = 0.999  # verl Geo-RS: sequence geometric-mean ratio band
    geo_high: float = 1.001
    samples_k: int = 8  # worst and random sequences kept in samples.js
    sample_max_tokens: int = 128  # per-token rows kept per sample (bounded page size; the page shows 50, then a fold)
    seed: int = 0  # random sample selection

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def ppo_clip(self) -> tuple[float, float]:
        """The PPO clip range [1 − ε_low, 1 + ε_high]."""
        return 1 - self.ppo_eps_low, 1 + self.ppo_eps_high


# ---- health colours and verl's alerts -------------------------------------------------------------


@dataclass(frozen=True)
class HealthBands:
    """The batch colour from the token ESS (design §4; the seed write-up's table)."""

    green: float = 0.99  # ESS at or above: green
    amber: float = 0.95  # at or above (below green): amber; below: red


HEALTH = HealthBands()
HEALTH_ORDER = ("green", "amber", "red", "unknown")


def health(ess: float | None) -> str:
    """The batch colour for a token ESS: green, amber, red, or unknown when there is none."""
    if ess is None or not math.isfinite(ess):
        return "unknown"
    return "green" if ess >= HEALTH.green else ("amber" if ess >= HEALTH.amber else "red")


def step_health(ess: float | None, regime: str | None, blocked: bool = False) -> str:
    """A batch's colour: its token ESS's, made no better than its verdict's (red for a batch not to train on or
    systematic, at least amber for elevated), so a badge never reads greener than the verdict beside it."""
    colour = health(ess)
    least = "red" if blocked or regime == "systematic" else "amber" if regime == "elevated" else None
    if least is None or colour == "unknown":
        return colour if least is None else least
    return max(colour, least, key=HEALTH_ORDER.index)


@dataclass(frozen=True)
class VerlAlerts:
    """verl's documented rollout-correction alerts (verl docs, "Rollout correction" metrics): the defaults
    of `tim-report check`."""

    max_kl: float = 0.1  # |rollout_corr/kl| above this
    max_kl_k3: float = 0.1  # rollout_corr/k3_kl above this
    min_ess: float = 0.3  # ESS below this
    max_chi2_token: float = 1.0  # rollout_corr/chi2_token above this


VERL_ALERTS = VerlAlerts()

# ---- published thresholds (the published KL bands themselves: config/bands.py) ---------------------------

# verl's FAQ on rollout correction: training/rollout_probs_diff_mean below 0.005 is normal, above 0.01 points
# at a precision problem.
VERL_PROBS_DIFF_NORMAL, VERL_PROBS_DIFF_PROBLEM = 0.005, 0.01
TOKEN_MULT_PROB_ERROR_SUSPICIOUS = 1.05  # NeMo-RL: token_mult_prob_error above this is worth investigating
TOP1PCT_UNIFORM, TOP1PCT_CONCENTRATED = 0.01, 0.05  # share of Σw in the top 1% of weights: uniform, concentrated

# ---- the whole distribution (top-k log-probs of both sides, analysis/topk.py) ------------------------------

# Share of positions whose most likely token differs between the two sides (llama.cpp's "Same top p"
# turned around). Precision noise flips only near-ties: hf bf16 sampling vs hf fp32 scoring on tiny-qwen2
# (32 sequences, 1,498 positions, a flat random model, so many near-ties) measures 1.7% ± 0.4%
# (docs/capture.md). Up to TOPK_TOP1_DIFFER_WARN we read it as noise; above TOPK_TOP1_DIFFER_BAD one
# position in ten ranks a different token first, which no precision we measured comes near.
TOPK_TOP1_DIFFER_WARN = 0.05
TOPK_TOP1_DIFFER_BAD = 0.1
# The KL on the union of the two top-k sets is pinned down only where the two sets hold the mass: when the
# token-mean mass outside the shared top-k exceeds this, the report says the estimate is loose (raise K).
TOPK_UNRESOLVED_WARN = 0.05

# ---- the report -----------------------------------------------------------------------------------------

HOT_DIFF = 0.5  # sample-table rows with |diff| above this many nats are marked ● and red
# A confident disagreement: a token the engine sampled with probability ≥ CONFIDENT_P that the trainer puts more than
# CONFIDENT_GAP nats lower (r < e⁻²): spliced in or garbled after sampling (inference-atlas #192: about 1 in 8,000).
# Noise moves none so far: none of the CONFIDENT_CLEAN_TOKENS tokens of clean captures (scripts/confident_clean_rate.py,
# docs/calibration.md: SmolLM2 vLLM/hf bf16, fp16; tiny-qwen2 loops), whose largest drop of such a token is 0.22 nats.
CONFIDENT_P, CONFIDENT_GAP, CONFIDENT_CLEAN_TOKENS = 0.5, 2.0, 47_433
# GitHub rejects comments over 65,536 characters; 60,000 leaves room for a bot's own header and footer.
MARKDOWN_MAX_CHARS = 60_000

# ---- readings beside the headline numbers (catalogue.metrics: each metric's reading bands) ------------------
# Calibrated on clean captures of a real chat model, SmolLM2-135M-Instruct, beside the tiny fixtures
# (scripts/calibrate_real_model.py, docs/calibration.md), and on the injected faults (scripts/diagnosis_matrix.py).
# median |δ|: bf16 / fp16 against fp32 measure 1.15e-3 (tiny-qwen2 fp16) to 0.0225 nats (SmolLM2 hf bf16; vLLM-CPU
# bf16 0.0218). The noise band ends at about twice the largest, which is also the diagnosis's mean-|δ| noise ceiling
# (0.05, noise_abs_delta_max): until issue 38 it ended at 0.02, twice tiny-qwen2's 0.0102, and SmolLM2's plain bf16
# crossed it. Above 0.5 nats (a 1.65× probability on the typical token) every fixture is a bug that changes what is
# scored: off-by-one ≥ 1.95, perturbed or re-initialised weights ≥ 5.3, a rollout at T = 1.5 0.73; one-sided top-p /
# top-k and milder temperatures (0.10-0.45) read "elevated".
MEDIAN_NOISE_MEASURED = (1.15e-3, 0.0225)
MEDIAN_ABS_DELTA_NOISE = 0.05
MEDIAN_ABS_DELTA_LARGE = 0.5
# Tokens with r outside [1/2, 2] / [1/5, 5]: noise puts none there on any fixture; every fault that puts
# any does so on ≥ 1.2e-3 of tokens past 2× (top-k 50 in bf16) and ≥ 2.4e-3 past 5× (rollout at T = 0.8).
# "A few" ends at one token in a thousand past 2×, and at one in ten thousand past 5× (each such token is
# a larger error: ln 5 / ln 2 = 2.3× further from r = 1).
OUTSIDE_2X_FEW = 1e-3
OUTSIDE_5X_FEW = 1e-4
# Phantom clipping (PPO clips on the mismatch alone) reads "many" from the share at which the routing sends
# a group to train_with_correction, so the reading and the routing never disagree. Below PHANTOM_CLIP_NOISE it is what
# precision noise alone clips: bf16 against fp32 on SmolLM2-135M clips 0.30-0.34% of tokens (docs/calibration.md; the
# tiny fixtures clip none), and 1% is where severity by consequence calls a fault material (CONSEQUENCE_TOKEN_SHARE).
PHANTOM_CLIP_MANY = Thresholds.route_clip_fraction
PHANTOM_CLIP_NOISE = 0.01

# ---- the diagnosis -------------------------------------------------------------------------------------

# A position onset on or one past a kernel boundary is said as a kernel hint (analysis/localise.kernel_boundary):
# attention and decode kernels tile the sequence in blocks of 16-128 positions (FlashAttention's 64 / 128-row
# blocks, vLLM's split-KV decode and 16-token KV-cache pages, chunked prefill), all multiples of 32 from 32 on, and
# buffers grow by powers of two. A boundary of 16 or more is a multiple of 32 or a power of two; a random onset
# lands on or one past one about one time in 16 (2 in every 32 positions), so the hint is a lead, not a proof.
KERNEL_TILE = 32
KERNEL_POW2_MIN = 16

# The temperature fit (detectors.detect_temperature) is shrunk towards 1: the per-position normaliser log Z_T
# correlates with the log-prob, so a regression recovers only part of the true log-ratio ln(T_rollout/T_trainer).
# The share it recovers, measured on batches of known temperature (scripts/temperature_fit.py; the table is in
# docs/diagnosis.md): fitted on the sampler's side, 0.36-0.49 on synthetic batches (testing.make_sampled_batch,
# T 0.6-1.5 on either side) and 0.47-0.84 on the tiny-qwen2 fixtures; with the sampler's side unknown (fitted on
# the rollout's), 0.34-0.51 and 0.38, and 0.24 at worst on the other side of a flatter or sharper logit scale. The
# finding states the range from the fit to the ratio whose log is the fit's over the least share, with a margin:
# (the sampler's side known, unknown) → least share.
TEMPERATURE_FIT_COVERAGE = {True: 0.33, False: 0.22}

# Severity by consequence (analysis/consequence.py, docs/diagnosis.md "Severity by consequence"): a systematic finding
# is an `error` ("Do not train") only when it is material on the batch: at least this share of tokens clipped by PPO
# or pushed beyond the cap because of it (noise inside a published precision band clips well under 1%: 0 on every
# noise fixture), or a per-token bias / mean |δ| beyond the band's mean-|δ| ceiling. The cap is verl's
# rollout_is_threshold (2: TIS truncates above it, IcePop masks below 1/2), also the sequence-level weight whose
# crossing length the finding states.
CONSEQUENCE_TOKEN_SHARE = 0.01
# The staleness share's interval: a bootstrap over sequences with this many resamples (200 puts the 2.5% and 97.5%
# percentiles within about a percent of the share's own scale; a fixed seed keeps the output byte-identical).
STALENESS_BOOTSTRAP = 200
CONSEQUENCE_CAP = 2.0
# The one-line verdict names an environment as the place when its KL k3 is at least this multiple of the batch's.
ENV_LEAD_MULTIPLE = 2.0

# `watch RUN_DIR`: how long a run folder that does not exist yet may take to appear (a training job started beside the
# watch creates it once its model has loaded) before it is called a mistyped folder: one line, exit 2.
RUN_APPEAR_WAIT = 120.0

SEVERITIES = ("info", "warn", "error")  # in rising order: `check --fail-on` and the findings' sort use it


@dataclass(frozen=True)
class DiagnosisThresholds:
    """Every limit the diagnosis uses, with its reason. Override with `replace()` or `check --set NAME=VALUE`."""

    # identical: |δ| ≤ atol + rtol·|logp| on every token. fp32 log-softmax of logits of size ~30 rounds at
    # ~30·2⁻²⁴ ≈ 2e-6; 1e-5 leaves room for a different reduction order (batch shape) in fp32.
    identical_atol: float = 1e-5
    identical_rtol: float = 1e-6
    # numerical_noise ceiling: the top of the published dense bf16/fp16 band (PUBLISHED_BF16_KL), mean |δ|
    # a few hundredths at most, log-prob correlation ≈ 1. Compared with 2 standard errors of slack so
    # small batches pass.
    noise_kl_max: float = PUBLISHED_BF16_KL[1]
    noise_abs_delta_max: float = 0.05
    noise_corr_min: float = 0.99
    # systematic: correlation of log-probs this far below 1 means the two sides do not score the same
    # model or context (bf16 on our tiny model gives ≥ 0.999; a re-initialised trainer gives ≈ 0).
    systematic_corr_max: float = 0.9
    # significance for every detector: |z| ≥ 5 with cluster-robust SEs, and at least this many tokens.
    z: float = 5.0
    min_tokens: int = 64
    # the gate on the input (analysis/usable.py): a verdict speaks for the batch only when it is drawn from most
    # of it. NaN, inf and positive log-probs are not missing at random (an overflow hits the long and the
    # extreme-logit tokens, an exporter's placeholder the tokens it did not score), so the tokens left are not a
    # sample of the batch: with a tenth excluded the verdict no longer describes it (clean captures and framework
    # dumps exclude none; `-inf` on a handful of tokens, the one real case we know, stays far below a tenth).
    # Fewer than min_usable_tokens valid tokens is not a measurement: no detector runs (each needs min_tokens)
    # and the standard errors of the means rest on one or two sequences; 16 is one short response.
    min_usable_share: float = 0.9
    min_usable_tokens: int = 16
    # a side whose finite masked values all lie in [0, 1] with more than this share above 0 holds probabilities
    # (or ratios), not log-probs: a log-prob is ≤ 0, so only p = 1 tokens could be ≥ 0, never most of them.
    probability_share: float = 0.5
    # shift: mean |trainer[t] − rollout[t±1]| below this fraction of mean |trainer[t] − rollout[t]|.
    # Neighbouring log-probs of real text differ by ~1-2 nats; an off-by-one trainer matches its neighbour
    # to noise level (ratio ≈ 0.01-0.1), a correct one never matches the neighbour better (ratio ≫ 1).
    shift_ratio: float = 0.5
    # temperature: |slope of δ on rollout_logp| ≥ 0.05, i.e. the two sides' temperatures differ by ≥ 5%
    # (common sampling temperatures are 0.6-1.0; bf16 noise gives |slope| < 0.01 on our fixtures).
    temperature_slope_min: float = 0.05
    # which side's log-probs the tokens were sampled from (detectors.sampler_side): for tokens drawn from q,
    # E_q[p/q] = 1 for any p, so the sampler side's mean importance ratio has |log mean| near 0. Heavy-tailed
    # ratios on 700-token fixtures (a re-initialised trainer, a perturbed one) keep it ≤ 0.24 on the sampler
    # side; 0.3 leaves room. Against a side scoring an unrelated model (the other side's log-mean ≈ 16, ratios
    # clamped at ±20) the sampler side's wanders to 0.8 on 2,000 tokens, so a tenth of the other's also counts.
    # The other side's must be at least 2× further from 0 (and ≥ 2 × 0.05: two sides within noise of each other
    # say nothing), else no side is named.
    sampler_log_mean_max: float = 0.3
    sampler_relative_max: float = 0.1
    sampler_far_factor: float = 2.0
    sampler_log_mean_floor: float = 0.05
    # processed_logprobs: share of non-zero δ (rollout ≠ 0 exactly) that are negative. Top-p / top-k
    # renormalisation can only raise the rollout log-prob (δ = log kept mass ≤ 0); noise gives ≈ 0.5.
    processed_negative_share: float = 0.95
    # dummy_zero: rollout log-prob exactly 0 (p = 1) where the trainer gives p < 0.5: no engine samples a
    # token it gives probability 1 that the same model gives less than 1/2. 3+ tokens → error.
    dummy_trainer_logp_max: float = math.log(0.5)
    dummy_error_count: int = 3
    # one_side_broken: token-level perplexity of one side this many times the other's on the same tokens.
    # bf16/fp16 noise moves perplexity by ~1%; 1.5x is far outside noise, 3x is a different model/context.
    ppl_ratio_warn: float = 1.5
    ppl_ratio_error: float = 3.0
    # low_prob_tail (info): tokens with rollout p < tail_p carry ≥ tail_k3_share of Σk3 while being at
    # most tail_token_share_max of the tokens. Normal for noise (design §4); reported as context.
    tail_p: float = 0.1
    tail_k3_share: float = 0.5
    tail_token_share_max: float = 0.5
    # drift_with_length: exponent b of |Σδ| ∝ length^b significantly above 0.5 (random walk) and ≥ 0.75;
    # warn only when the per-token bias is itself beyond noise (|bias| ≥ noise_kl_max: noise has
    # bias ≈ −KL), else info. Needs min_drift_sequences sequences.
    drift_exponent_min: float = 0.75
    drift_z: float = 3.0
    min_drift_sequences: int = 8
    # first_token: mean |δ| of the first response token at least this many times the mean of positions ≥ 1,
    # and a rank test over sequences (each first token's percentile among its own sequence's later tokens,
    # uniform under noise) at z ≥ `z`, with at least min_localise_sequences sequences. The first token is often
    # the least certain one, so noise makes it 1-3× the rest on our fixtures; 10× is a different context.
    first_token_ratio: float = 10.0
    min_localise_sequences: int = 8
    # position_onset: PELT on per-position mean log|δ| (positions with at least onset_min_tokens tokens) finds a
    # rise of the geometric-mean |δ| by onset_ratio or more, with onset_min_positions positions on each side; it
    # counts when, within the (≥ min_localise_sequences) sequences that cross it, the mean |δ| rises by onset_ratio
    # too and a paired test over those sequences reaches z ≥ `z` (per-token tests fired on clean SmolLM2 data:
    # docs/calibration.md). bf16 / fp16 noise drifts by < 1.5× along a
    # response on our fixtures; 3× is a new error source switching on (an fp8 KV cache, a context cap).
    onset_ratio: float = 3.0
    onset_min_tokens: int = 8
    onset_min_positions: int = 8
    # turn_boundary: the first turn_head_tokens tokens of every turn after the first (right after a tool or
    # environment span) have mean |δ| at least turn_ratio times the rest of the trained tokens, with a rank
    # test over turns at z ≥ `z` and at least min_localise_sequences turns after a boundary.
    turn_head_tokens: int = 4
    turn_ratio: float = 5.0
    # mixed_policy_versions: info when sequences come from several weight versions; warn when the newest and
    # the oldest are at least this many versions apart (our choice: one or two steps of staleness is the
    # norm with partial / async rollouts; beyond that staleness is a large part of the mismatch).
    versions_spread_warn: int = 4
    # The staleness split (docs/staleness.md). version_span: a sequence generated by more than this many versions
    # (partial rollouts resumed across several syncs; slime / miles keep one version per generate call). Our choice:
    # one resume (two versions) is what a partial rollout is; three means the lag knob does not bound it.
    version_span_max: int = 2
    # lag_ess_collapse: a lag bucket holding at least lag_share_min of the tokens whose token ESS is below lag_ess_min
    # (VCPO, arXiv 2602.17616: ESS predicts collapse at lag 2; verl alerts below 0.3 for the whole batch, and a
    # bucket at half the batch's tokens with ESS under 0.5 already halves what its tokens teach).
    lag_ess_min: float = 0.5
    lag_share_min: float = 0.05
    # version_order: a newer lag bucket's KL k3 at least this many times an older one's, beyond z standard errors of
    # the difference. Staleness grows with the lag (tiny-qwen2's real Adam steps: lag 1 2.8e-3, 2 1.0e-2, 3 2.0e-2), so a
    # newer bucket farther from the trainer than an older one is a label that is wrong, not noise; twice keeps a
    # policy that barely moves between two lags (their KL alike) out.
    version_order_ratio: float = 2.0
    # idle_correction: a logged PPO clip fraction at or below this while the ratios would clip more than
    # idle_clip_expected of the tokens (SkyRL #1850: recomputed old log-probs made r ≡ 1 under staleness 4).
    idle_clip_logged_max: float = 0.0
    idle_clip_expected: float = 0.01
    # stale_prefix_cache (analysis/lag/cache.py): prefix-cache hits' mean |δ| beyond the misses' of the batch by z ≥
    # cache_z (the detectors' z) and cache_ratio_min× (a floor on the effect: z alone grows with the batch), and
    # cache_min_sequences on each side. 600 clean SmolLM2 subsets (bench_false_alarms.py): z max 3.92, none fires;
    # vLLM-CPU's cache kept across reload_weights reads z 5.2, 1.34× on the tiny model (docs/sync.md).
    cache_z: float = 5.0
    cache_ratio_min: float = 1.25
    cache_min_sequences: int = 8
    # spliced_tokens (analysis/confident.py): more confident disagreements than the clean rate explains by a Poisson test
    # (P(X ≥ count | rate × tokens) ≤ confident_alpha), and at least confident_min_count. The clean rate: none in
    # CONFIDENT_CLEAN_TOKENS, read as its 95% upper bound (the rule of three: 6.3e-5; inference-atlas #192: 1.25e-4).
    confident_clean_rate: float = 3 / CONFIDENT_CLEAN_TOKENS
    confident_alpha: float = 1e-3
    confident_min_count: int = 3
    # the names a caller set on purpose (`override`, `check --set`): the published band never replaces them
    set_by_caller: frozenset = field(default=frozenset(), repr=False, compare=False)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("set_by_caller")
        return d

    def override(self, values: dict[str, str]) -> DiagnosisThresholds:
        """A copy with NAME=VALUE strings applied (types from the field defaults)."""
        known = {f.name: f for f in fields(self) if f.name != "set_by_caller"}
        changes = {}
        for name, value in values.items():
            if name not in known:
                raise KeyError(f"unknown diagnosis threshold '{name}' (known: {', '.join(known)})")
            try:
                changes[name] = type(getattr(self, name))(float(value))
            except ValueError:
                raise ValueError(f"{name}={value}: not a number") from None
        return replace(self, **changes, set_by_caller=self.set_by_caller | frozenset(changes))


# ---- before / after comparison --------------------------------------------------------------------------

COMPARE_REL_TOL = 0.01  # a metric that moved by less than 1% of its (goodness) value is "same"
# The trainer's own floor (analysis/floor.py): a floor that alone puts this share of tokens outside the PPO clip band
# is a warning (TRL #6789: 8% from bf16 chunking alone; verl #6280: pg_clipfrac > 0 on-policy). Below it, info.
FLOOR_CLIP_WARN = 1e-3
# Routing agreement (analysis/routes.py): routing flips that explain this share of the KL k3 or more are a warning
# (the share a routing fix — replay, an fp32 router — could remove); below it, info.
ROUTING_EXPLAINS_WARN = 0.25
# assert_logprobs_match(floor=...): a candidate passes within this many times the reference's own mean |φ| (and its
# square times the floor's KL k3): two scorings that each differ by rounding differ by up to about twice either's noise.
FLOOR_BAND_FACTOR = 2.0
# Length sweep (analysis/sweep.py): an exponent within this many standard errors of 1 reads "linear" (of 0.5, for
# |Σδ|, "as a random walk"); two SE is the usual ~95% margin.
SWEEP_SLACK_SE = 2.0
ARM_LEVEL = 0.95  # compare A/ B/: the confidence level of each arm's interval and of the effect between arms (Welch)
COMPARE_SE_TOL = 2.0  # ... or by less than this many combined standard errors
COMPARE_TOKEN_TOL = 1e-4  # nats: a token's |δ| must move by more than this to count as better / worse


# ---- the noise bands (precision, published by model class and precision): config/bands.py ------------------

# ---- the run view (change points, run verdict, `check --history`, each lag's history): config/history.py ----------

# ---- bisect's thresholds: config/bisect.py ---------------------------------------------------------------------

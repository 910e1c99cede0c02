"""The noise bands, each beside its source: what published engine-vs-trainer runs show, by model class and precision
(the diagnosis's noise ceiling, analysis/bands.py), and what one precision does to per-token log-probs
(`assert_logprobs_match`).

Part of `config` (imported there, so `config.NOISE_BANDS` and the rest keep their names): the tables are long and
their sources longer.
"""

from __future__ import annotations

from dataclasses import dataclass

# ---- published bands ----------------------------------------------------------------------------------

# Dense bf16 / fp16 engine-vs-trainer runs: KL ≈ 4e-4 … 1e-2 (verl rollout-correction docs; Yao et al.,
# "Your efficient RL framework secretly brings you off-policy RL training"; "Defeating the
# training-inference mismatch via FP16").
PUBLISHED_BF16_KL = (4e-4, 1e-2)
# Dense bf16 K3 KL about 1e-5 to 1e-3 and MoE bf16 about 1e-3 to 1e-1 (LMSYS blog on training-inference mismatch,
# Jan 2026): MoE routing amplifies rounding (a small change in a hidden state flips which experts are selected).
LMSYS_DENSE_BF16_KL = (1e-5, 1e-3)
LMSYS_MOE_BF16_KL = (1e-3, 1e-1)


# ---- precision noise bands (assert_logprobs_match) ---------------------------------------------------------
# How far the per-token log-probs of one model may move when only the arithmetic precision changes:
# the reference in fp32, the candidate in `precision`. `assert_logprobs_match` passes a comparison
# whose mean |δ| and KL k3 stay within its band (with 2 standard errors of slack, as the diagnosis)
# and uses the band as the diagnosis's numerical-noise ceiling. Measurements on models/tiny-qwen2
# (8 sampled sequences, 760 tokens; docs/kernel-tests.md has the table and how they were taken).


@dataclass(frozen=True)
class NoiseBand:
    """The noise one precision produces in per-token log-probs, and where that number comes from."""

    name: str
    abs_delta_mean_max: float  # token-mean |δ| (nats) above this is beyond the precision's noise
    kl_k3_max: float  # token-mean k3 above this is beyond it
    source: str


NOISE_BANDS: dict[str, NoiseBand] = {b.name: b for b in (
    NoiseBand("fp32", 1e-5, 1e-9,
              "fp32 differs by summation order only: the diagnosis's identical tolerance (1e-5 nats) as a mean; "
              "tiny-qwen2 with RMSNorm reduced differently measures mean |δ| 9.0e-7, KL 8.0e-13"),
    NoiseBand("tf32", 6e-3, 1.6e-4,
              "TF32 keeps fp16's 10 mantissa bits in matmul inputs (NVIDIA A100 architecture whitepaper), so "
              "the fp16 band; tiny-qwen2 with TF32-rounded linear inputs (emulated on CPU) measures 5.3e-4, KL 2.7e-7"),
    NoiseBand("fp16", 6e-3, 1.6e-4,
              "the bf16 band scaled by fp16's 3 extra mantissa bits (2⁻³ in |δ|, 2⁻⁶ in KL), the ratio "
              "tiny-qwen2 shows (8.3× in mean |δ|, 73× in KL); fp16 vs fp32 measures 1.4e-3, KL 1.6e-6 (SmolLM2-135M: 4.5e-3, KL 2.3e-5, docs/calibration.md)"),
    NoiseBand("bf16", 5e-2, PUBLISHED_BF16_KL[1],
              "published dense bf16 engine-vs-trainer runs: KL k3 up to 1e-2 (the dense bf16 band, 1e-5 to 1e-2), mean "
              "|δ| a few hundredths (the diagnosis's noise ceiling); tiny-qwen2 bf16 vs fp32 measures 1.1e-2, KL 1.2e-4; SmolLM2-135M 3.5e-2, KL 1.5e-3 (docs/calibration.md)"),
    NoiseBand("fp8", 0.15, 2e-2,
              "no published kernel-level band: 3× the mean |δ| and 8× the KL tiny-qwen2 measures with e4m3 "
              "weights (per-channel scales, emulated) and bf16 compute (5.0e-2, KL 2.5e-3)"),
)}


# ---- published bands by model class and precision (the diagnosis's noise ceiling) ----------------------------
# Which band a batch is read against is decided from its meta (`analysis/bands.py`): `model_class` (dense / moe,
# `--meta model_class=moe`), else an expert count or a model name that names an MoE; fp8 when either side's dtype
# says so. Each band's `kl_k3` is the range published runs show and its top is the numerical-noise ceiling.


@dataclass(frozen=True)
class PublishedBand:
    """The engine-vs-trainer mismatch published for one model class and precision, and its sources."""

    name: str
    model_class: str  # dense | moe
    precision: str  # bf16 (fp16 and fp32 are read against it: it is the widest of the three) | fp8
    kl_k3: tuple[float, float]  # typical token-mean KL k3 of published runs; the top is the noise ceiling
    abs_delta_mean_max: float  # token-mean |δ| ceiling (nats)
    source: str


MODEL_CLASSES = ("dense", "moe")
PUBLISHED_BANDS: dict[tuple[str, str], PublishedBand] = {(b.model_class, b.precision): b for b in (
    PublishedBand("dense bf16", "dense", "bf16", (LMSYS_DENSE_BF16_KL[0], PUBLISHED_BF16_KL[1]), 0.05,
                  "LMSYS blog (Jan 2026): dense bf16 K3 KL about 1e-5 to 1e-3; verl rollout-correction docs and Yao "
                  "et al. report up to 1e-2; NeMo-RL calls gen_kl_error ≈ 1e-3 acceptable; verl's FAQ calls "
                  "rollout_probs_diff_mean < 0.005 normal; batch-invariant kernels give exactly 0"),
    PublishedBand("MoE bf16", "moe", "bf16", LMSYS_MOE_BF16_KL, 0.16,
                  "LMSYS blog (Jan 2026): MoE bf16 K3 KL about 1e-3 to 1e-1 (routing flips amplify rounding); the "
                  "mean |δ| ceiling is the dense one scaled by √10 (k3 ≈ δ²/2, a 10× higher KL ceiling)"),
    PublishedBand("dense fp8", "dense", "fp8", (PUBLISHED_BF16_KL[0], NOISE_BANDS["fp8"].kl_k3_max),
                  NOISE_BANDS["fp8"].abs_delta_mean_max, NOISE_BANDS["fp8"].source),
    PublishedBand("MoE fp8", "moe", "fp8", LMSYS_MOE_BF16_KL, 0.16,
                  "no published MoE fp8 band: the MoE bf16 band (LMSYS, Jan 2026), which is already wider than "
                  "the dense fp8 one"),
)}

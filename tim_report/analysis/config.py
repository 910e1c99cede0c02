"""Thresholds the analysis uses, each with where it comes from. All are overridable."""

from __future__ import annotations

from dataclasses import asdict, dataclass

SAFETY_BOUND = 20.0  # |log r| is clamped to this before exponentiating (verl's SAFETY_BOUND: exp(20) ≈ 4.9e8)


@dataclass(frozen=True)
class Thresholds:
    ppo_eps_low: float = 0.2  # PPO clip range [1 - ε_low, 1 + ε_high]; 0.2 / 0.28 is DAPO's clip-higher default
    ppo_eps_high: float = 0.28
    veto: float = 1e-4  # verl rollout_token_veto_threshold: a token with r below this vetoes its sequence
    band_2x: float = 2.0  # verl's documented bands: r outside [1/2, 2] / [1/5, 5]
    band_5x: float = 5.0
    route_clip_fraction: float = 0.1  # routing: a group with more PPO-clipped tokens than this trains with correction
    tis_token_cap: float = 2.0  # token-level TIS cap (verl rollout_is_threshold default)
    seq_mask_cap: float = 3.0  # TRL vllm_importance_sampling_cap with sequence_mask mode
    icepop_low: float = 0.5  # IcePop token mask band as in OpenRLHF
    icepop_high: float = 5.0
    geo_low: float = 0.999  # verl Geo-RS: sequence geometric-mean ratio band
    geo_high: float = 1.001
    samples_k: int = 8  # worst and random sequences kept in samples.json
    sample_max_tokens: int = 128  # per-token rows kept per sample (bounded page size; the page shows 50, then a fold)
    seed: int = 0  # random sample selection

    def to_dict(self) -> dict:
        return asdict(self)

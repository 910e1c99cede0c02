"""The precision gap β: how much of log r is precision alone (design §5).

With a shadow pass (the trainer's weights evaluated in the rollout engine's precision) the
log-ratio splits exactly as

    log r = δ = α + β,   β = trainer_logp − shadow_logp   (precision: same weights, two dtypes)
                         α = shadow_logp − rollout_logp   (everything else: engine, kernels, weights, context)

β is the part a precision fix (fp16, fp32 LM head, matched kernels) can remove. Two clipping numbers
are easy to confuse, so they carry two names: the metric `phantom_clip` is the share of tokens PPO
clips on the whole mismatch δ before the policy has moved; here, `clip_fraction_beta` is the share it
would clip on β alone ("precision-only clipping").
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import findings
from ..config import (
    PPO_EPS_HIGH,
    PPO_EPS_LOW,
    PROB_EDGES,
    SAFETY_BOUND,
)
from ..model import StepBatch
from .histograms import ProbBuckets
from .registry import Scene, detector
from .stats import cluster_mean_se, pearson
from .tokens import Tokens, third_side

HOW_TO_GET = ("tim-report capture --shadow ... : re-scores the rollout tokens with the trainer's weights in the "
              "rollout engine's dtype and saves them as shadow_logp (or pass an existing array with --key shadow=NAME)")


def _unavailable(reason: str) -> dict:
    return {"available": False, "reason": reason, "how_to_get": HOW_TO_GET}


def precision_gap(batch: StepBatch, tok: Tokens, eps_low: float = PPO_EPS_LOW, eps_high: float = PPO_EPS_HIGH) -> dict:
    """β's bias, size by probability bucket, correlation with the advantage and the β-alone clip fraction."""
    if batch.shadow_logp is None:
        return _unavailable("the batch has no shadow_logp (the trainer's weights evaluated in the rollout's precision), "
                            "so precision cannot be told apart from the rest of the mismatch")
    found = third_side(batch.shadow_logp, "shadow_logp", batch.n_tokens, tok)
    if isinstance(found, str):
        return _unavailable(found)
    shadow, ok = found
    part = tok.subset(ok)
    beta = part.trainer - shadow
    alpha = shadow - part.rollout
    out: dict = {"available": True, "tokens": int(ok.sum()), "tokens_without_shadow": int((~ok).sum()),
                 "definition": "log r = α + β; β = trainer − shadow (precision), α = shadow − rollout (the rest)",
                 "eps": [eps_low, eps_high]}
    out.update(_split(part, alpha, beta))
    out.update(_clipping(part.delta, alpha, beta, eps_low, eps_high))
    out.update(_advantage_correlation(batch, tok, ok, beta))
    out["by_probability"] = _by_probability(part, alpha, beta)
    return out


def _split(part: Tokens, alpha: np.ndarray, beta: np.ndarray) -> dict:
    """The two parts' biases (cluster-robust SE), mean sizes, and β's share of the squared and absolute log-ratio."""
    sa2, sb2 = float(np.square(alpha).sum()), float(np.square(beta).sum())
    saa, sba = float(np.abs(alpha).sum()), float(np.abs(beta).sum())
    out: dict = {}
    out["beta_bias"], out["beta_bias_se"] = cluster_mean_se(beta, part.seq)
    out["alpha_bias"], out["alpha_bias_se"] = cluster_mean_se(alpha, part.seq)
    out["beta_abs_mean"] = float(np.abs(beta).mean())
    out["alpha_abs_mean"] = float(np.abs(alpha).mean())
    out["beta_share_sq"] = sb2 / (sa2 + sb2) if sa2 + sb2 > 0 else None  # Σβ² / (Σα² + Σβ²)
    out["beta_share_abs"] = sba / (saa + sba) if saa + sba > 0 else None  # Σ|β| / (Σ|α| + Σ|β|)
    return out


def _clipping(delta: np.ndarray, alpha: np.ndarray, beta: np.ndarray, eps_low: float, eps_high: float) -> dict:
    """Share of tokens PPO clips on β alone (precision-only), on α alone, on δ, and of δ's clips β alone explains."""
    lo, hi = math.log(1 - eps_low), math.log(1 + eps_high)

    def outside(x: np.ndarray) -> np.ndarray:
        x = np.clip(x, -SAFETY_BOUND, SAFETY_BOUND)
        return (x < lo) | (x > hi)

    clip_beta, clip_delta = outside(beta), outside(delta)
    total = float(np.mean(clip_delta))
    both = float(np.mean(clip_beta & clip_delta))
    return {"clip_fraction_beta": float(np.mean(clip_beta)), "clip_fraction_alpha": float(np.mean(outside(alpha))),
            "clip_fraction_total": total, "clipped_explained_by_beta": both / total if total > 0 else None}


def _advantage_correlation(batch: StepBatch, tok: Tokens, ok: np.ndarray, beta: np.ndarray) -> dict:
    if batch.advantage is None:
        return {"corr_beta_advantage": None, "corr_beta_advantage_reason": "the batch has no advantages"}
    adv = np.asarray(batch.advantage, dtype=np.float64)[tok.index][ok]
    c = pearson(beta, adv) if np.isfinite(adv).all() else None
    out: dict = {"corr_beta_advantage": c}
    if c is None:
        out["corr_beta_advantage_reason"] = "advantages are constant or not finite"
    return out


def _by_probability(part: Tokens, alpha: np.ndarray, beta: np.ndarray) -> list[dict]:
    """|β|, β and |α| by rollout-probability bucket, with each bucket's share of Σ|β|."""
    abs_beta = np.abs(beta)
    sums = ProbBuckets.of(part.rollout).sums({"beta_abs": abs_beta, "beta": beta, "alpha_abs": np.abs(alpha)})
    total = float(abs_beta.sum())
    rows = []
    for b in range(ProbBuckets.size()):
        n = sums["n"][b]
        if n == 0:
            continue
        rows.append({"bucket": ProbBuckets.label(b), "p_low": float(PROB_EDGES[b]), "p_high": float(PROB_EDGES[b + 1]),
                     "tokens": int(n), "beta_abs_mean": float(sums["beta_abs"][b] / n), "beta_mean": float(sums["beta"][b] / n),
                     "alpha_abs_mean": float(sums["alpha_abs"][b] / n),
                     "beta_abs_share": float(sums["beta_abs"][b] / total) if total > 0 else 0.0})
    return rows


def _measured(s: Scene) -> dict:
    return precision_gap(s.batch, s.tok, s.th.ppo_eps_low, s.th.ppo_eps_high)


@detector("precision_gap", beside=True, section=("precision_gap", _measured))
def _gap_finding(s: Scene) -> dict | None:
    gap = s.once(_measured)
    if not gap.get("available"):
        return None
    return findings.make("precision_gap", {k: gap[k] for k in (
        "beta_share_sq", "beta_share_abs", "beta_bias", "beta_bias_se", "beta_abs_mean", "alpha_abs_mean", "clip_fraction_beta",
        "clip_fraction_total", "corr_beta_advantage")}, s.dt)

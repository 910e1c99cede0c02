"""Phantom clipping: how much of log r is precision alone (design §5, issue 4).

With a shadow pass (the trainer's weights evaluated in the rollout engine's precision) the
log-ratio splits exactly as

    log r = δ = α + β,   β = trainer_logp − shadow_logp   (precision: same weights, two dtypes)
                         α = shadow_logp − rollout_logp   (everything else: engine, kernels, weights, context)

β is the part a precision fix (fp16, fp32 LM head, matched kernels) can remove; PPO clipping on β
alone is "phantom clipping": the policy has not moved but the ratio leaves [1 − ε_low, 1 + ε_high].
"""

from __future__ import annotations

import math

import numpy as np

from ..batch import StepBatch
from ..loader import POSITIVE_LOGP_TOLERANCE
from .breakdowns import PROB_EDGES, _fmt_p
from .config import SAFETY_BOUND
from .metrics import cluster_mean_se, pearson
from .tokens import Tokens

HOW_TO_GET = ("tim-report capture --shadow ... : re-scores the rollout tokens with the trainer's weights in the "
              "rollout engine's dtype and saves them as shadow_logp (or pass an existing array with --key shadow=NAME)")


def precision_gap(batch: StepBatch, tok: Tokens, eps_low: float = 0.2, eps_high: float = 0.28) -> dict:
    """β's bias, size by probability bucket, correlation with the advantage and the β-alone clip fraction."""
    if batch.shadow_logp is None:
        return {"available": False,
                "reason": "the batch has no shadow_logp (the trainer's weights evaluated in the rollout's precision), "
                          "so precision cannot be told apart from the rest of the mismatch",
                "how_to_get": HOW_TO_GET}
    shadow_all = np.asarray(batch.shadow_logp, dtype=np.float64)
    if shadow_all.shape[0] != batch.n_tokens:
        return {"available": False, "reason": f"shadow_logp has {shadow_all.shape[0]} tokens, the batch {batch.n_tokens}",
                "how_to_get": HOW_TO_GET}
    shadow = shadow_all[tok.index]
    ok = np.isfinite(shadow) & (shadow <= POSITIVE_LOGP_TOLERANCE)
    if not ok.any():
        return {"available": False, "reason": "no valid token has a finite shadow log-prob", "how_to_get": HOW_TO_GET}
    seq = tok.seq[ok]
    ro, tr, sh = tok.rollout[ok], tok.trainer[ok], shadow[ok]
    beta = tr - sh
    alpha = sh - ro
    delta = tr - ro
    lo, hi = math.log(1 - eps_low), math.log(1 + eps_high)

    def clipped(x: np.ndarray) -> float:
        x = np.clip(x, -SAFETY_BOUND, SAFETY_BOUND)
        return float(np.mean((x < lo) | (x > hi)))

    sa2, sb2 = float(np.square(alpha).sum()), float(np.square(beta).sum())
    saa, sba = float(np.abs(alpha).sum()), float(np.abs(beta).sum())
    out: dict = {"available": True, "tokens": int(ok.sum()), "tokens_without_shadow": int((~ok).sum()),
                 "definition": "log r = α + β; β = trainer − shadow (precision), α = shadow − rollout (the rest)",
                 "eps": [eps_low, eps_high]}
    out["beta_bias"], out["beta_bias_se"] = cluster_mean_se(beta, seq)
    out["alpha_bias"], out["alpha_bias_se"] = cluster_mean_se(alpha, seq)
    out["beta_abs_mean"] = float(np.abs(beta).mean())
    out["alpha_abs_mean"] = float(np.abs(alpha).mean())
    out["beta_share_sq"] = sb2 / (sa2 + sb2) if sa2 + sb2 > 0 else None  # Σβ² / (Σα² + Σβ²)
    out["beta_share_abs"] = sba / (saa + sba) if saa + sba > 0 else None  # Σ|β| / (Σ|α| + Σ|β|)
    out["clip_fraction_beta"] = clipped(beta)  # phantom clipping: PPO clips on precision alone
    out["clip_fraction_alpha"] = clipped(alpha)
    out["clip_fraction_total"] = clipped(delta)
    tot = out["clip_fraction_total"]
    both = float(np.mean(((beta < lo) | (beta > hi)) & ((delta < lo) | (delta > hi))))
    out["clipped_explained_by_beta"] = both / tot if tot > 0 else None  # of the clipped tokens, share β alone clips

    if batch.advantage is not None:
        adv = np.asarray(batch.advantage, dtype=np.float64)[tok.index][ok]
        c = pearson(beta, adv) if np.isfinite(adv).all() else None
        out["corr_beta_advantage"] = c
        if c is None:
            out["corr_beta_advantage_reason"] = "advantages are constant or not finite"
    else:
        out["corr_beta_advantage"] = None
        out["corr_beta_advantage_reason"] = "the batch has no advantages"

    p = np.exp(ro)
    edges = np.asarray(PROB_EDGES)
    codes = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, len(edges) - 2)
    nb = len(edges) - 1
    n = np.bincount(codes, minlength=nb)
    s_babs = np.bincount(codes, weights=np.abs(beta), minlength=nb)
    s_b = np.bincount(codes, weights=beta, minlength=nb)
    s_aabs = np.bincount(codes, weights=np.abs(alpha), minlength=nb)
    rows = []
    for b in range(nb):
        if n[b] == 0:
            continue
        rows.append({"bucket": f"{_fmt_p(edges[b])}–{_fmt_p(edges[b + 1])}", "p_low": float(edges[b]),
                     "p_high": float(edges[b + 1]), "tokens": int(n[b]),
                     "beta_abs_mean": float(s_babs[b] / n[b]), "beta_mean": float(s_b[b] / n[b]),
                     "alpha_abs_mean": float(s_aabs[b] / n[b]),
                     "beta_abs_share": float(s_babs[b] / sba) if sba > 0 else 0.0})
    out["by_probability"] = rows
    return out

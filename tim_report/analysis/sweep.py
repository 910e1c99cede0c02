"""A length sweep: the same engine pair captured at several generation lengths (`capture --max-new-tokens
128,512,2048`), and how the mismatch grows with length across them.

Input is the index rows (`run_index.run_row`): rows of one engine pair (both engines and dtypes named) whose captures
recorded different `max_new_tokens` form a sweep. At each length: the mean sequence length (tokens ÷ sequences), the
mean |Σδ| of a sequence and the KL summed over a sequence (KL k3 × mean length). Each is fitted as a power of the
mean length on the log-log scale (least squares, the slope's standard error from the residuals): for |Σδ|, b ≈ 0.5 is
a random walk (independent per-token noise), b ≈ 1 is drift that accumulates linearly, b > 1 grows faster (error
that compounds along the sequence: KV cache, rotary precision); for the per-sequence KL, b ≈ 1 is the same per-token
KL at every length, b > 1 a per-token KL that grows with position.

    length_sweep(rows) → [{pair, points, abs_sum: fit, kl_seq: fit}, ...] or None
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import sweep as words


def power_fit(length: np.ndarray, value: np.ndarray) -> dict | None:
    """log value = a + b·log length: b with its standard error (None from two points), or None when a value is ≤ 0."""
    if len(length) < 2 or (value <= 0).any() or len(set(length.tolist())) < 2:
        return None
    x, y = np.log(length), np.log(value)
    a_mat = np.vstack([np.ones_like(x), x]).T
    coef, *_ = np.linalg.lstsq(a_mat, y, rcond=None)
    se = None
    if len(x) > 2:
        resid = y - a_mat @ coef
        cov = np.linalg.inv(a_mat.T @ a_mat) * float(resid @ resid) / (len(x) - 2)
        se = math.sqrt(max(float(cov[1, 1]), 0.0))
    return {"exponent": float(coef[1]), "exponent_se": se, "points": len(x)}


def _pair(r: dict) -> tuple[str, str, str, str]:
    return r["rollout_engine"], r["rollout_dtype"], r["trainer_engine"], r["trainer_dtype"]


def _point(rows: list[dict]) -> dict | None:
    """One length of the sweep: its rows pooled, weighted by sequences."""
    seqs = sum(r.get("sequences") or 0 for r in rows)
    if not seqs or any(r.get(k) is None for r in rows for k in ("seq_log_ratio_abs_mean", "kl_k3", "tokens")):
        return None
    tokens = sum(r["tokens"] for r in rows)
    mean_len = tokens / seqs
    abs_sum = sum(r["seq_log_ratio_abs_mean"] * r["sequences"] for r in rows) / seqs
    kl = sum(r["kl_k3"] * r["tokens"] for r in rows) / tokens
    return {"max_new_tokens": rows[0]["max_new_tokens"], "runs": [r["id"] for r in rows], "sequences": seqs,
            "mean_length": mean_len, "abs_sum": abs_sum, "kl_k3": kl, "kl_seq": kl * mean_len}


def length_sweep(rows: list[dict]) -> list[dict] | None:
    """Every engine pair captured at two or more generation lengths, with the growth of |Σδ| and of the KL."""
    by_pair: dict[tuple, dict[int, list[dict]]] = {}
    for r in rows:
        if r.get("max_new_tokens") is not None and "?" not in _pair(r):
            by_pair.setdefault(_pair(r), {}).setdefault(r["max_new_tokens"], []).append(r)
    out = []
    for pair, lengths in by_pair.items():
        points = [p for n in sorted(lengths) if (p := _point(lengths[n])) is not None]
        if len(points) < 2:
            continue
        length = np.array([p["mean_length"] for p in points])
        fits = {key: power_fit(length, np.array([p[key] for p in points])) for key in ("abs_sum", "kl_seq")}
        out.append({"pair": list(pair), "points": points,
                    **{key: {**fit, "reading": words.growth(key, fit)} if fit else None for key, fit in fits.items()}})
    return out or None

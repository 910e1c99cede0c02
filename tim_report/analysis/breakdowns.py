"""Where the mismatch lives: by rollout probability, by position, by group, and how Σδ grows with length."""

from __future__ import annotations

import math

import numpy as np

from .tokens import Tokens

PROB_EDGES = (0.0, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 0.9, 0.99, 1.0)


def _bucket_rows(tok: Tokens, abs_d: np.ndarray, k3: np.ndarray, codes: np.ndarray, n_buckets: int,
                 labels: list[str], extra: dict | None = None) -> list[dict]:
    """Per-bucket count, mean |δ|, mean δ, mean k3 and each bucket's share of Σ|δ| and Σk3."""
    n = np.bincount(codes, minlength=n_buckets)
    s_abs = np.bincount(codes, weights=abs_d, minlength=n_buckets)
    s_abs2 = np.bincount(codes, weights=np.square(abs_d), minlength=n_buckets)
    s_d = np.bincount(codes, weights=tok.delta, minlength=n_buckets)
    s_k3 = np.bincount(codes, weights=k3, minlength=n_buckets)
    tot_abs, tot_k3 = float(s_abs.sum()), float(s_k3.sum())
    rows = []
    for b in range(n_buckets):
        if n[b] == 0:
            continue
        mean = s_abs[b] / n[b]
        var = max(s_abs2[b] / n[b] - mean * mean, 0.0)
        row = {
            "bucket": labels[b],
            "tokens": int(n[b]),
            "token_share": float(n[b] / tok.n),
            "abs_delta_mean": float(mean),
            "abs_delta_se": float(math.sqrt(var / (n[b] - 1))) if n[b] > 1 else None,
            "delta_mean": float(s_d[b] / n[b]),
            "k3_mean": float(s_k3[b] / n[b]),
            "abs_delta_share": float(s_abs[b] / tot_abs) if tot_abs > 0 else 0.0,
            "k3_share": float(s_k3[b] / tot_k3) if tot_k3 > 0 else 0.0,
        }
        if extra:
            row.update({k: v[b] for k, v in extra.items()})
        rows.append(row)
    return rows


def bucket_tables(tok: Tokens) -> dict:
    """|δ| and k3 by rollout-probability bucket and by position bucket (sharing the per-token terms)."""
    abs_d, k3 = np.abs(tok.delta), tok.k3()
    return {"by_probability": by_probability(tok, abs_d, k3), "by_position": by_position(tok, abs_d, k3)}


def by_probability(tok: Tokens, abs_d: np.ndarray, k3: np.ndarray) -> list[dict]:
    edges = np.asarray(PROB_EDGES)
    # bucket on log p (no exp needed): searchsorted against log edges
    log_edges = np.log(np.maximum(edges[1:-1], 1e-300))
    codes = np.searchsorted(log_edges, tok.rollout, side="right")
    labels = [f"{_fmt_p(edges[i])}–{_fmt_p(edges[i + 1])}" for i in range(len(edges) - 1)]
    lo = {"p_low": list(edges[:-1].astype(float)), "p_high": list(edges[1:].astype(float))}
    return _bucket_rows(tok, abs_d, k3, codes, len(edges) - 1, labels, lo)


def _fmt_p(x: float) -> str:
    return "0" if x == 0 else ("1" if x == 1 else f"{x:g}")


def position_edges(max_pos: int) -> list[int]:
    edges = [0, 8]
    while edges[-1] <= max_pos:
        edges.append(edges[-1] * 2)
    return edges


def by_position(tok: Tokens, abs_d: np.ndarray, k3: np.ndarray) -> list[dict]:
    pos = tok.pos
    edges = np.asarray(position_edges(int(pos.max())))
    codes = np.searchsorted(edges, pos, side="right") - 1
    del pos
    labels = [f"{edges[i]}–{edges[i + 1] - 1}" for i in range(len(edges) - 1)]
    extra = {"pos_low": [int(e) for e in edges[:-1]], "pos_high": [int(e) - 1 for e in edges[1:]]}
    return _bucket_rows(tok, abs_d, k3, codes, len(edges) - 1, labels, extra)


def length_growth(tok: Tokens) -> dict:
    """Fit |Σδ| ∝ length^b over sequences: b ≈ 0.5 is a random walk (noise), b ≈ 1 is systematic drift."""
    present = tok.present
    length = tok.counts[present].astype(float)
    abs_sum = np.abs(tok.seq_sum(tok.delta)[present])
    ok = (abs_sum > 0) & (length >= 1)
    x, y = np.log(length[ok]), np.log(abs_sum[ok])
    out: dict = {"sequences_used": int(ok.sum()), "model": "log|Σδ| = a + b·log(length)",
                 "reference": {"random_walk": 0.5, "systematic": 1.0}}
    if ok.sum() < 3 or np.ptp(x) == 0:
        out.update(exponent=None, exponent_se=None, intercept=None,
                   reason="needs at least 3 sequences of different lengths with a non-zero Σδ")
        return out
    A = np.vstack([np.ones_like(x), x]).T
    coef, res, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ coef
    dof = max(len(y) - 2, 1)
    cov = np.linalg.inv(A.T @ A) * float(resid @ resid) / dof
    out.update(exponent=float(coef[1]), exponent_se=float(math.sqrt(cov[1, 1])), intercept=float(coef[0]))
    return out


def group_codes(groups: np.ndarray | None, n_seqs: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Sequence → group code; without groups each sequence is its own unit."""
    if groups is None:
        return np.arange(n_seqs), np.array([str(i) for i in range(n_seqs)]), "sequence"
    names, codes = np.unique(groups, return_inverse=True)
    return codes, names, "group"


def group_table(tok: Tokens, groups: np.ndarray | None, clip_low: float, clip_high: float, veto: float) -> dict:
    """Per group: sequences, tokens, mean |δ|, k3, PPO-clipped fraction, vetoed tokens, min r.

    Token sums are first reduced per sequence (contiguous runs), then per group on [N] arrays.
    """
    seq_code, names, unit = group_codes(groups, tok.n_seqs)
    ng = len(names)
    r = np.exp(tok.log_r)
    per_seq = {
        "clipped": tok.seq_sum(((r < clip_low) | (r > clip_high)).astype(np.float64)),
        "vetoed": tok.seq_sum((tok.delta < math.log(veto)).astype(np.float64)),
        "abs": tok.seq_sum(np.abs(tok.delta)),
        "k3": tok.seq_sum(tok.k3()),
    }
    del r
    seq_min = np.full(tok.n_seqs, np.inf)
    seq_min[tok.seq[tok._starts]] = np.minimum.reduceat(tok.log_r, tok._starts)
    n = np.bincount(seq_code, weights=tok.counts, minlength=ng)
    sums = {k: np.bincount(seq_code, weights=v, minlength=ng) for k, v in per_seq.items()}
    min_log_r = np.full(ng, np.inf)
    np.minimum.at(min_log_r, seq_code, seq_min)
    seqs = np.bincount(seq_code, weights=tok.present, minlength=ng)
    keep = n > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        table = {
            "name": names[keep].tolist(),
            "sequences": seqs[keep].astype(int).tolist(),
            "tokens": n[keep].astype(int).tolist(),
            "abs_delta_mean": (sums["abs"] / n)[keep].tolist(),
            "k3_mean": (sums["k3"] / n)[keep].tolist(),
            "clipped_fraction": (sums["clipped"] / n)[keep].tolist(),
            "vetoed_tokens": np.rint(sums["vetoed"][keep]).astype(int).tolist(),
            "min_ratio": np.exp(min_log_r)[keep].tolist(),
        }
    return {"unit": unit, **table}

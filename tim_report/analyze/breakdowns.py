"""Where the mismatch lives: by rollout probability, by position, by group, and how Σδ grows with length."""

from __future__ import annotations

import math

import numpy as np

from .tokens import Tokens

PROB_EDGES = (0.0, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 0.9, 0.99, 1.0)


def _bucket_rows(tok: Tokens, codes: np.ndarray, n_buckets: int, labels: list[str], extra: dict | None = None) -> list[dict]:
    """Per-bucket count, mean |δ|, mean δ, mean k3 and each bucket's share of Σ|δ| and Σk3."""
    abs_d = np.abs(tok.delta)
    k3 = tok.k3()
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


def by_probability(tok: Tokens) -> list[dict]:
    p = np.exp(tok.rollout)
    edges = np.asarray(PROB_EDGES)
    codes = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, len(edges) - 2)
    labels = [f"{_fmt_p(edges[i])}–{_fmt_p(edges[i + 1])}" for i in range(len(edges) - 1)]
    lo = {"p_low": list(edges[:-1].astype(float)), "p_high": list(edges[1:].astype(float))}
    return _bucket_rows(tok, codes, len(edges) - 1, labels, lo)


def _fmt_p(x: float) -> str:
    return "0" if x == 0 else ("1" if x == 1 else f"{x:g}")


def position_edges(max_pos: int) -> list[int]:
    edges = [0, 8]
    while edges[-1] <= max_pos:
        edges.append(edges[-1] * 2)
    return edges


def by_position(tok: Tokens) -> list[dict]:
    edges = np.asarray(position_edges(int(tok.pos.max())))
    codes = np.searchsorted(edges, tok.pos, side="right") - 1
    labels = [f"{edges[i]}–{edges[i + 1] - 1}" for i in range(len(edges) - 1)]
    extra = {"pos_low": [int(e) for e in edges[:-1]], "pos_high": [int(e) - 1 for e in edges[1:]]}
    return _bucket_rows(tok, codes, len(edges) - 1, labels, extra)


def length_growth(tok: Tokens) -> dict:
    """Fit |Σδ| ∝ length^b over sequences: b ≈ 0.5 is a random walk (noise), b ≈ 1 is systematic drift."""
    present = tok.seqs_present()
    length = tok.seq_count()[present].astype(float)
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
    """Per group: sequences, tokens, mean |δ|, k3, PPO-clipped fraction, vetoed tokens, min r."""
    seq_code, names, unit = group_codes(groups, tok.n_seqs)
    g = seq_code[tok.seq]
    ng = len(names)
    r = np.exp(tok.log_r)
    n = np.bincount(g, minlength=ng)
    clipped = np.bincount(g, weights=((r < clip_low) | (r > clip_high)).astype(float), minlength=ng)
    vetoed = np.bincount(g, weights=(tok.delta < math.log(veto)).astype(float), minlength=ng)
    abs_sum = np.bincount(g, weights=np.abs(tok.delta), minlength=ng)
    k3_sum = np.bincount(g, weights=tok.k3(), minlength=ng)
    min_log_r = np.full(ng, np.inf)
    np.minimum.at(min_log_r, g, tok.log_r)
    seqs = np.bincount(seq_code[np.flatnonzero(tok.seqs_present())], minlength=ng)
    keep = n > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        table = {
            "name": names[keep].tolist(),
            "sequences": seqs[keep].astype(int).tolist(),
            "tokens": n[keep].astype(int).tolist(),
            "abs_delta_mean": (abs_sum / n)[keep].tolist(),
            "k3_mean": (k3_sum / n)[keep].tolist(),
            "clipped_fraction": (clipped / n)[keep].tolist(),
            "vetoed_tokens": vetoed[keep].astype(int).tolist(),
            "min_ratio": np.exp(min_log_r)[keep].tolist(),
        }
    return {"unit": unit, **table}

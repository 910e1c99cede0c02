"""Pre-binned distributions for the charts, so renderers never touch token arrays and pages stay small."""

from __future__ import annotations

import math

import numpy as np

from .config import Thresholds
from .tokens import Tokens

RATIO_BINS = 80
MAX_SEQ_POINTS = 2000


def symlog(x: np.ndarray | float, c: float) -> np.ndarray:
    """Vega-Lite's symlog transform: sign(x)·log1p(|x|/c)."""
    return np.sign(x) * np.log1p(np.abs(x) / c)


def ratio_histogram(tok: Tokens, th: Thresholds) -> dict:
    """Histogram of log r on a symlog axis: fine near r = 1 (fp16-sized spread), still reaching the 5x band.

    The symlog constant follows the data (the median |δ|, floored at 1e-6) so a 1e-4 nats spread and a
    broken batch are both readable; the range always includes both bands.
    """
    log_r = tok.log_r
    nz = np.abs(log_r[log_r != 0])
    c = float(max(np.median(nz) if nz.size else 1e-3, 1e-6))
    extent = max(1.15 * math.log(th.band_5x), float(np.abs(log_r).max()) * 1.02)
    u_max = float(symlog(extent, c))
    u_edges = np.linspace(-u_max, u_max, RATIO_BINS + 1)
    edges = np.sign(u_edges) * c * np.expm1(np.abs(u_edges))  # inverse symlog
    counts, _ = np.histogram(np.clip(log_r, edges[0], edges[-1]), bins=edges)
    return {
        "x": "log_r",
        "symlog_constant": c,
        "edges": edges.tolist(),
        "counts": counts.astype(int).tolist(),
        "exact_one": int((log_r == 0).sum()),
        "bands": {"2x": [-math.log(th.band_2x), math.log(th.band_2x)], "5x": [-math.log(th.band_5x), math.log(th.band_5x)]},
    }


def abs_dp_histogram(tok: Tokens) -> dict:
    """|Δp| on log-spaced bins from 1e-8 to 1, with exact zeros counted apart (a log axis cannot show them)."""
    dp = np.abs(np.exp(tok.trainer) - np.exp(tok.rollout))
    edges = np.logspace(-8, 0, 49)
    zero = int((dp == 0).sum())
    counts, _ = np.histogram(np.clip(dp[dp > 0], edges[0], edges[-1]), bins=edges)
    return {"edges": edges.tolist(), "counts": counts.astype(int).tolist(), "zero": zero}


def logp_density(tok: Tokens, bins: int = 60) -> dict:
    """2-D histogram of (rollout logp, trainer logp), only non-empty cells."""
    lo = float(np.floor(min(np.percentile(tok.rollout, 0.1), np.percentile(tok.trainer, 0.1))))
    lo = max(min(lo, -1.0), -30.0)
    edges = np.linspace(lo, 0.0, bins + 1)
    h, _, _ = np.histogram2d(np.clip(tok.rollout, lo, 0), np.clip(tok.trainer, lo, 0), bins=[edges, edges])
    ix, iy = np.nonzero(h)
    return {
        "edges": edges.tolist(),
        "cells": [[int(a), int(b), int(h[a, b])] for a, b in zip(ix, iy)],  # [rollout bin, trainer bin, count]
        "clipped_below": int(((tok.rollout < lo) | (tok.trainer < lo)).sum()),
    }


def seq_points(tok: Tokens, seed: int) -> dict:
    """Per-sequence (length, Σδ) points, a seeded subsample when there are many."""
    present = np.flatnonzero(tok.seqs_present())
    length = tok.seq_count()[present]
    total = tok.seq_sum(tok.delta)[present]
    idx = np.arange(present.size)
    if present.size > MAX_SEQ_POINTS:
        idx = np.sort(np.random.default_rng(seed).choice(present.size, MAX_SEQ_POINTS, replace=False))
    return {
        "sequence": present[idx].astype(int).tolist(),
        "length": length[idx].astype(int).tolist(),
        "seq_log_ratio": total[idx].tolist(),
        "shown": int(idx.size),
        "total": int(present.size),
    }


def distributions(tok: Tokens, th: Thresholds) -> dict:
    return {
        "ratio": ratio_histogram(tok, th),
        "abs_dp": abs_dp_histogram(tok),
        "logp_density": logp_density(tok),
        "seq_log_ratio": seq_points(tok, th.seed),
    }

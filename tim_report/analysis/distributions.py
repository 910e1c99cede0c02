"""Pre-binned distributions for the charts, so renderers never touch token arrays and pages stay small."""

from __future__ import annotations

import math

import numpy as np

from .config import Thresholds
from .tokens import Tokens

RATIO_BINS = 80
MAX_SEQ_POINTS = 2000
RANGE_SAMPLE = 1_000_000  # axis ranges come from an even subsample of at most this many tokens


CHUNK = 1 << 20  # per-token binning runs over 1M-token slices: cache-sized temporaries, no batch-sized ones


def _binned(n: int, n_bins: int, bin_index) -> np.ndarray:
    """Counts of `bin_index(slice)` (bin ids of one slice of tokens) accumulated chunk by chunk."""
    counts = np.zeros(n_bins, np.int64)
    for lo in range(0, n, CHUNK):
        counts += np.bincount(bin_index(slice(lo, lo + CHUNK)), minlength=n_bins)
    return counts


def _subsample(x: np.ndarray) -> np.ndarray:
    if x.shape[0] <= RANGE_SAMPLE:
        return x
    return x[np.linspace(0, x.shape[0] - 1, RANGE_SAMPLE).astype(np.int64)]


def symlog(x: np.ndarray | float, c: float) -> np.ndarray:
    """Vega-Lite's symlog transform: sign(x)·log1p(|x|/c)."""
    return np.sign(x) * np.log1p(np.abs(x) / c)


def ratio_histogram(tok: Tokens, th: Thresholds) -> dict:
    """Histogram of log r on a symlog axis: fine near r = 1 (fp16-sized spread), still reaching the 5x band.

    The symlog constant follows the data (the median |δ|, floored at 1e-6) so a 1e-4 nats spread and a
    broken batch are both readable; the range always includes both bands.
    """
    log_r = tok.log_r
    sample = _subsample(log_r)
    nz = np.abs(sample[sample != 0])
    c = float(max(np.median(nz) if nz.size else 1e-3, 1e-6))
    extent = max(1.15 * math.log(th.band_5x), max(float(log_r.max()), -float(log_r.min())) * 1.02)
    u_max = float(symlog(extent, c))
    u_edges = np.linspace(-u_max, u_max, RATIO_BINS + 1)
    edges = np.sign(u_edges) * c * np.expm1(np.abs(u_edges))  # inverse symlog
    # bin in symlog space, where the bins are uniform: no sort, no search
    def bin_index(sl: slice) -> np.ndarray:
        u = symlog(log_r[sl], c)
        return np.clip(((u + u_max) / (2 * u_max) * RATIO_BINS).astype(np.int64), 0, RATIO_BINS - 1)

    counts = _binned(tok.n, RATIO_BINS, bin_index)
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
    edges = np.logspace(-8, 0, 49)

    def bin_index(sl: slice) -> np.ndarray:
        dp = np.abs(np.exp(tok.trainer[sl]) - np.exp(tok.rollout[sl]))
        idx = np.clip(((np.log10(np.maximum(dp, 1e-300)) + 8.0) * 6.0).astype(np.int64), 0, 47)  # 6 per decade
        idx[dp == 0] = 48  # exact zeros: counted apart
        return idx

    counts = _binned(tok.n, 49, bin_index)
    zero = int(counts[48])
    counts = counts[:48]
    return {"edges": edges.tolist(), "counts": counts.astype(int).tolist(), "zero": zero}


def logp_density(tok: Tokens, bins: int = 60) -> dict:
    """2-D histogram of (rollout logp, trainer logp), only non-empty cells."""
    lo = float(np.floor(min(np.percentile(_subsample(tok.rollout), 0.1), np.percentile(_subsample(tok.trainer), 0.1))))
    lo = max(min(lo, -1.0), -30.0)
    edges = np.linspace(lo, 0.0, bins + 1)

    def bin_of(x: np.ndarray) -> np.ndarray:
        return np.clip(((x - lo) / -lo * bins).astype(np.int64), 0, bins - 1)

    h = _binned(tok.n, bins * bins, lambda sl: bin_of(tok.rollout[sl]) * bins + bin_of(tok.trainer[sl])).reshape(bins, bins)
    ix, iy = np.nonzero(h)
    return {
        "edges": edges.tolist(),
        "cells": [[int(a), int(b), int(h[a, b])] for a, b in zip(ix, iy)],  # [rollout bin, trainer bin, count]
        "clipped_below": int(np.count_nonzero(np.minimum(tok.rollout, tok.trainer) < lo)),
    }


def seq_points(tok: Tokens, seed: int) -> dict:
    """Per-sequence (length, Σδ) points, a seeded subsample when there are many."""
    present = np.flatnonzero(tok.present)
    length = tok.counts[present]
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

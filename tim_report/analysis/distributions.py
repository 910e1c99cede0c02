"""Pre-binned distributions for the charts, so renderers never touch token arrays and pages stay small."""

from __future__ import annotations

import math

import numpy as np

from ..config import Thresholds
from .histograms import binned, ratio_bins, subsample
from .tokens import Tokens

MAX_SEQ_POINTS = 2000


def ratio_histogram(tok: Tokens, th: Thresholds) -> dict:
    """Histogram of log r on a symlog axis: fine near r = 1 (fp16-sized spread), still reaching the 5x band."""
    bins = ratio_bins([tok.log_r], th.band_5x)
    counts = bins.counts(tok.log_r)
    return {
        "x": "log_r",
        "symlog_constant": bins.c,
        "edges": bins.edges.tolist(),
        "counts": counts.astype(int).tolist(),
        "density": bins.density(counts).tolist(),
        "exact_one": int((tok.log_r == 0).sum()),
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

    counts = binned(tok.n, 49, bin_index)
    zero = int(counts[48])
    counts = counts[:48]
    return {"edges": edges.tolist(), "counts": counts.astype(int).tolist(), "zero": zero}


def logp_density(tok: Tokens, bins: int = 60) -> dict:
    """2-D histogram of (rollout logp, trainer logp), only non-empty cells."""
    lo = float(np.floor(min(np.percentile(subsample(tok.rollout), 0.1), np.percentile(subsample(tok.trainer), 0.1))))
    lo = max(min(lo, -1.0), -30.0)
    edges = np.linspace(lo, 0.0, bins + 1)

    def bin_of(x: np.ndarray) -> np.ndarray:
        return np.clip(((x - lo) / -lo * bins).astype(np.int64), 0, bins - 1)

    h = binned(tok.n, bins * bins, lambda sl: bin_of(tok.rollout[sl]) * bins + bin_of(tok.trainer[sl])).reshape(bins, bins)
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

"""Pre-binned distributions for the charts, so renderers never touch token arrays and pages stay small."""

from __future__ import annotations

import math

import numpy as np

from ..config import SAFETY_BOUND, Thresholds
from .histograms import RATIO_BINS, binned, ratio_bins, sorted_counts, subsample
from .tokens import Tokens

MAX_SEQ_POINTS = 2000
ABS_DP_BINS = 48  # 6 a decade from 1e-8 to 1


def ratio_histogram(tok: Tokens, th: Thresholds, delta_sorted: np.ndarray | None = None) -> dict:
    """Histogram of log r on a symlog axis: fine near r = 1 (fp16-sized spread), still reaching the 5x band.

    `delta_sorted`: δ in order, where the ladders sorted it: the counts are then read off it (the bins rise with log r,
    which rises with δ) instead of binning every token. Both lanes ask for it through `Tokens.once`, so whichever gets
    there first makes it."""
    bins = ratio_bins([tok.log_r], th.band_5x)
    if delta_sorted is None:
        counts, exact_one = bins.counts(tok.log_r), int((tok.log_r == 0).sum())
    else:
        counts = sorted_counts(delta_sorted, RATIO_BINS, lambda d: bins.bin_index(np.clip(d, -SAFETY_BOUND, SAFETY_BOUND)))
        exact_one = int(np.searchsorted(delta_sorted, 0.0, "right") - np.searchsorted(delta_sorted, 0.0, "left"))
    return {
        "x": "log_r",
        "symlog_constant": bins.c,
        "edges": bins.edges.tolist(),
        "counts": counts.astype(int).tolist(),
        "density": bins.density(counts).tolist(),
        "exact_one": exact_one,
        "bands": {"2x": [-math.log(th.band_2x), math.log(th.band_2x)], "5x": [-math.log(th.band_5x), math.log(th.band_5x)]},
    }


def abs_dp_bin(dp: np.ndarray) -> np.ndarray:
    """Each |Δp|'s bin, 6 a decade from 1e-8 to 1 (exact zeros in the lowest: `abs_dp_histogram` counts them apart)."""
    return np.clip(((np.log10(np.maximum(dp, 1e-300)) + 8.0) * 6.0).astype(np.int64), 0, ABS_DP_BINS - 1)


def abs_dp_histogram(tok: Tokens, abs_dp: np.ndarray | None = None, in_order: bool = False) -> dict:
    """|Δp| on log-spaced bins from 1e-8 to 1, with exact zeros counted apart (a log axis cannot show them).

    `abs_dp`: the values when the caller holds them (`in_order`: sorted, so the counts are read off them); else each
    1M-token slice's are made here."""
    edges = np.logspace(-8, 0, ABS_DP_BINS + 1)
    if abs_dp is not None and in_order:
        zero = int(np.searchsorted(abs_dp, 0.0, "right"))
        counts = sorted_counts(abs_dp[zero:], ABS_DP_BINS, abs_dp_bin)
    else:
        def bin_index(sl: slice) -> np.ndarray:
            dp = np.abs(np.exp(tok.trainer[sl]) - np.exp(tok.rollout[sl])) if abs_dp is None else abs_dp[sl]
            idx = abs_dp_bin(dp)
            idx[dp == 0] = ABS_DP_BINS  # exact zeros: counted apart
            return idx

        counts = binned(tok.n, ABS_DP_BINS + 1, bin_index)
        zero = int(counts[ABS_DP_BINS])
        counts = counts[:ABS_DP_BINS]
    return {"edges": edges.tolist(), "counts": counts.astype(int).tolist(), "zero": zero}


def logp_density(tok: Tokens, bins: int = 60) -> dict:
    """2-D histogram of (rollout logp, trainer logp), only non-empty cells."""
    lo = float(np.floor(min(np.percentile(subsample(tok.rollout), 0.1), np.percentile(subsample(tok.trainer), 0.1))))
    lo = max(min(lo, -1.0), -30.0)
    edges = np.linspace(lo, 0.0, bins + 1)

    def bin_of(x: np.ndarray) -> np.ndarray:
        """((x − lo) / −lo · bins) cut to an integer in [0, bins − 1]; in place on one slice's copy."""
        t = np.subtract(x, lo)
        t /= -lo
        t *= bins
        return np.clip(t, 0, bins - 1, out=t).astype(np.intp)  # clipped before the cut: the same integers

    def cell(sl: slice) -> np.ndarray:
        code = bin_of(tok.rollout[sl])
        code *= bins
        code += bin_of(tok.trainer[sl])
        return code

    h = binned(tok.n, bins * bins, cell).reshape(bins, bins)
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
    total = tok.seq_sum_of("delta")[present]
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
        "ratio": tok.once("ratio_histogram", lambda: ratio_histogram(tok, th)),  # or the metrics' lane's, off its sort
        "abs_dp": tok.once("abs_dp_histogram", lambda: abs_dp_histogram(tok)),
        "logp_density": logp_density(tok),
        "seq_log_ratio": seq_points(tok, th.seed),
    }

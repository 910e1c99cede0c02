"""The binnings every chart and table shares, each defined once.

    ratio_bins / SymlogBins   log r on a symlog axis (the run page's ratio chart and the comparison's overlay)
    prob_buckets              rollout-probability buckets (the breakdown table and the precision-gap table)
    binned                    counts accumulated over 1M-token slices: no batch-sized temporaries
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..catalogue.numbers import plain
from ..config import PROB_EDGES

RATIO_BINS = 80
RANGE_SAMPLE = 1_000_000  # axis ranges come from an even subsample of at most this many tokens
CHUNK = 1 << 20  # per-token binning runs over 1M-token slices: cache-sized temporaries


def binned(n: int, n_bins: int, bin_index: Callable[[slice], np.ndarray]) -> np.ndarray:
    """Counts of `bin_index(slice)` (bin ids of one slice of tokens) accumulated chunk by chunk."""
    counts = np.zeros(n_bins, np.int64)
    for lo in range(0, n, CHUNK):
        counts += np.bincount(bin_index(slice(lo, lo + CHUNK)), minlength=n_bins)
    return counts


def sorted_counts(s: np.ndarray, n_bins: int, bin_index: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The counts `binned` gives, read off values already sorted: `bin_index` never falls as the values rise, so each
    bin is a run of `s`, found by a binary search per bin edge (no pass over the values)."""
    n = s.shape[0]
    if n == 0:
        return np.zeros(n_bins, np.int64)
    first = np.zeros(n_bins + 1, np.int64)  # first[b]: where the values of bin ≥ b begin
    lo, hi = np.zeros(n_bins - 1, np.int64), np.full(n_bins - 1, n, np.int64)
    want = np.arange(1, n_bins)
    while (lo < hi).any():
        mid = (lo + hi) // 2
        below = bin_index(s[np.minimum(mid, n - 1)]) < want
        lo, hi = np.where(below & (lo < hi), mid + 1, lo), np.where(~below & (lo < hi), mid, hi)
    first[1:-1], first[-1] = lo, n
    return np.diff(first)


def subsample(x: np.ndarray) -> np.ndarray:
    """An even, deterministic subsample of at most RANGE_SAMPLE values (for axis ranges and scale constants)."""
    if x.shape[0] <= RANGE_SAMPLE:
        return x
    return x[np.linspace(0, x.shape[0] - 1, RANGE_SAMPLE).astype(np.int64)]


def symlog(x: np.ndarray | float, c: float) -> np.ndarray:
    """Vega-Lite's symlog transform: sign(x)·log1p(|x|/c)."""
    return np.sign(x) * np.log1p(np.abs(x) / c)


@dataclass(frozen=True)
class SymlogBins:
    """RATIO_BINS bins uniform in symlog(log r, c) over [−u_max, u_max]."""

    c: float
    u_max: float

    @property
    def edges(self) -> np.ndarray:
        u = np.linspace(-self.u_max, self.u_max, RATIO_BINS + 1)
        return np.sign(u) * self.c * np.expm1(np.abs(u))  # inverse symlog

    def density(self, counts: np.ndarray) -> np.ndarray:
        """Share of the tokens per unit of log r in each bin: the height that is honest on a symlog axis.

        The bins are equal in symlog(log r), so they widen away from r = 1; raw counts would grow with the
        bin width and draw Gaussian noise as two humps around a hole at 1. Dividing by the width in log r
        gives the density of log r itself, whose shape the axis only stretches."""
        total = counts.sum()
        return counts / (max(int(total), 1) * np.diff(self.edges))

    def bin_index(self, log_r: np.ndarray) -> np.ndarray:
        u = symlog(log_r, self.c)
        return np.clip(((u + self.u_max) / (2 * self.u_max) * RATIO_BINS).astype(np.int64), 0, RATIO_BINS - 1)

    def counts(self, log_r: np.ndarray, in_order: bool = False) -> np.ndarray:
        """Tokens per bin; `in_order`: the values are sorted (the counts are then read off them, `sorted_counts`)."""
        if in_order:
            return sorted_counts(log_r, RATIO_BINS, self.bin_index)
        return binned(log_r.shape[0], RATIO_BINS, lambda sl: self.bin_index(log_r[sl]))


def ratio_bins(log_rs: list[np.ndarray], band_5x: float) -> SymlogBins:
    """Symlog bins that fit every batch given: fine near r = 1, still reaching the 5x band.

    The symlog constant follows the data (the median nonzero |log r|, floored at 1e-6) so a 1e-4 nats
    spread and a broken batch are both readable; the range always includes both bands.
    """
    sample = np.concatenate([subsample(x) for x in log_rs])
    nz = np.abs(sample[sample != 0])
    c = float(max(np.median(nz) if nz.size else 1e-3, 1e-6))
    top = max(max(float(x.max()), -float(x.min())) for x in log_rs)
    extent = max(1.15 * math.log(band_5x), top * 1.02)
    return SymlogBins(c, float(symlog(extent, c)))


@dataclass(frozen=True)
class ProbBuckets:
    """Each token's rollout-probability bucket (config.PROB_EDGES), decided on log p: no exp per token."""

    codes: np.ndarray  # [T] bucket index

    @staticmethod
    def of(rollout_logp: np.ndarray) -> ProbBuckets:
        """How many inner edges each log p reaches (`searchsorted(..., side="right")`'s answer, in a compare per edge:
        a binary search per token costs twice as much for so few edges)."""
        codes = np.zeros(rollout_logp.shape[0], np.uint8)
        for edge in np.log(np.asarray(PROB_EDGES[1:-1])):
            codes += rollout_logp >= edge
        return ProbBuckets(codes.astype(np.intp))  # counted in bytes, handed to bincount as the index type it takes

    @staticmethod
    def size() -> int:
        return len(PROB_EDGES) - 1

    @staticmethod
    def label(b: int) -> str:
        return f"{plain(PROB_EDGES[b])}–{plain(PROB_EDGES[b + 1])}"

    def sums(self, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Token count ("n") and the weighted sum of each named per-token value, per bucket."""
        n = self.size()
        out = {"n": np.bincount(self.codes, minlength=n)}
        out.update({k: np.bincount(self.codes, weights=v, minlength=n) for k, v in weights.items()})
        return out


def position_edges(max_pos: int) -> list[int]:
    """Position buckets: 0–7, then doubling (8–15, 16–31, …) up past the longest response."""
    edges = [0, 8]
    while edges[-1] <= max_pos:
        edges.append(edges[-1] * 2)
    return edges

"""The statistics every analysis module shares: cluster-robust means, correlations, ESS, percentiles.

Each exists once here, so the metrics, the diagnosis, the precision gap and the comparison compute
a standard error or a correlation the same way. Pure numpy.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import numpy as np

from ..config import PERCENTILES, SELECTION_PROBE_MIN, SPEARMAN_MAX_TOKENS


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a·b without BLAS: OpenBLAS splits a long dot product over as many threads as it has, and the partial
    sums' order changes the last bits, so a build in a Ray worker (one BLAS thread) would differ from a local one.
    numpy's own einsum loop gives the same bits wherever it runs, at about BLAS's single-thread speed."""
    return float(np.einsum("i,i->", a, b))


def finite(x: Any) -> float | None:
    """x as a float when it is a finite number (not a bool), else None."""
    if x is None or isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def exp_or_inf(x: float) -> float:
    """exp(x), or inf where math.exp would overflow (a side broken enough to give log-probs of −1000s)."""
    return math.exp(x) if x < 709.0 else math.inf


def run_starts(seq: np.ndarray) -> np.ndarray:
    """Where each run of equal values begins in a non-decreasing `seq` (tokens are sorted by sequence)."""
    return np.flatnonzero(np.concatenate([[True], seq[1:] != seq[:-1]])) if seq.shape[0] else np.zeros(0, np.int64)


def cluster_mean_se(values: np.ndarray, seq: np.ndarray, starts: np.ndarray | None = None,
                    sums: np.ndarray | None = None) -> tuple[float, float]:
    """Mean and its cluster-robust standard error, clusters = sequences (`seq` non-decreasing); `sums`: the values'
    per-cluster sums when already made (the same numbers `np.add.reduceat` gives).

    SE = √(Σ_g (S_g − n_g·mean)² · G/(G−1)) / n, the CR1 sandwich estimator for a mean.
    """
    n = values.shape[0]
    if n == 0:
        return float("nan"), float("nan")
    mean = float(values.mean())
    if n < 2:
        return mean, float("nan")
    starts = run_starts(seq) if starts is None else starts
    g = starts.shape[0]
    if g < 2:
        return mean, float(values.std(ddof=1) / math.sqrt(n))
    resid = (np.add.reduceat(values, starts) if sums is None else sums) - mean * np.diff(np.append(starts, n))
    return mean, math.sqrt(dot(resid, resid) * g / (g - 1)) / n


def mean_se(values: np.ndarray) -> tuple[float, float]:
    """Mean and its plain standard error (for per-sequence values, which are independent)."""
    n = values.shape[0]
    return float(values.mean()), (float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan"))


def k3_per_token(log_r: np.ndarray) -> np.ndarray:
    """k3 = r − 1 − log r per token (≥ 0; expm1 keeps it exact for tiny log r): the one formula of the KL k3."""
    out = np.expm1(log_r)
    out -= log_r
    return np.maximum(out, 0.0, out=out)


def kish_ess(log_w: np.ndarray) -> float:
    """(Σw)² / (N·Σw²) in log space, so sequence weights exp(Σδ) never overflow."""
    w = log_w - float(log_w.max())
    np.exp(w, out=w)
    return float(w.sum() ** 2 / (log_w.shape[0] * dot(w, w)))


def top_share(w: np.ndarray, k: int, total: float) -> float:
    """Share of `total` (Σw) carried by the k largest weights; `w` is reordered in place."""
    w.partition(w.shape[0] - k)
    return float(w[w.shape[0] - k:].sum() / total)


def pearson(a: np.ndarray, b: np.ndarray, chunk: int = 1 << 20) -> float | None:
    """Pearson correlation; None when either side is constant (undefined).

    Centred sums are accumulated over 1M-element chunks: exact like the two-pass formula, without
    allocating two batch-sized temporaries.
    """
    n = a.shape[0]
    if n < 2:
        return None
    ma, mb = float(a.mean()), float(b.mean())
    saa = sbb = sab = 0.0
    for lo in range(0, n, chunk):
        da = a[lo:lo + chunk] - ma
        db = b[lo:lo + chunk] - mb
        saa += dot(da, da)
        sbb += dot(db, db)
        sab += dot(da, db)
    norm = math.sqrt(saa) * math.sqrt(sbb)
    if norm == 0:
        return None
    return sab / norm


def average_ranks(a: np.ndarray) -> np.ndarray:
    """1-based ranks with ties sharing their average rank (what Spearman's correlation needs)."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    new = np.concatenate([[True], s[1:] != s[:-1]]) if s.shape[0] else np.zeros(0, bool)
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, s.shape[0]))
    ranks = np.empty(a.shape[0])
    ranks[order] = np.repeat(starts + (counts + 1) / 2.0, counts)
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> tuple[float | None, int]:
    """Spearman's rank correlation and how many tokens it ranked (an even subsample above SPEARMAN_MAX_TOKENS)."""
    n = a.shape[0]
    if n > SPEARMAN_MAX_TOKENS:  # an evenly strided subsample: deterministic and cheap in memory
        idx = np.linspace(0, n - 1, SPEARMAN_MAX_TOKENS).astype(np.int64)
        a, b = a[idx], b[idx]
    return pearson(average_ranks(a), average_ranks(b)), int(a.shape[0])


def selection_wins(n: int) -> bool:
    """Whether `np.partition` at a ladder's ranks beats one sort for n values on this CPU (the two give the same
    order statistics, bit for bit, so only the time differs).

    Which wins depends on the CPU, not the data: numpy's SIMD sort took 0.17 s at 16M float64 where the 22-rank
    partition took 0.33 s on one machine, and 1.1 s against 0.36 s on another (docs/performance.md). So from
    SELECTION_PROBE_MIN values on, a probe on a quarter-million values (about 40 ms, once per process) decides;
    selection must win by 4:3, as the signed and |δ| ladders then need two partitions where one sort serves both."""
    return n >= SELECTION_PROBE_MIN and _selection_probe()


@functools.cache
def _selection_probe(size: int = 1 << 18) -> bool:
    x = np.random.default_rng(0).standard_normal(size)
    ranks = ladder_ranks(size)
    best = {"sort": math.inf, "partition": math.inf}
    for _ in range(2):
        for how in best:
            a = x.copy()
            t0 = time.perf_counter()
            a.sort() if how == "sort" else a.partition(ranks)
            best[how] = min(best[how], time.perf_counter() - t0)
    return 4 * best["partition"] < 3 * best["sort"]


def ladder_ranks(n: int) -> np.ndarray:
    """The order statistics (0-based, sorted, distinct) that the PERCENTILES of n values need."""
    pos = np.asarray(PERCENTILES) / 100.0 * (n - 1)
    lo = np.floor(pos).astype(np.int64)
    return np.unique(np.concatenate([lo, np.minimum(lo + 1, n - 1)]))


def percentile_ladder(values: np.ndarray, scratch: bool = False, in_order: bool = False) -> list[float]:
    """Exact percentiles (numpy's default 'linear' method), from a selection at the ranks they need or from one
    sort, whichever is faster on this CPU (`selection_wins`). `scratch=True` reorders `values` in place;
    `in_order`: they are sorted already."""
    s = values if scratch or in_order else values.copy()
    n = s.shape[0]
    if not in_order and n and selection_wins(n):
        s.partition(ladder_ranks(n))
    elif not in_order:
        s.sort()
    return ladder(lambda k: s[k], n)


MERGE_BELOW = 1 << 18  # values: below this, sorted_ladders evaluates each fold whole (vectorised) and merges its sides


def sorted_ladders(s: np.ndarray, folds: dict[str, Any]) -> tuple[list[float], dict[str, list[float]]]:
    """The percentile ladder of the sorted values `s`, and of each fold g(s): a function that falls on the negative
    side and rises on the rest (|x|, k3 of x), so that g(s) in order is the merge of the negative side (reversed)
    and the rest. Each order statistic of g(s) is found by a binary search over the two sides, not by sorting g(s):
    one sort serves every ladder (`selection_wins` says where sorting wins). Up to MERGE_BELOW values a fold is
    evaluated whole and its two sides merged instead (at a few thousand tokens the Python of the binary searches cost
    more than the analysis). For |x| it is bit-identical to sorting |x| (negation is exact); a fold is evaluated by
    the same numpy function as its per-token array."""
    n = s.shape[0]
    z = int(np.searchsorted(s, 0.0, side="left"))  # s[:z] < 0 ≤ s[z:]
    if n <= MERGE_BELOW:  # a few thousand binary-search steps in Python cost more than g over every value and a merge
        def merged(g) -> np.ndarray:
            out = np.concatenate([g(s[:z])[::-1], g(s[z:])])  # two rising runs: the stable sort (timsort) merges them
            out.sort(kind="stable")
            return out

        return ladder(lambda k: s[k], n), {name: ladder(merged(g).__getitem__, n) for name, g in folds.items()}

    def kth_of(g):
        def one(i: int) -> float:
            return float(g(s[i:i + 1])[0])

        def kth(k: int) -> float:
            lo, hi = max(0, k + 1 - (n - z)), min(k + 1, z)  # how many of the k+1 smallest g come from the negative side
            while lo < hi:
                i = (lo + hi) // 2
                if one(z + k - i) > one(z - 1 - i):  # the (k+1−i)-th of the rising side beats the next falling one
                    lo = i + 1
                else:
                    hi = i
            j = k + 1 - lo
            return max(one(z - lo) if lo else -math.inf, one(z + j - 1) if j else -math.inf)
        return kth

    return ladder(lambda k: s[k], n), {name: ladder(kth_of(g), n) for name, g in folds.items()}


def ladder(kth, n: int) -> list[float]:
    """The PERCENTILES of n values from their k-th smallest, `kth(k)`, as numpy's 'linear' method gives them."""
    pos = np.asarray(PERCENTILES) / 100.0 * (n - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    t = pos - lo
    a = np.array([kth(int(k)) for k in lo], dtype=np.float64)
    b = np.array([kth(int(k)) for k in hi], dtype=np.float64)
    out = np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)  # numpy's _lerp, bit for bit
    return [float(v) for v in out]


def poisson_tail(k: int, lam: float) -> float:
    """P(X ≥ k) for X ~ Poisson(lam), to rounding: above the mean the regularized lower incomplete gamma P(k, lam) by its
    series (each term lam / (k + n) of the last, so it converges fast), at or below it one minus the first k terms."""
    if k <= 0:
        return 1.0
    if lam <= 0:
        return 0.0
    if k <= lam:
        log_terms = [j * math.log(lam) - lam - math.lgamma(j + 1) for j in range(k)]
        return max(0.0, 1.0 - math.fsum(math.exp(t) for t in log_terms))
    term = total = 1.0 / k
    n = 1
    while term > total * 1e-17:
        term *= lam / (k + n)
        total += term
        n += 1
    return min(1.0, math.exp(k * math.log(lam) - lam - math.lgamma(k)) * total)

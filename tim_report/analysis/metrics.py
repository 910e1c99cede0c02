"""Summary metrics with their exact definitions (design §4).

Conventions: δ = trainer_logp − rollout_logp (nats), r = exp(δ) = p_train / p_rollout (δ clamped
to ±20 before exponentiating, as verl does). Token-mean = over all valid tokens of the batch;
seq-mean = mean over sequences of per-sequence values. Standard errors on token-means treat
sequences as clusters (tokens of one sequence are not independent), which is wider and more
honest than std/√T.
"""

from __future__ import annotations

import math

import numpy as np

from .config import SAFETY_BOUND, Thresholds
from .tokens import Tokens

PERCENTILES = (0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9)
SPEARMAN_MAX_TOKENS = 250_000  # above this, Spearman uses an even subsample (ranking costs; SE < 2e-3)


def run_starts(seq: np.ndarray) -> np.ndarray:
    """Where each run of equal values begins in a non-decreasing `seq` (tokens are sorted by sequence)."""
    return np.flatnonzero(np.concatenate([[True], seq[1:] != seq[:-1]])) if seq.shape[0] else np.zeros(0, np.int64)


def cluster_mean_se(values: np.ndarray, seq: np.ndarray, starts: np.ndarray | None = None) -> tuple[float, float]:
    """Mean and its cluster-robust standard error, clusters = sequences (`seq` non-decreasing).

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
    resid = np.add.reduceat(values, starts) - mean * np.diff(np.append(starts, n))
    return mean, math.sqrt(float(np.dot(resid, resid)) * g / (g - 1)) / n


def token_mean_se(tok: Tokens, values: np.ndarray) -> tuple[float, float]:
    """Token-mean and its cluster-robust standard error (clusters = sequences)."""
    return cluster_mean_se(values, tok.seq, tok._starts)


def mean_se(values: np.ndarray) -> tuple[float, float]:
    n = values.shape[0]
    return float(values.mean()), (float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan"))


def kish_ess(log_w: np.ndarray) -> float:
    """(Σw)² / (N·Σw²) in log space, so sequence weights exp(Σδ) never overflow."""
    w = log_w - float(log_w.max())
    np.exp(w, out=w)
    return float(w.sum() ** 2 / (log_w.shape[0] * np.dot(w, w)))


def top_share(log_w: np.ndarray, fraction: float = 0.01) -> float:
    """Share of Σw carried by the largest `fraction` of weights."""
    w = log_w - float(log_w.max())
    np.exp(w, out=w)
    total = float(w.sum())
    k = max(1, math.ceil(fraction * w.shape[0]))
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
        saa += float(np.dot(da, da))
        sbb += float(np.dot(db, db))
        sab += float(np.dot(da, db))
    norm = math.sqrt(saa) * math.sqrt(sbb)
    if norm == 0:
        return None
    return sab / norm


def spearman(a: np.ndarray, b: np.ndarray) -> tuple[float | None, int]:
    import pandas as pd

    n = a.shape[0]
    if n > SPEARMAN_MAX_TOKENS:  # an evenly strided subsample: deterministic and cheap in memory
        idx = np.linspace(0, n - 1, SPEARMAN_MAX_TOKENS).astype(np.int64)
        a, b = a[idx], b[idx]
    ra = pd.Series(a).rank(method="average").to_numpy()
    rb = pd.Series(b).rank(method="average").to_numpy()
    return pearson(ra, rb), int(a.shape[0])


def percentile_ladder(values: np.ndarray, scratch: bool = False) -> list[float]:
    """Exact percentiles (numpy's default 'linear' method) from one sort.

    numpy's SIMD sort is ~3× faster than the multi-kth partition `np.percentile` does for eleven
    percentiles. `scratch=True` sorts `values` in place instead of copying it.
    """
    s = values if scratch else values.copy()
    s.sort()
    pos = np.asarray(PERCENTILES) / 100.0 * (s.shape[0] - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, s.shape[0] - 1)
    t = pos - lo
    a, b = s[lo], s[hi]
    out = np.where(t >= 0.5, b - (b - a) * (1 - t), a + (b - a) * t)  # numpy's _lerp, bit for bit
    return [float(v) for v in out]


def summary_metrics(tok: Tokens, th: Thresholds) -> dict:
    """The flat `metrics` object of summary.json.

    Per-token temporaries are made and dropped one family at a time so peak memory stays a small
    multiple of the batch (see benchmarks/bench_analyze.py).
    """
    d, log_r = tok.delta, tok.log_r
    present, count = tok.present, tok.counts[tok.present]
    seq_sum = tok.seq_sum(d)[present]
    seq_log_r = np.clip(seq_sum, -SAFETY_BOUND, SAFETY_BOUND)
    m: dict = {"tokens": tok.n, "sequences": int(present.sum()), "sequences_in_batch": tok.n_seqs}
    ladder: dict[str, list[float]] = {"delta": percentile_ladder(d)}

    m["bias"], m["bias_se"] = token_mean_se(tok, d)
    m["kl_k1"], m["kl_k1_se"] = -m["bias"], m["bias_se"]  # token-mean(−δ)
    m["kl_k2"], m["kl_k2_se"] = token_mean_se(tok, 0.5 * np.square(d))

    k3 = tok.k3()
    m["kl_k3"], m["kl_k3_se"] = token_mean_se(tok, k3)
    ladder["k3"] = percentile_ladder(k3, scratch=True)
    del k3

    r = np.exp(log_r)
    r2_mean, r2_se = token_mean_se(tok, np.square(r))
    m["chi2_token"], m["chi2_token_se"] = r2_mean - 1.0, r2_se
    m["phantom_clip"] = float(np.count_nonzero((r < 1 - th.ppo_eps_low) | (r > 1 + th.ppo_eps_high)) / tok.n)
    del r
    seq_r2_mean, seq_r2_se = mean_se(np.exp(2.0 * seq_log_r))
    m["chi2_seq"], m["chi2_seq_se"] = seq_r2_mean - 1.0, seq_r2_se
    m["ess"] = kish_ess(log_r)
    m["ess_seq"] = kish_ess(seq_log_r)
    m["top1pct_mass"] = top_share(log_r, 0.01)

    abs_d = np.abs(d)
    m["abs_delta_mean"], m["abs_delta_mean_se"] = token_mean_se(tok, abs_d)
    m["outside_2x"] = float(np.count_nonzero(abs_d > math.log(th.band_2x)) / tok.n)
    m["outside_5x"] = float(np.count_nonzero(abs_d > math.log(th.band_5x)) / tok.n)
    m["abs_delta_max"] = float(abs_d.max())
    m["token_mult_prob_error"], m["token_mult_prob_error_se"] = token_mean_se(tok, np.exp(np.minimum(abs_d, SAFETY_BOUND)))
    ladder["abs_delta"] = percentile_ladder(abs_d, scratch=True)  # reorders abs_d: last use
    m["abs_delta_median"] = ladder["abs_delta"][PERCENTILES.index(50)]
    m["abs_delta_p90"] = ladder["abs_delta"][PERCENTILES.index(90)]
    m["abs_delta_p99"] = ladder["abs_delta"][PERCENTILES.index(99)]
    del abs_d

    vetoed = d < math.log(th.veto)
    m["veto_token_fraction"] = float(np.count_nonzero(vetoed) / tok.n)
    m["veto_seq_fraction"] = float((np.bincount(tok.seq[vetoed], minlength=tok.n_seqs)[present] > 0).mean())
    del vetoed

    mean_ro = tok.seq_sum(tok.rollout)[present] / count
    mean_tr = tok.seq_sum(tok.trainer)[present] / count
    m["ppl_rollout"], m["ppl_rollout_se"] = mean_se(np.exp(-mean_ro))
    m["ppl_trainer"], m["ppl_trainer_se"] = mean_se(np.exp(-mean_tr))
    m["log_ppl_diff"], m["log_ppl_diff_se"] = mean_se(mean_ro - mean_tr)
    m["corr_logp"] = pearson(tok.rollout, tok.trainer)
    m["spearman_logp"], m["spearman_logp_tokens"] = spearman(tok.rollout, tok.trainer)

    p_ro = np.exp(tok.rollout)
    p_tr = np.exp(tok.trainer)
    m["corr_prob"] = pearson(p_ro, p_tr)
    p_tr -= p_ro
    abs_dp = np.abs(p_tr, out=p_tr)
    del p_ro
    m["abs_dp_mean"], m["abs_dp_mean_se"] = token_mean_se(tok, abs_dp)
    m["abs_dp_max"] = float(abs_dp.max())
    m["abs_dp_std"] = float(abs_dp.std(ddof=1)) if tok.n > 1 else 0.0
    ladder["abs_dp"] = percentile_ladder(abs_dp, scratch=True)
    del abs_dp, p_tr

    m["seq_log_ratio_mean"], m["seq_log_ratio_mean_se"] = mean_se(seq_sum)
    m["seq_log_ratio_abs_max"] = float(np.abs(seq_sum).max())
    m["percentiles"] = {"q": list(PERCENTILES), **ladder}
    m["thresholds"] = {
        "ppo_clip": [1 - th.ppo_eps_low, 1 + th.ppo_eps_high],
        "band_2x": [1 / th.band_2x, th.band_2x],
        "band_5x": [1 / th.band_5x, th.band_5x],
        "veto": th.veto,
        "log_ratio_clamp": SAFETY_BOUND,
    }
    return m

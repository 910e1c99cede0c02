"""The mismatch split by weight-version lag: staleness (expected, corrected by importance weights) against the numerical
floor (lag 0, judged against its precision's band) (design §10, docs/staleness.md).

Per lag bucket (0, 1, 2, …, negative ones, "unknown"): tokens and their share, KL k3, mean δ, mean |δ|, Kish ESS of
the token ratios, the shares PPO clips and the token TIS cap truncates, and where the median ratio sits (the share of
tokens with r < 1: ½ for precision noise, away from it for weights other than the labelled ones). With K_b = Σ k3
over bucket b's tokens, n_b its tokens, k̄₀ = K₀ / n₀ lag 0's per-token KL (the floor's rate) and K = Σ_b K_b over the
buckets of lag ≥ 0:

    K = N·k̄₀ + Σ_{b ≥ 1} (K_b − n_b·k̄₀)        exactly (N = Σ_b n_b)
    staleness share = Σ_{b ≥ 1} (K_b − n_b·k̄₀) / K,   floor share = N·k̄₀ / K,   the two add up to 1

Each bucket's excess (K_b − n_b·k̄₀)/K is its own part: additive as the chain's link shares are, and in [0, 1] when
every older bucket disagrees at least as much per token as lag 0 does (a negative part: an older bucket closer than
lag 0, itself a sign that lag 0 is not what its label says). The interval is a bootstrap over sequences (clusters).
Negative and unknown lags are listed but outside the split. Every per-token sum is taken once per run of tokens of one
sequence and one lag (one reduceat pass per quantity), so the split costs a few passes over the batch.
"""

from __future__ import annotations

import math

import numpy as np

from ...config import STALENESS_BOOTSTRAP, Thresholds
from ...config.bounds import MAX_LAGS
from ...errors import BadInput
from ...model import StepBatch
from ..histograms import CHUNK
from ..tokens import Tokens
from .versions import UNKNOWN, has_versions, sequence_versions, token_lags, trainer_version

RULE = ("staleness share = Σ over lag ≥ 1 of (KL k3 sum − tokens × lag 0's per-token KL k3) / KL k3 sum over lag ≥ 0: "
        "the KL beyond what lag 0's rate gives the same tokens; with the floor share N·k̄₀/K it adds up to 1")


def split(batch: StepBatch, tok: Tokens, th: Thresholds) -> dict | None:
    """The staleness split's numbers (no judgement: `judge` reads them against the band); None without versions."""
    if not has_versions(batch):
        return None
    trainer, source = trainer_version(batch.meta)
    lag_tok, seq_lag = token_lags(batch, tok, trainer)
    starts, run_lag = _runs(tok, lag_tok, seq_lag)
    sums = _run_sums(tok, starts, th)
    run_seq = tok.seq[starts]
    lags = np.unique(run_lag)
    if lags.size > MAX_LAGS:  # a corrupt step: its split (a pass per lag) and its index row would grow with it
        raise BadInput(batch.meta.get("file") or batch.meta.get("source", "batch"),
                       f"its tokens name {lags.size:,} distinct weight-version lags, more than the {MAX_LAGS} a step is "
                       "split into (config.bounds.MAX_LAGS): a run's lag is a few versions")
    order = sorted(int(x) for x in lags if x != UNKNOWN) + ([UNKNOWN] if (lags == UNKNOWN).any() else [])
    rows = [_row(lag, run_lag == lag, sums, run_seq, tok.n) for lag in order]
    split_rows = [r for r in rows if isinstance(r["lag"], int) and r["lag"] >= 0]
    total = sum(r["k3_sum"] for r in split_rows)
    rate0 = next((r["kl_k3"] for r in split_rows if r["lag"] == 0), None)
    for r in rows:
        inside = isinstance(r["lag"], int) and r["lag"] >= 0
        r["kl_k3_part"] = r["k3_sum"] / total if total > 0 and inside else None
        r["excess_share"] = ((r["k3_sum"] - r["tokens"] * rate0) / total
                             if total > 0 and rate0 is not None and inside and r["lag"] >= 1 else None)
    share = None
    if rate0 is not None and total > 0:
        share = float(sum(r["excess_share"] for r in split_rows if r["lag"] >= 1))
    _, newest, count = sequence_versions(batch.weight_version, batch.n_seqs)
    return {
        "rule": RULE,
        "trainer_version": trainer, "trainer_version_source": source,
        "per_token_versions": batch.token_version is not None,
        "by_lag": [{k: v for k, v in r.items() if k != "k3_sum"} for r in rows],
        "share": share,
        "share_interval": (_interval(run_lag, run_seq, sums, tok.n_seqs, seed=th.seed)
                           if share is not None and len(split_rows) > 1 else None),
        "floor_share": (1.0 - share) if share is not None else None,
        "tokens_in_split": int(sum(r["tokens"] for r in split_rows)),
        "unknown_tokens": int(sum(r["tokens"] for r in rows if r["lag"] == "unknown")),
        "negative_tokens": int(sum(r["tokens"] for r in rows if isinstance(r["lag"], int) and r["lag"] < 0)),
        "newest_version": int(newest.max()) if (newest != UNKNOWN).any() else None,
        "max_versions_per_sequence": int(count.max()) if count.size else 0,
        "sequences_over_two_versions": int((count > 2).sum()),
        "cost": _cost(run_lag, sums),
    }


def _cost(run_lag: np.ndarray, sums: dict[str, np.ndarray]) -> dict | None:
    """What the lag costs as importance weights (issue 33's units): over the tokens of lag ≥ 1 together, their Kish
    ESS and the shares PPO clips and the TIS cap truncates, beside lag 0's clip share; None without such tokens."""
    stale = (run_lag >= 1) & (run_lag != UNKNOWN)
    n = float(sums["n"][stale].sum())
    if n == 0:
        return None
    r, r2 = float(sums["r"][stale].sum()), float(sums["r2"][stale].sum())
    lag0 = run_lag == 0
    n0 = float(sums["n"][lag0].sum())
    return {"tokens": int(n), "ess": r * r / (n * r2) if r2 > 0 else None, "clipped": float(sums["clip"][stale].sum()) / n,
            "capped": float(sums["cap"][stale].sum()) / n,
            "clipped_lag0": float(sums["clip"][lag0].sum()) / n0 if n0 else None}


def _runs(tok: Tokens, lag_tok: np.ndarray | None, seq_lag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of valid tokens of one sequence and one lag starts, and the run's lag."""
    if lag_tok is None:
        starts = tok.starts
        return starts, seq_lag[tok.seq[starts]]
    change = np.flatnonzero(lag_tok[1:] != lag_tok[:-1]) + 1
    starts = np.union1d(tok.starts, change) if change.size else tok.starts
    return starts, lag_tok[starts]


def _run_sums(tok: Tokens, starts: np.ndarray, th: Thresholds) -> dict[str, np.ndarray]:
    """Per run: tokens, Σδ, Σ|δ|, Σk3, Σr, Σr², tokens PPO clips, tokens over the TIS cap: one reduceat each, over
    blocks of whole runs of about CHUNK tokens, so the temporaries stay cache-sized beside the metrics' lane."""
    names = ("delta", "abs", "clip", "cap", "below", "above", "r", "r2", "k3")
    out = {k: np.zeros(starts.shape[0]) for k in names}
    out["n"] = np.diff(np.append(starts, tok.n)).astype(np.float64)
    cuts = np.unique(np.searchsorted(starts, np.arange(0, tok.n, CHUNK), side="right") - 1)
    for a, b in zip(cuts, [*cuts[1:].tolist(), starts.shape[0]]):
        lo_tok = int(starts[a])
        part = slice(lo_tok, int(starts[b]) if b < starts.shape[0] else tok.n)
        for k, v in _block_sums(tok.delta[part], tok.log_r[part], starts[a:b] - lo_tok, th).items():
            out[k][a:b] = v
    out["r"] += out["n"]  # Σr = Σ(r − 1) + n
    out["r2"] += 2 * (out["r"] - out["n"]) + out["n"]  # Σr² = Σ(r − 1)² + 2Σ(r − 1) + n
    return out


def _block_sums(delta: np.ndarray, log_r: np.ndarray, starts: np.ndarray, th: Thresholds) -> dict[str, np.ndarray]:
    red = np.add.reduceat
    out = {"delta": red(delta, starts), "abs": red(np.abs(delta), starts)}
    em = np.expm1(log_r)  # r − 1, exact for tiny log r
    lo, hi = th.ppo_clip
    # int32 counts: a run is one sequence's tokens, far below 2³¹ (half the time of int64 sums)
    out["clip"] = red(((em < lo - 1) | (em > hi - 1)).view(np.int8), starts, dtype=np.int32)
    out["cap"] = red((em > th.tis_token_cap - 1).view(np.int8), starts, dtype=np.int32)
    out["below"] = red((delta < 0).view(np.int8), starts, dtype=np.int32)  # r < 1 and r > 1: where the median sits
    out["above"] = red((delta > 0).view(np.int8), starts, dtype=np.int32)
    out["r"] = red(em, starts)
    out["r2"] = red(np.square(em), starts)
    em -= log_r
    np.maximum(em, 0.0, out=em)  # k3 = r − 1 − log r (stats.k3_per_token)
    out["k3"] = red(em, starts)
    return out


def _row(lag: int, runs: np.ndarray, sums: dict[str, np.ndarray], run_seq: np.ndarray, n_all: int) -> dict:
    s = {k: v[runs] for k, v in sums.items()}
    n = float(s["n"].sum())
    k3, ad = float(s["k3"].sum()), float(s["abs"].sum())
    r, r2 = float(s["r"].sum()), float(s["r2"].sum())
    return {"lag": "unknown" if lag == UNKNOWN else lag, "tokens": int(n), "share": n / n_all,
            "sequences": int(np.unique(run_seq[runs]).size),
            "kl_k3": k3 / n, "kl_k3_se": _cluster_se(s["k3"], s["n"], run_seq[runs]),
            "mean_delta": float(s["delta"].sum()) / n, "mean_abs_delta": ad / n,
            "mean_abs_delta_se": _cluster_se(s["abs"], s["n"], run_seq[runs]),
            "ess": r * r / (n * r2) if r2 > 0 else None, "clipped": float(s["clip"].sum()) / n,
            "capped": float(s["cap"].sum()) / n, **_median_side(s, run_seq[runs]), "k3_sum": k3}


def _median_side(s: dict[str, np.ndarray], seq: np.ndarray) -> dict:
    """Where the bucket's median ratio sits (martingale's rule): the share of its tokens with r < 1 among those with
    r ≠ 1, ½ when the median is 1, with its cluster standard error. Weights that are not the labelled ones move the
    median (a share far from ½); precision noise leaves it at 1 and widens the tail (the clipped share) instead."""
    signed = s["below"] + s["above"]
    n = float(signed.sum())
    return {"below_one": float(s["below"].sum()) / n if n else None,
            "below_one_se": _cluster_se(s["below"], signed, seq) if n else None}


def _cluster_se(sums: np.ndarray, counts: np.ndarray, seq: np.ndarray) -> float | None:
    """The token-mean's cluster-robust standard error from per-run sums, sequences as clusters (stats.cluster_mean_se)."""
    s = np.bincount(np.unique(seq, return_inverse=True)[1], weights=sums)
    c = np.bincount(np.unique(seq, return_inverse=True)[1], weights=counts)
    g, total = s.size, float(c.sum())
    if g < 2 or total <= 0:
        return None
    resid = s - c * (float(s.sum()) / total)
    return math.sqrt(float(resid @ resid) * g / (g - 1)) / total


def _interval(run_lag: np.ndarray, run_seq: np.ndarray, sums: dict[str, np.ndarray], n_seqs: int,
              seed: int) -> list[float] | None:
    """A 95% percentile interval of the staleness share, resampling sequences with replacement (STALENESS_BOOTSTRAP
    draws, a fixed seed: the same batch gives the same interval)."""
    lag0, stale = run_lag == 0, (run_lag >= 1) & (run_lag != UNKNOWN)
    per = {name: np.bincount(run_seq[keep], weights=sums[key][keep], minlength=n_seqs)
           for name, keep, key in (("k0", lag0, "k3"), ("n0", lag0, "n"), ("ks", stale, "k3"), ("ns", stale, "n"))}
    used = np.flatnonzero((per["n0"] + per["ns"]) > 0)
    if used.size < 2:
        return None
    vectors = np.stack([per[k][used] for k in ("k0", "n0", "ks", "ns")])  # [4, S]
    rng = np.random.default_rng(seed)
    draws = []
    for lo in range(0, STALENESS_BOOTSTRAP, 50):  # 50 resamples at a time: [50, S] counts stay small
        b = min(50, STALENESS_BOOTSTRAP - lo)
        picks = rng.integers(0, used.size, size=(b, used.size))
        weights = np.stack([np.bincount(p, minlength=used.size) for p in picks]).astype(np.float64)
        k0, n0, ks, ns = (weights @ vectors.T).T
        with np.errstate(divide="ignore", invalid="ignore"):
            draws.append((ks - ns * k0 / n0) / (k0 + ks))
    values = np.concatenate(draws)
    values = values[np.isfinite(values)]
    if values.size < STALENESS_BOOTSTRAP // 2:
        return None
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]


def judge(numbers: dict, noise_kl_max: float, noise_abs_delta_max: float, band: str, z: float = 2.0,
          min_tokens: int = 0) -> dict:
    """The split with its floor read against the band (lag 0 beyond it by `z` standard errors: `within` False; fewer
    than `min_tokens` lag-0 tokens: `enough` False, too few to judge the numerics apart from the lag) and which part
    dominates: staleness when its share is over half, else numerics."""
    lag0 = next((r for r in numbers["by_lag"] if r["lag"] == 0), None)
    floor = None
    if lag0 is not None:
        kl, kl_se = lag0["kl_k3"], lag0["kl_k3_se"] or 0.0
        ad, ad_se = lag0["mean_abs_delta"], lag0["mean_abs_delta_se"] or 0.0
        beyond = (kl - z * kl_se) > noise_kl_max or (ad - z * ad_se) > noise_abs_delta_max
        floor = {"tokens": lag0["tokens"], "kl_k3": kl, "kl_k3_se": lag0["kl_k3_se"], "mean_abs_delta": ad,
                 "mean_abs_delta_se": lag0["mean_abs_delta_se"], "band": band, "noise_kl_max": noise_kl_max,
                 "noise_abs_delta_max": noise_abs_delta_max, "within": not beyond,
                 "enough": lag0["tokens"] >= min_tokens,
                 "times_band_kl": kl / noise_kl_max if noise_kl_max > 0 else None,
                 "times_band_abs_delta": ad / noise_abs_delta_max if noise_abs_delta_max > 0 else None}
    share = numbers["share"]
    dominant = None if share is None else "staleness" if share > 0.5 else "numerics"
    return {**numbers, "floor": floor, "dominant": dominant}

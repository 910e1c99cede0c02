"""Caches that outlive a weight update: the mismatch of the sequences whose prompt the engine served from its prefix
cache (a hit: `cached_tokens` > 0) against those it computed afresh (a miss), in one batch (design §12,
docs/staleness.md "A prefix cache that outlives an update").

A prefix (radix) cache keeps the KV of the prompts it has seen. An engine that keeps it across a weight update (NeMo-RL
#4018, miles #2783: a cache that outlived 17 updates) answers with the new weights over a prompt the old ones read, so
its hits disagree with the trainer beyond its misses, which share the engine, the precision, the step and the lag.
Per group: sequences, tokens, KL k3 and mean |δ| (each ± its cluster-robust standard error, sequences as clusters)
and the mean δ. The test is on mean |δ| (every token of a hit is scored over the stale prompt, and |δ| is not ruled by
a few tail tokens as KL k3 is):

    z = (|δ|_hit − |δ|_miss) / √(se_hit² + se_miss²) ≥ cache_z,   |δ|_hit ≥ cache_ratio_min × |δ|_miss,

with at least cache_min_sequences sequences and min_tokens tokens on each side (config.DiagnosisThresholds). Sums are
taken once per sequence (a few passes over the batch), so the split costs little beside the metrics.
"""

from __future__ import annotations

import math

import numpy as np

from ...catalogue import findings, severity
from ..bands import choose_band
from ..consequence import consequence
from ..registry import Scene, detector
from ..tokens import Tokens

RULE = ("a hit is a sequence whose prompt the engine served partly or wholly from its prefix cache (cached_tokens > 0); "
        "z = (mean |δ| of the hits − of the misses) / √(se² + se²), standard errors cluster-robust over sequences")


def cache_split(batch, tok: Tokens) -> dict | None:
    """The mismatch of cache hits against misses; None when the batch does not say which prompts were cached, or says
    none was (an engine without a prefix cache, or with it off, records 0 for every sequence: nothing to compare)."""
    cached = batch.cached_tokens
    if cached is None or not (hit_seq := np.asarray(cached) > 0)[tok.present].any():
        return None
    per = {"n": tok.counts.astype(np.float64), "abs": tok.seq_sum_of("abs_delta"), "k3": tok.seq_sum_of("k3"),
           "delta": tok.seq_sum_of("delta")}  # the batch's shared per-sequence sums (Tokens.seq_sum_of)
    groups = {name: _group(per, tok.present & keep) for name, keep in (("hit", hit_seq), ("miss", ~hit_seq))}
    hit, miss = groups["hit"], groups["miss"]
    z = ratio = None
    if hit["tokens"] and miss["tokens"]:
        se = math.hypot(hit["mean_abs_delta_se"] or 0.0, miss["mean_abs_delta_se"] or 0.0)
        gap = hit["mean_abs_delta"] - miss["mean_abs_delta"]
        z = gap / se if se > 0 else (math.inf if gap > 0 else 0.0)
        ratio = hit["mean_abs_delta"] / miss["mean_abs_delta"] if miss["mean_abs_delta"] > 0 else None
    return {"available": True, "rule": RULE, "hit": hit, "miss": miss, "z": z, "ratio": ratio,
            "cached_tokens": int(np.asarray(cached, np.int64).sum()),
            "hit_share": hit["tokens"] / tok.n if tok.n else 0.0}


def _group(per: dict[str, np.ndarray], keep: np.ndarray) -> dict:
    """One side of the split from per-sequence sums: tokens, sequences, KL k3, mean |δ| (with SEs), mean δ."""
    n = per["n"][keep]
    total = float(n.sum())
    out: dict = {"sequences": int(keep.sum()), "tokens": int(total)}
    for key, name in (("k3", "kl_k3"), ("abs", "mean_abs_delta"), ("delta", "mean_delta")):
        s = per[key][keep]
        mean = float(s.sum()) / total if total else None
        out[name] = mean
        if name != "mean_delta":
            out[f"{name}_se"] = _cluster_se(s, n, mean) if mean is not None else None
    return out


def _cluster_se(sums: np.ndarray, counts: np.ndarray, mean: float) -> float | None:
    """The CR1 standard error of a token-mean from its per-sequence sums (stats.cluster_mean_se's formula)."""
    g = sums.shape[0]
    if g < 2:
        return None
    resid = sums - counts * mean
    return math.sqrt(float(resid @ resid) * g / (g - 1)) / float(counts.sum())


def _measured(s: Scene) -> dict | None:
    split = cache_split(s.batch, s.tok)
    if split is not None:
        split.update(threshold_z=s.dt.cache_z, threshold_ratio=s.dt.cache_ratio_min,
                     min_sequences=s.dt.cache_min_sequences)
    return split


@detector("stale_prefix_cache", section=("prefix_cache", _measured))
def _stale_prefix_cache(s: Scene) -> dict | None:
    """The hits disagree with the trainer beyond the misses of the same batch: significant, large and on enough."""
    split = s.once(_measured)
    if split is None or split["z"] is None:
        return None
    hit, miss, dt = split["hit"], split["miss"], s.dt
    enough = min(hit["sequences"], miss["sequences"]) >= dt.cache_min_sequences and \
        min(hit["tokens"], miss["tokens"]) >= dt.min_tokens
    if not enough or split["z"] < dt.cache_z or (split["ratio"] is not None and split["ratio"] < dt.cache_ratio_min):
        return None
    hits = np.asarray(s.batch.cached_tokens)[s.tok.seq] > 0
    effect = consequence(s.tok.subset(hits), "stale_prefix_cache", dt, s.th.ppo_clip)
    evidence = {"z": split["z"], "ratio": split["ratio"], "hit_sequences": hit["sequences"], "hit_tokens": hit["tokens"],
                "miss_sequences": miss["sequences"], "hit_mean_abs_delta": hit["mean_abs_delta"],
                "miss_mean_abs_delta": miss["mean_abs_delta"], "hit_kl_k3": hit["kl_k3"], "miss_kl_k3": miss["kl_k3"],
                "threshold_z": dt.cache_z, "threshold_ratio": dt.cache_ratio_min, "material": bool(effect["material"])}
    found = findings.make("stale_prefix_cache", evidence, dt)
    return severity.weigh(found, effect, {"side": "rollout", "basis": "stale_cache"}, choose_band(s.batch.meta)[0].name)

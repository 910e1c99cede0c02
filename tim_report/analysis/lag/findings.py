"""The five lag findings, each a detector over the staleness split (analysis/lag/split.py; words in
catalogue/staleness.py): stale weights (lag 0 beyond its noise band), negative lag, version span, an ESS collapse in a
lag bucket, and an idle correction (a logged PPO clip fraction of 0 while the ratios would clip).

The split is measured once per batch (`Scene.once`) and kept as summary.json's `staleness` (analyze moves it out of
the diagnosis, as the chain's).
"""

from __future__ import annotations

import math

import numpy as np

from ...catalogue import findings, severity
from ...catalogue.findings.faults import PROCESSED
from ..bands import choose_band
from ..consequence import consequence
from ..registry import Scene, detector
from .rescored import looks_like_evidence, mislabelled
from .split import judge, split
from .versions import sequence_versions, token_lags


def measured(s: Scene) -> dict | None:
    """The split with its floor judged against the batch's band (None: the batch names no version)."""
    numbers = s.once(_numbers)
    if numbers is None:
        return None
    return judge(numbers, s.dt.noise_kl_max, s.dt.noise_abs_delta_max, choose_band(s.batch.meta)[0].name,
                 min_tokens=s.dt.min_tokens)


def lag0_only(s: Scene) -> np.ndarray | None:
    """Per valid token, whether it is at lag 0, when the batch carries tokens of a known lag ≥ 1 (None otherwise: the
    batch names no version, or every known lag is 0). The detectors of where a mismatch sits read only these: at
    lag ≥ 1 the policy's own change sits where the policy learns (often the first tokens), not where an engine bug does."""
    st = s.once(measured)
    if not st or st["trainer_version"] is None or not any(isinstance(r["lag"], int) and r["lag"] >= 1 for r in st["by_lag"]):
        return None
    lag_tok, seq_lag = token_lags(s.batch, s.tok, st["trainer_version"])
    # per sequence: each sequence's verdict repeated over its run of valid tokens (they are in sequence order)
    return (lag_tok == 0) if lag_tok is not None else np.repeat(seq_lag == 0, s.tok.counts)


def _numbers(s: Scene) -> dict | None:
    return s.given["staleness"] if "staleness" in s.given else split(s.batch, s.tok, s.th)


def _truncation_explains(s: Scene) -> bool:
    """Rollout log-probs renormalised by top-p / top-k (`processed_logprobs`) sit log S below the trainer's on every
    token, lag 0's too: its band, judged on the full vocabulary, cannot tell that offset from older weights. Explained
    unless the recorded kept sets show the mismatch over them beyond noise; the run's own lag-0 history (a truncated
    run's offset is the same at every step) still judges a sync that stops."""
    found = s.found.get(PROCESSED)
    return found is not None and found["evidence"].get("renormalised_within_noise") is not False


def _older_like(st: dict, kl0: float) -> tuple[dict | None, list[float]]:
    """The older bucket (lag ≥ 1) whose per-token KL k3 is nearest lag 0's on a log scale: whose weights lag 0 looks
    like; named only when the older buckets' KL rises with their lag (their labels hold), else None. Also the older
    buckets' KL k3, lag by lag."""
    older = sorted((r for r in st["by_lag"] if isinstance(r["lag"], int) and r["lag"] >= 1 and r["kl_k3"] > 0),
                   key=lambda r: r["lag"])
    kls = [r["kl_k3"] for r in older]
    if not older or kl0 <= 0 or any(b <= a for a, b in zip(kls, kls[1:])):
        return None, kls
    return min(older, key=lambda r: abs(math.log(r["kl_k3"] / kl0))), kls


@detector("stale_weights", section=("staleness", measured))
def _stale_weights(s: Scene) -> dict | None:
    st = s.once(measured)
    floor = st and st["floor"]
    if not floor or floor["within"] or not floor["enough"] or _truncation_explains(s):
        return _rescored_stale(s, st)
    lag_tok, seq_lag = token_lags(s.batch, s.tok, st["trainer_version"])
    lag0 = (lag_tok == 0) if lag_tok is not None else (seq_lag[s.tok.seq] == 0)
    effect = consequence(s.tok.subset(lag0), "stale_weights", s.dt, s.th.ppo_clip)
    like, older = _older_like(st, floor["kl_k3"])
    times_band = max(floor["times_band_kl"] or 0.0, floor["times_band_abs_delta"] or 0.0)
    evidence = {"tokens": floor["tokens"], "kl_k3": floor["kl_k3"], "kl_k3_se": floor["kl_k3_se"],
                "mean_abs_delta": floor["mean_abs_delta"], "band": floor["band"], "noise_kl_max": floor["noise_kl_max"],
                "noise_abs_delta_max": floor["noise_abs_delta_max"], "times_band": times_band,
                "looks_like_lag": like["lag"] if like else None, "looks_like_kl_k3": like["kl_k3"] if like else None,
                "older_kl_k3_low": min(older) if len(older) > 1 and like is None else None,
                "older_kl_k3_high": max(older) if len(older) > 1 and like is None else None,
                "material": bool(effect["material"]), **looks_like_evidence(s)}
    found = findings.make("stale_weights", evidence, s.dt)
    return severity.weigh(found, effect, {"side": "rollout", "basis": "stale_sync"}, floor["band"])


def order_breach(by_lag: list[dict], min_tokens: int, z: float, ratio: float) -> tuple[dict, dict, float] | None:
    """The pair of lag buckets (each of lag ≥ 0 with `min_tokens` tokens) whose newer one is farther from the trainer
    than the older one by the most standard errors: its KL k3 `ratio` times the older's and beyond `z` standard errors
    of the difference; (newer, older, z), or None. Pure, over the split's `by_lag` rows (benchmarks/bench_lag_history.py
    measures it on subsets of real runs)."""
    rows = sorted((r for r in by_lag if isinstance(r["lag"], int) and r["lag"] >= 0 and r["tokens"] >= min_tokens),
                  key=lambda r: r["lag"])
    worst = None
    for i, newer in enumerate(rows):
        for older in rows[i + 1:]:
            gap = newer["kl_k3"] - older["kl_k3"]
            se = math.hypot(newer["kl_k3_se"] or 0.0, older["kl_k3_se"] or 0.0)
            if gap > z * se and newer["kl_k3"] >= ratio * older["kl_k3"]:
                zz = gap / se if se > 0 else math.inf
                if worst is None or zz > worst[2]:
                    worst = (newer, older, zz)
    return worst


def _rescored_stale(s: Scene, st: dict | None) -> dict | None:
    """`stale_weights` from a rescore alone (rescored.mislabelled): a bucket's tokens nearer other weights than their
    label's own, at any lag, weighed on that bucket's tokens."""
    found = mislabelled(s) if st and st["trainer_version"] is not None else None
    if found is None or st is None:
        return None
    lag_tok, seq_lag = token_lags(s.batch, s.tok, st["trainer_version"])
    at = (lag_tok == found["rescored_lag"]) if lag_tok is not None else (seq_lag[s.tok.seq] == found["rescored_lag"])
    effect = consequence(s.tok.subset(at), "stale_weights", s.dt, s.th.ppo_clip)
    band = choose_band(s.batch.meta)[0].name
    made = findings.make("stale_weights", {**found, "material": bool(effect["material"])}, s.dt)
    return severity.weigh(made, effect, {"side": "rollout", "basis": "stale_sync"}, band)


@detector("version_order")
def _version_order(s: Scene) -> dict | None:
    """An older bucket closer to the trainer than a newer one, beyond both buckets' noise: the newer-labelled tokens
    came from older weights than their label (a sync that stopped, a label taken before the sync landed). Lag 0 beyond
    its band is `stale_weights`' to say; here any two buckets of lag ≥ 0 with `min_tokens` tokens each are compared."""
    st = s.once(measured)
    if not st or st["trainer_version"] is None:
        return None
    worst = order_breach(st["by_lag"], s.dt.min_tokens, s.dt.z, s.dt.version_order_ratio)
    if worst is None or "stale_weights" in s.found:
        return None
    newer, older, z = worst
    return findings.make("version_order", {
        "newer_lag": newer["lag"], "newer_kl_k3": newer["kl_k3"], "newer_tokens": newer["tokens"],
        "older_lag": older["lag"], "older_kl_k3": older["kl_k3"], "older_tokens": older["tokens"],
        "ratio": newer["kl_k3"] / older["kl_k3"] if older["kl_k3"] > 0 else None, "z": min(z, 1e6),
        "newer_below_one": newer.get("below_one"), "threshold_ratio": s.dt.version_order_ratio,
        "threshold_z": s.dt.z}, s.dt)


@detector("negative_lag", when_identical=True)
def _negative_lag(s: Scene) -> dict | None:
    st = s.once(measured)
    if not st or not st["negative_tokens"]:
        return None
    rows = [r for r in st["by_lag"] if isinstance(r["lag"], int) and r["lag"] < 0]
    n = sum(r["tokens"] for r in rows)
    return findings.make("negative_lag", {"tokens": n, "share": n / max(s.tok.n, 1), "min_lag": min(r["lag"] for r in rows),
                                          "trainer_version": st["trainer_version"],
                                          "trainer_version_source": st["trainer_version_source"]}, s.dt)


@detector("version_span", when_identical=True)
def _version_span(s: Scene) -> dict | None:
    st = s.once(measured)
    limit = s.dt.version_span_max
    if not st or st["max_versions_per_sequence"] <= limit:
        return None
    _, _, count = sequence_versions(s.batch.weight_version, s.batch.n_seqs)
    over = int((count > limit).sum())
    return findings.make("version_span", {"sequences": over, "share": over / max(s.batch.n_seqs, 1),
                                          "max_versions": st["max_versions_per_sequence"], "threshold": limit}, s.dt)


@detector("lag_ess_collapse")
def _lag_ess_collapse(s: Scene) -> dict | None:
    st = s.once(measured)
    if not st:
        return None
    weak = [r for r in st["by_lag"] if isinstance(r["lag"], int) and r["lag"] >= 1 and r["share"] >= s.dt.lag_share_min
            and r["ess"] is not None and r["ess"] < s.dt.lag_ess_min and r["tokens"] >= s.dt.min_tokens]
    if not weak:
        return None
    worst = min(weak, key=lambda r: r["ess"])
    return findings.make("lag_ess_collapse", {"lag": worst["lag"], "tokens": worst["tokens"], "share": worst["share"],
                                              "ess": worst["ess"], "clipped": worst["clipped"], "capped": worst["capped"],
                                              "kl_k3": worst["kl_k3"], "threshold_ess": s.dt.lag_ess_min,
                                              "threshold_share": s.dt.lag_share_min}, s.dt)


@detector("idle_correction")
def _idle_correction(s: Scene) -> dict | None:
    """Where meta carries the trainer's logged PPO clip fraction (`ppo_clip_fraction`, `--meta ppo_clip_fraction=0`)."""
    logged = s.batch.meta.get("ppo_clip_fraction")
    if isinstance(logged, bool) or not isinstance(logged, (int, float)) or not np.isfinite(logged):
        return None
    st = s.once(measured)
    floor = (st or {}).get("floor")
    floor_kl = floor["kl_k3"] if floor else s.dt.noise_kl_max
    kl, kl_se = s.metrics["kl_k3"], s.metrics.get("kl_k3_se") or 0.0
    expected = s.metrics.get("phantom_clip") or 0.0
    if logged > s.dt.idle_clip_logged_max or expected < s.dt.idle_clip_expected or kl - 2 * kl_se <= max(floor_kl, 0.0):
        return None
    return findings.make("idle_correction", {"logged": float(logged), "expected": expected, "kl_k3": kl,
                                             "floor_kl_k3": floor_kl, "floor_from": "lag 0" if floor else "band",
                                             "threshold_expected": s.dt.idle_clip_expected}, s.dt)

"""A/B arms: several steps (or files) per side, each headline metric per arm with a confidence interval, the effect
between the arms with its interval, and a verdict per metric. Pure numpy (and scipy's t quantile).

Input is the index rows of each arm's steps (`run_index.run_row`), so an arm is what `build` would list for it.

The unit of resampling is the step: a step's metric is one draw of the arm's level, steps vary as batches do, and a
few steps per arm is how config changes are judged (verl #7519 uses Welch tests). For a metric whose distance from
its ideal value (the gap: KL k3 itself, 1 − ESS for ESS) is positive at every step, the arms are compared on the log
scale: each arm's geometric mean with a t interval, and the ratio after ÷ before with Welch's interval
(Satterthwaite's degrees of freedom) — "B lowers KL k3 3.1× (2.5–3.8×)". A gap that is exactly 0 at some step (no
token outside the 5x band) has no log, so that metric is compared as a difference of arithmetic means instead. An arm
with one step has no spread to measure: its metric is shown without an interval and no verdict is drawn.

    compare_arms(rows_before, rows_after, labels)  → the compare.json dict of an A/B comparison ("kind": "arms")
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ..catalogue import arms as words
from ..catalogue import metrics as catalogue
from ..config import ARM_LEVEL
from ..model import SCHEMA_VERSION
from .stats import finite

BOUNDED = ("share", "ess")  # units whose gap from the ideal is a share in [0, 1] (1 − ESS for ESS)


def t_quantile(df: float) -> float:
    """The two-sided ARM_LEVEL quantile of Student's t with `df` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.5 + ARM_LEVEL / 2, df))


def arm_interval(values: np.ndarray, log: bool, bounded: bool = False) -> dict:
    """One arm's level: the (geometric) mean of its steps and its t interval; no interval from one step. `bounded`: the
    values are shares, so the interval keeps to [0, 1] (the true level lies there, so the cut costs no coverage)."""
    x = np.log(values) if log else values
    n, mean = len(x), float(x.mean())
    back = math.exp if log else float
    if n < 2:
        return {"steps": n, "mean": back(mean), "low": None, "high": None}
    half = t_quantile(n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    low, high = back(mean - half), back(mean + half)
    if bounded:
        low, high = max(low, 0.0), min(high, 1.0)
    return {"steps": n, "mean": back(mean), "low": low, "high": high}


def welch_effect(before: np.ndarray, after: np.ndarray, log: bool, bounded: bool = False) -> dict | None:
    """after ÷ before (log scale) or after − before, with Welch's interval; None when an arm has one step. `bounded`:
    two shares, whose difference keeps to [−1, 1]."""
    b, a = (np.log(before), np.log(after)) if log else (before, after)
    if len(b) < 2 or len(a) < 2:
        return None
    vb, va = float(b.var(ddof=1)) / len(b), float(a.var(ddof=1)) / len(a)
    diff, se = float(a.mean() - b.mean()), math.sqrt(vb + va)
    if se == 0.0:
        low = high = diff
    else:
        df = (vb + va) ** 2 / ((vb ** 2 / (len(b) - 1) if vb else 0.0) + (va ** 2 / (len(a) - 1) if va else 0.0))
        half = t_quantile(df) * se
        low, high = diff - half, diff + half
    back = math.exp if log else float
    if bounded and not log:
        low, high = max(low, -1.0), min(high, 1.0)
    return {"value": back(diff), "low": back(low), "high": back(high)}


def metric_arms(metric: catalogue.Metric, before: list[dict], after: list[dict]) -> dict | None:
    """One metric over both arms' steps: each arm's level of its gap from the ideal, the effect and the verdict."""
    ideal = metric.ideal if metric.ideal is not None else 0.0
    gaps = [np.array([abs(v - ideal) for r in rows if (v := finite(r.get(metric.key))) is not None]) for rows in (before, after)]
    if not len(gaps[0]) or not len(gaps[1]):
        return None
    log = bool((gaps[0] > 0).all() and (gaps[1] > 0).all())
    bounded = metric.unit in BOUNDED
    effect = welch_effect(gaps[0], gaps[1], log, bounded)
    direction = None
    if not (gaps[0].any() or gaps[1].any()):
        direction = "zero"  # at the ideal at every step of both arms: nothing to tell apart
    elif effect is not None:
        null = 1.0 if log else 0.0
        direction = "lower" if effect["high"] < null else "higher" if effect["low"] > null else "unresolved"
    row = {"key": metric.key, "name": metric.name, "gap": words.gap_name(metric), "scale": "ratio" if log else "difference",
           "before": arm_interval(gaps[0], log, bounded), "after": arm_interval(gaps[1], log, bounded), "effect": effect,
           "direction": direction}
    return row


def _arm(rows: list[dict], label: str) -> dict:
    regimes = Counter(r.get("regime") or "unknown" for r in rows)
    return {"label": label, "steps": len(rows), "ids": [r["id"] for r in rows], "regimes": dict(regimes.most_common()),
            "tokens": sum(r.get("tokens") or 0 for r in rows), "findings": dict(Counter(f for r in rows for f in r.get("findings") or []))}


def arms_why(before: dict, after: dict) -> dict:
    """The findings that differ between the arms: a finding counts for an arm when at least half its steps raise it."""
    def held(arm: dict) -> set[str]:
        return {f for f, n in arm["findings"].items() if 2 * n >= arm["steps"]}

    hb, ha = held(before), held(after)
    rb, ra = (max(arm["regimes"], key=arm["regimes"].get) for arm in (before, after))
    appeared, gone, same = sorted(ha - hb), sorted(hb - ha), sorted(ha & hb)
    return {"regime": {"before": rb, "after": ra}, "appeared": appeared, "gone": gone, "same": same,
            "sentence": words.arms_why(before, after, rb, ra, appeared, gone, same)}


def compare_arms(before: list[dict], after: list[dict], labels: tuple[str, str]) -> dict:
    """Two arms of steps (their index rows) → the compare.json dict of an A/B comparison."""
    arms = {"before": _arm(before, labels[0]), "after": _arm(after, labels[1])}
    rows = [m for key in catalogue.ARMS if (m := metric_arms(catalogue.metric(key), before, after)) is not None]
    for m in rows:
        m["sentence"] = words.arm_sentence(catalogue.metric(m["key"]), m, labels)
    tally = Counter(m["direction"] or "n/a" for m in rows)
    return {"schema_version": SCHEMA_VERSION, "kind": "arms", "labels": {"before": labels[0], "after": labels[1]},
            "arms": arms, "why": arms_why(arms["before"], arms["after"]), "metrics": rows,
            "tally": {k: tally.get(k, 0) for k in ("lower", "higher", "unresolved", "zero", "n/a")},
            "method": words.ARMS_METHOD.format(level=round(ARM_LEVEL * 100))}

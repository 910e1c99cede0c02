"""A run over its steps: the trend of every headline metric, and the steps where a level changed.

Input is the index's run rows (`runs.run_row`), so a build that reuses cached steps needs nothing but
their rows. Steps shared by several rows (several runs at one step) enter the change-point search as
their mean. Change points come from `changepoints.change_points` (PELT), searched in log space for
metrics whose changes read as ratios, and kept only when the shift is at least the metric's floor in
`config.TREND_METRICS`: a level change must stand out of the series' own noise and be big enough to act on.
"""

from __future__ import annotations

import math

import numpy as np

from ..config import CHANGE_POINT_MIN_SIZE, TREND_LOG_AXIS_SPAN, TREND_METRICS, TrendMetric
from .changepoints import change_points
from .stats import finite


def trend(rows: list[dict]) -> dict | None:
    """Every headline metric against training step, sorted by step then run id; None with fewer than two steps."""
    stepped = sorted((r for r in rows if r["step"] is not None), key=lambda r: (r["step"], r["id"]))
    steps = sorted({r["step"] for r in stepped})
    if len(steps) < 2:
        return None
    table = [{"step": r["step"], "run": r["id"], **{m.key: finite(r.get(m.key)) for m in TREND_METRICS}} for r in stepped]
    metrics = [{"key": m.key, "name": m.name, "worse": m.worse, "log_axis": _log_axis([t[m.key] for t in table]),
                "constant": _constant([t[m.key] for t in table])} for m in TREND_METRICS]
    cps = run_change_points(table, steps)
    return {"metrics": metrics, "rows": table, "steps": len(steps), "unstepped": len(rows) - len(stepped),
            "change_points": cps, "change_steps": by_step(cps), "min_steps_for_change": 2 * CHANGE_POINT_MIN_SIZE}


def _constant(values: list[float | None]) -> float | None:
    """The value every step has, when they all have the same one (a panel of a flat line says less than a word)."""
    xs = {v for v in values if v is not None}
    return xs.pop() if len(xs) == 1 and None not in values else None


def _log_axis(values: list[float | None]) -> bool:
    xs = [v for v in values if v is not None]
    return bool(xs) and min(xs) > 0 and max(xs) / min(xs) >= TREND_LOG_AXIS_SPAN


def run_change_points(table: list[dict], steps: list) -> list[dict]:
    """The steps where a metric's level shifts by at least its floor, sorted by step, then metric order."""
    first_run: dict = {}
    for t in table:
        first_run.setdefault(t["step"], t["run"])
    found = []
    for order, m in enumerate(TREND_METRICS):
        for cp in _metric_change_points(_per_step_means(table, steps, m.key), steps, m):
            found.append((cp["step"], order, {**cp, "run": first_run[cp["step"]]}))
    return [cp for _, _, cp in sorted(found, key=lambda x: (x[0], x[1]))]


def _per_step_means(table: list[dict], steps: list, key: str) -> np.ndarray:
    """One value per step (NaN where no run of that step has it): the mean of the runs at that step."""
    index = {s: i for i, s in enumerate(steps)}
    sums, counts = np.zeros(len(steps)), np.zeros(len(steps))
    for t in table:
        if t[key] is not None:
            sums[index[t["step"]]] += t[key]
            counts[index[t["step"]]] += 1
    out = np.full(len(steps), np.nan)
    np.divide(sums, counts, out=out, where=counts > 0)
    return out


def _metric_change_points(values: np.ndarray, steps: list, m: TrendMetric) -> list[dict]:
    ok = np.isfinite(values)
    in_logs = m.scale == "ratio" and bool(ok.any()) and bool((values[ok] > 0).all())
    series = np.log(np.where(ok, values, 1.0)) if in_logs else values.copy()
    series[~ok] = np.nan
    cuts = [cp.index for cp in change_points(series)]
    sums = np.concatenate([[0.0], np.cumsum(np.where(ok, series, 0.0))])
    counts = np.concatenate([[0], np.cumsum(ok)])
    while cuts:  # drop the smallest shift below the floor, then re-measure the levels of the merged segments
        levels = _levels(sums, counts, cuts, in_logs)
        small = [(_shift(levels[k], levels[k + 1], m), k) for k in range(len(cuts))
                 if not _big_enough(levels[k], levels[k + 1], m)]
        if not small:
            break
        cuts.pop(min(small)[1])
    bounds = [0, *cuts, len(series)]
    levels = _levels(sums, counts, cuts, in_logs)
    return [_describe(m, steps, cuts[k], bounds[k], bounds[k + 2] - 1, levels[k], levels[k + 1], in_logs)
            for k in range(len(cuts))]


def _levels(sums: np.ndarray, counts: np.ndarray, cuts: list[int], in_logs: bool) -> list[float]:
    """The mean level of each segment between cuts (a geometric mean for a series in logs), from cumulative sums
    of the finite points (every segment holds at least CHANGE_POINT_MIN_SIZE of them)."""
    b = np.array([0, *cuts, len(sums) - 1])
    means = (sums[b[1:]] - sums[b[:-1]]) / (counts[b[1:]] - counts[b[:-1]])
    return [math.exp(x) for x in means] if in_logs else means.tolist()


def _shift(before: float, after: float, m: TrendMetric) -> tuple[float, float]:
    """(ratio of the larger level to the smaller, absolute difference); the ratio is inf from 0."""
    lo, hi = sorted((abs(before), abs(after)))
    return (hi / lo if lo > 0 else math.inf if hi > 0 else 1.0), abs(after - before)


def _big_enough(before: float, after: float, m: TrendMetric) -> bool:
    """At least the metric's floors, both the ratio and the absolute difference."""
    ratio, diff = _shift(before, after, m)
    return diff > 0 and ratio >= m.min_ratio and diff >= m.min_diff


ADVICE = {
    True: "look for what changed at that step: a weight sync that stopped or failed, a prefix or KV-cache setting, an "
          "engine, kernel or dtype change, a restart",
    False: "something that landed at that step narrowed the gap (a fix, a restart, a cache flush); if nothing did, check "
           "that both sides still score what they should",
}


def _describe(m: TrendMetric, steps: list, at: int, start: int, end: int, before: float, after: float,
              in_logs: bool) -> dict:
    """One change point as data, and as the clause a sentence about its step is made of."""
    up = after > before
    ratio = after / before if before else None
    size = (f"{ratio:.3g}× higher" if up else f"{1 / ratio:.3g}× lower") if in_logs and ratio else ("higher" if up else "lower")
    return {"metric": m.key, "name": m.name, "step": steps[at], "before": before, "after": after, "ratio": ratio,
            "direction": "up" if up else "down", "worse": up == (m.worse == "up"),
            "first_step": steps[start], "last_step": steps[end],
            "change": f"{m.name} is {size} ({_num(before, m)} → {_num(after, m)})"}


def by_step(change_points: list[dict]) -> list[dict]:
    """The change points grouped by step, each step with one sentence a user can act on."""
    steps: dict = {}
    for c in change_points:
        steps.setdefault(c["step"], []).append(c)
    out = []
    for step, cs in steps.items():
        worse = any(c["worse"] for c in cs)
        out.append({"step": step, "run": cs[0]["run"], "worse": worse, "metrics": [c["metric"] for c in cs],
                    "sentence": f"From step {_step(step)}, {_join([c['change'] for c in cs])}: {ADVICE[worse]}."})
    return out


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _step(s) -> str:
    return f"{s:g}" if isinstance(s, float) else str(s)


def _num(x: float, m: TrendMetric) -> str:
    """A level in a sentence, by the metric's unit (as the tables write it)."""
    if m.unit == "count":
        return f"{x:.3g} per step"
    if m.unit == "ess":
        return f"{x:.4f}"
    if m.unit == "share":
        return f"{100 * x:.3g}%"
    return f"{x:.3g}"

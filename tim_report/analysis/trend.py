"""A run over its steps: the trend of every headline metric, and the steps where a level changed.

Input is the index's run rows (`runs.run_row`), so a build that reuses cached steps needs nothing but
their rows. Steps shared by several rows (several runs at one step) enter the change-point search as
their mean. Change points come from `changepoints.change_points` (PELT), searched in log space for
metrics whose changes read as ratios, and kept only when the shift is at least the metric's floor (its catalogue
entry's `trend`): a level change must stand out of the series' own noise and be big enough to act on.
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import findings
from ..catalogue import metrics as catalogue
from ..catalogue.metrics import Metric
from ..catalogue.numbers import plain
from ..config import CHANGE_POINT_MIN_SIZE, TREND_LOG_AXIS_SPAN
from .changepoints import change_points
from .stats import finite


def trend(rows: list[dict]) -> dict | None:
    """Every headline metric against training step, sorted by step then run id; None with fewer than two steps."""
    stepped = sorted((r for r in rows if r["step"] is not None), key=lambda r: (r["step"], r["id"]))
    steps = sorted({r["step"] for r in stepped})
    if len(steps) < 2:
        return None
    followed = [catalogue.metric(k) for k in catalogue.TREND]
    table = [{"step": r["step"], "run": r["id"], **{m.key: finite(r.get(m.key)) for m in followed}} for r in stepped]
    metrics = [{"key": m.key, "name": m.name, "worse": m.worse, "log_axis": _log_axis([t[m.key] for t in table]),
                "constant": _constant([t[m.key] for t in table])} for m in followed]
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
    for order, m in enumerate(catalogue.metric(k) for k in catalogue.TREND):
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


def _metric_change_points(values: np.ndarray, steps: list, m: Metric) -> list[dict]:
    assert m.trend is not None, m.key  # the TREND view holds metrics with a trend rule (a catalogue test checks)
    ok = np.isfinite(values)
    in_logs = m.trend.scale == "ratio" and bool(ok.any()) and bool((values[ok] > 0).all())
    series = np.log(np.where(ok, values, 1.0)) if in_logs else values.copy()
    series[~ok] = np.nan
    cuts = [cp.index for cp in change_points(series)]
    sums = np.concatenate([[0.0], np.cumsum(np.where(ok, series, 0.0))])
    counts = np.concatenate([[0], np.cumsum(ok)])
    while cuts:  # drop the smallest shift below the floor, then re-measure the levels of the merged segments
        levels = _levels(sums, counts, cuts, in_logs)
        small = [(_shift(levels[k], levels[k + 1]), k) for k in range(len(cuts))
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


def _shift(before: float, after: float) -> tuple[float, float]:
    """(ratio of the larger level to the smaller, absolute difference); the ratio is inf from 0."""
    lo, hi = sorted((abs(before), abs(after)))
    return (hi / lo if lo > 0 else math.inf if hi > 0 else 1.0), abs(after - before)


def _big_enough(before: float, after: float, m: Metric) -> bool:
    """At least the metric's floors, both the ratio and the absolute difference."""
    ratio, diff = _shift(before, after)
    assert m.trend is not None, m.key
    return diff > 0 and ratio >= m.trend.min_ratio and diff >= m.trend.min_diff


def _describe(m: Metric, steps: list, at: int, start: int, end: int, before: float, after: float,
              in_logs: bool) -> dict:
    """One change point as data, and as the clause a sentence about its step is made of."""
    up = after > before
    ratio = after / before if before else None
    return {"metric": m.key, "name": m.name, "step": steps[at], "before": before, "after": after, "ratio": ratio,
            "direction": "up" if up else "down", "worse": up == (m.worse == "up"),
            "first_step": steps[start], "last_step": steps[end],
            "change": findings.change_clause(m.name, _level(before, m), _level(after, m), up, ratio if in_logs else None)}


def by_step(change_points: list[dict]) -> list[dict]:
    """The change points grouped by step, each step with one sentence a user can act on."""
    steps: dict = {}
    for c in change_points:
        steps.setdefault(c["step"], []).append(c)
    out = []
    for step, cs in steps.items():
        worse = any(c["worse"] for c in cs)
        out.append({"step": step, "run": cs[0]["run"], "worse": worse, "metrics": [c["metric"] for c in cs],
                    "sentence": findings.change_sentence(plain(step) if isinstance(step, float) else str(step),
                                                         [c["change"] for c in cs], worse)})
    return out


def _level(x: float, m: Metric) -> str:
    """A level in a sentence, as the tables write it (a count as so many per step)."""
    return m.write(x) + (" per step" if m.unit == "count" else "")

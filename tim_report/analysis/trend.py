"""A run over its steps: the trend of every headline metric, and the steps where a level changed.

Input is the index's run rows (`run_index.run_row`), so a build that reuses cached steps needs nothing but
their rows. Steps shared by several rows (several runs at one step) enter the change-point search pooled: their
counts and tokens summed for a share of tokens, their mean otherwise. Change points come from `shifts.level_shifts`,
each tested against the noise of the two segments it separates (a share of tokens as the count of tokens it is), in
log space for metrics whose changes read as ratios, and kept only when the shift is at least the metric's floor (its
catalogue entry's `trend`): a level change must stand out of its segments' own noise and be big enough to act on.
Each step with a change gets one sentence that first says what the steps after it are diagnosed with
(run_verdict.explaining), then, when nothing does, where to look.
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import metrics as catalogue
from ..catalogue import run_words as words
from ..catalogue.metrics import Metric
from ..catalogue.numbers import plain
from ..config import CHANGE_POINT_MIN_SIZE, TREND_LOG_AXIS_SPAN
from .lag.history import lag_key
from .run_verdict import State, change_context, explaining, step_states
from .shifts import Series, level_shifts, prune
from .stats import finite


def trend(rows: list[dict], run_findings: list[dict] | None = None) -> dict | None:
    """Every headline metric against training step, sorted by step then run id; None with fewer than two steps.
    `run_findings` (run_verdict's) let a change-point sentence name the run-level finding at its step."""
    stepped = sorted((r for r in rows if r["step"] is not None), key=lambda r: (r["step"], r["id"]))
    steps = sorted({r["step"] for r in stepped})
    if len(steps) < 2:
        return None
    followed = [catalogue.metric(k) for k in catalogue.TREND]
    table = [{"step": r["step"], "run": r["id"], "tokens": finite(r.get("tokens")), **{m.key: finite(r.get(m.key)) for m in followed}}
             for r in stepped]  # a share's change is tested on its count of tokens
    metrics = [{"key": m.key, "name": m.name, "worse": m.worse, "log_axis": _log_axis([t[m.key] for t in table]),
                "constant": _constant([t[m.key] for t in table])} for m in followed]
    cps = run_change_points(table, steps)
    return {"metrics": metrics, "rows": table, "steps": len(steps), "unstepped": len(rows) - len(stepped),
            "change_points": cps, "change_steps": by_step(cps, step_states(rows), run_findings or [], lag_moves(stepped)),
            "min_steps_for_change": 2 * CHANGE_POINT_MIN_SIZE}


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
        for cp in _metric_change_points(table, steps, m):
            found.append((cp["step"], order, {**cp, "run": first_run[cp["step"]]}))
    return [cp for _, _, cp in sorted(found, key=lambda x: (x[0], x[1]))]


def noise_family(m: Metric) -> str:
    """How a metric's steps scatter: a share of tokens is a count of tokens (binomial), a count per step is a Poisson
    count over the step's tokens, anything else a value with its own spread."""
    return {"share": "binomial", "count": "poisson"}.get(m.unit, "normal")


def step_series(table: list[dict], steps: list, m: Metric) -> tuple[Series, np.ndarray, bool] | None:
    """The metric as one point per step (the runs of a step pooled: their counts and tokens summed, or their values
    averaged), which steps have it, and whether the values are in logs; None when fewer than two steps have it."""
    family = noise_family(m)
    index = {s: i for i, s in enumerate(steps)}
    x, n = np.zeros(len(steps)), np.zeros(len(steps))
    for t in table:
        v, tokens = t[m.key], t.get("tokens")
        if v is None or (family != "normal" and tokens is None):
            continue
        x[index[t["step"]]] += v * tokens if family == "binomial" else v
        # a Poisson count's exposure is every token the step had: the valid ones and those a data problem excluded
        n[index[t["step"]]] += {"binomial": tokens, "poisson": tokens + v}.get(family, 1)
    ok = n > 0
    if ok.sum() < 2:
        return None
    if family != "normal":
        return Series(family, np.round(x[ok]), n[ok]), ok, False
    values = x[ok] / n[ok]
    in_logs = m.trend is not None and m.trend.scale == "ratio" and bool((values > 0).all())
    return Series("normal", np.log(values) if in_logs else values), ok, in_logs


def _metric_change_points(table: list[dict], steps: list, m: Metric) -> list[dict]:
    assert m.trend is not None, m.key  # the TREND view holds metrics with a trend rule (a catalogue test checks)
    got = step_series(table, steps, m)
    if got is None:
        return []
    series, ok, in_logs = got
    kept = [s for s, keep in zip(steps, ok) if keep]

    def level(x: float) -> float:
        return math.exp(x) if in_logs else x

    cuts = prune(series, level_shifts(series), keep=lambda before, after: _big_enough(level(before), level(after), m))
    bounds = [0, *cuts, len(series)]
    levels = [level(series.level(a, b)) for a, b in zip(bounds[:-1], bounds[1:])]
    return [_describe(m, kept, cuts[k], bounds[k], bounds[k + 2] - 1, levels[k], levels[k + 1], in_logs)
            for k in range(len(cuts))]


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
            "change": words.change_clause(m.name, _level(before, m), _level(after, m), up, ratio if in_logs else None)}


def lag_moves(stepped: list[dict]) -> dict:
    """{step: (lag mix before, lag mix at it)} for each step whose lag mix differs from the step before's (the first
    run at a step speaks for it); {} for a run whose steps name no version."""
    first: dict = {}
    for r in stepped:
        first.setdefault(r["step"], r)
    steps = sorted(first)
    return {b: (lag_key(first[a]), lag_key(first[b])) for a, b in zip(steps, steps[1:])
            if None not in (lag_key(first[a]), lag_key(first[b])) and lag_key(first[a]) != lag_key(first[b])}


def by_step(change_points: list[dict], states: list[State] | None = None, run_findings: list[dict] | None = None,
            lags: dict | None = None) -> list[dict]:
    """The change points grouped by step, each step with one sentence a user can act on: what the steps after it
    (up to the next change) are diagnosed with, or the finding the steps before had and these have not, or the lag
    mix that changed at that step (`lags`, lag_moves'), or the run-level finding at that step; where to look when none
    says why."""
    states = states or []
    steps: dict = {}
    for c in change_points:
        steps.setdefault(c["step"], []).append(c)
    order = sorted(steps)
    out = []
    for i, step in enumerate(order):
        cs = steps[step]
        worse = any(c["worse"] for c in cs)
        prev, following = order[i - 1] if i else None, order[i + 1] if i + 1 < len(order) else None
        after = explaining([s for s in states if s.step >= step and (following is None or s.step < following)])
        before = explaining([s for s in states if s.step < step and (prev is None or s.step >= prev)])
        gone = before if before is not None and (after is None or after[0] != before[0]) else None
        since = _began(states, step, after[0]) if after else step
        if since != step:  # the finding led the steps before too: it began there, not at this change of level
            after = explaining([s for s in states if s.step >= since and (following is None or s.step < following)])
        out.append({"step": step, "run": cs[0]["run"], "worse": worse, "metrics": [c["metric"] for c in cs],
                    "explained_by": after[0] if after else None,
                    "sentence": words.change_sentence(plain(step) if isinstance(step, float) else str(step),
                                                      [c["change"] for c in cs], worse, after, gone,
                                                      change_context(run_findings or [], step, [s.step for s in states]),
                                                      words.lag_change(*lags[step]) if lags and step in lags else None,
                                                      since=plain(since) if isinstance(since, float) else str(since))})
    return out


def _began(states: list[State], step, finding: str):
    """The first step of the unbroken stretch of steps led by `finding` that reaches `step` from before (`step` itself
    when the step before it is not led by it): where the run verdict says the finding began."""
    earlier = [s for s in states if s.step < step]
    since = step
    for s in reversed(earlier):
        if s.lead != finding:
            break
        since = s.step
    return since


def _level(x: float, m: Metric) -> str:
    """A level in a sentence, as the tables write it (a count as so many per step)."""
    return m.write(x) + (" per step" if m.unit == "count" else "")

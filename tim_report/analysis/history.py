"""`check --history`: a new step against the run's own band, the rolling median of its previous steps.

Fixed limits (gate.py) say when a batch is bad for anyone; the band says when a step is bad for this
run: a step whose KL doubles while staying under verl's 0.1 alert is news. Pure functions over
index.json rows (site/index_json.py reads them) and the new step's row (run_index.run_row).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..catalogue import metrics as catalogue
from ..catalogue.numbers import fmt, plain
from ..config import HISTORY_MARGIN, HISTORY_MIN_STEPS, HISTORY_WINDOW
from .gate import Violation


@dataclass
class HistoryResult:
    window: list[dict]  # the history rows the band was computed from, oldest first
    basis: str  # those rows in words: "steps 3-12" or "runs a … b (10)"
    violations: list[Violation] = field(default_factory=list)
    note: str | None = None  # why no band was checked (too few steps); None when it was


def window_rows(rows: list[dict], step: float | None, window: int = HISTORY_WINDOW) -> list[dict]:
    """The last `window` steps before `step` when it and the history have steps, else the last `window` rows."""
    stepped = [r for r in rows if r["step"] is not None]
    if step is not None and stepped:
        earlier = sorted((r for r in stepped if r["step"] < step), key=lambda r: r["step"])
        return earlier[-window:]
    return rows[-window:]


def describe(rows: list[dict]) -> str:
    """The rows in words: their steps as ranges, or the first and last run ids."""
    steps = [r["step"] for r in rows]
    if rows and all(s is not None for s in steps):
        return "steps " + _ranges(steps)
    if not rows:
        return "no steps"
    return f"runs {rows[0]['id']} … {rows[-1]['id']} ({len(rows)})" if len(rows) > 1 else f"run {rows[0]['id']}"


def _ranges(steps: list) -> str:
    out: list[list] = []
    for s in steps:
        if out and s == out[-1][1]:  # several runs at one step: the step once
            continue
        if out and isinstance(s, int) and isinstance(out[-1][1], int) and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ", ".join(plain(a) if a == b else f"{plain(a)}-{plain(b)}" for a, b in out)


def band(values: list[float], worse: str, margin: float, floor: float) -> tuple[float, float]:
    """(median, bound): median + max(margin·median, floor) when up is worse; when down is worse (ESS), the same on
    the deficit 1 − value."""
    med = statistics.median(values)
    if worse == "up":
        return med, med + max(margin * abs(med), floor)
    return med, med - max(margin * abs(1.0 - med), floor)


def check_history(new: dict, rows: list[dict], window: int = HISTORY_WINDOW, margin: float = HISTORY_MARGIN,
                  floors: dict[str, float] | None = None, min_steps: int = HISTORY_MIN_STEPS) -> HistoryResult:
    """The new step's row (run_row keys) against the band of its window of history rows, metric by metric.

    A metric the new step lacks, or that fewer than `min_steps` rows of the window hold, is not checked.
    """
    floors = {**{k: float(catalogue.metric(k).history_floor or 0.0) for k in catalogue.HISTORY}, **(floors or {})}
    win = window_rows(rows, new.get("step"), window)
    res = HistoryResult(win, describe(win))
    if len(win) < min_steps:
        res.note = (f"history: {len(win)} earlier step{'s' if len(win) != 1 else ''} ({res.basis}), fewer than "
                    f"{min_steps}: no band checked")
        return res
    for metric in catalogue.HISTORY:
        worse = str(catalogue.metric(metric).worse)
        value = new.get(metric)
        values = [r[metric] for r in win if r.get(metric) is not None]
        if value is None or len(values) < min_steps:
            continue
        med, bound = band(values, worse, margin, floors[metric])
        broken = value > bound if worse == "up" else value < bound
        if broken:
            sign, word = (">", "above") if worse == "up" else ("<", "below")
            res.violations.append(Violation("history", metric, (
                f"{metric} = {fmt(value, 4)} {sign} {fmt(bound, 4)}, {word} the run's band (median {fmt(med, 4)} of "
                f"{res.basis}; margin {plain(margin)}×, floor {plain(floors[metric])})")))
    return res

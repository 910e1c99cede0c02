"""The words of an A/B comparison of arms (analysis/arms.py measures): each metric's verdict, why the arms differ."""

from __future__ import annotations

from .metrics import Metric
from .numbers import fmt, times
from .run_words import REGIME_WORDS, short

ARMS_METHOD = ("Each step is one draw of its arm's level. A metric is compared on its gap from the ideal value (1 − ESS "
               "for ESS): on the log scale when the gap is positive at every step (geometric means, the ratio after ÷ "
               "before with Welch's {level}% interval), else as a difference of means (Welch's {level}% interval). "
               "A share's interval keeps to [0%, 100%] (a difference of shares to ±100%): the level lies there. "
               "A verdict needs two steps per arm or more.")


def gap_name(m: Metric) -> str:
    """What is compared: the metric itself when its ideal is 0, else its distance from the ideal ("1 − ESS")."""
    if not m.ideal:
        return m.name
    return f"{fmt(m.ideal)} − {m.name}" if m.worse == "down" else f"|{m.name} − {fmt(m.ideal)}|"


def arm_sentence(m: Metric, row: dict, labels: tuple[str, str]) -> str:
    """'fp32 lowers KL k3 3.1× (2.5×–3.8×)', or why no verdict is drawn."""
    e, gap, (before, after) = row["effect"], row["gap"], labels
    if row["direction"] == "zero":
        return f"{gap}: {m.write(0.0)} at every step of both arms"
    if e is None:
        return f"{gap}: no verdict from one step in an arm (give each arm two steps or more)"
    ratio = row["scale"] == "ratio"
    if row["direction"] == "unresolved":
        what = (f"{after} ÷ {before} {times(e['value'])}, interval {times(e['low'])}–{times(e['high'])} covers 1" if ratio else
                f"{after} − {before} {m.write(e['value'])}, interval {m.write(e['low'])} to {m.write(e['high'])} covers 0")
        return f"{gap}: no difference resolved ({what})"
    verb = "lowers" if row["direction"] == "lower" else "raises"
    if ratio:
        factor = (lambda v: 1 / v) if row["direction"] == "lower" else (lambda v: v)
        lo, hi = sorted((factor(e["low"]), factor(e["high"])))
        return f"{after} {verb} {gap} {times(factor(e['value']))} ({times(lo)}–{times(hi)})"
    lo, hi = sorted((abs(e["low"]), abs(e["high"])))
    return f"{after} {verb} {gap} by {m.write(abs(e['value']))} ({m.write(lo)} to {m.write(hi)})"


def _ids(ids: list[str]) -> str:
    return ", ".join(short(i) for i in ids)


def arms_why(before: dict, after: dict, regime_before: str, regime_after: str, appeared: list[str], gone: list[str],
             same: list[str]) -> str:
    """What differs between the arms, from their steps' diagnoses: the usual regime and the findings most steps raise."""
    rb, ra = REGIME_WORDS.get(regime_before, regime_before), REGIME_WORDS.get(regime_after, regime_after)
    parts = [f"Most steps of both arms are {ra}." if rb == ra else f"Most steps of after are {ra}, of before {rb}."]
    if appeared:
        parts.append(f"Raised by most steps of after only: {_ids(appeared)}.")
    if gone:
        parts.append(f"Raised by most steps of before only: {_ids(gone)}.")
    if same:
        parts.append(f"In most steps of both: {_ids(same)}.")
    if not (appeared or gone):
        parts.append("No finding tells the arms apart: the difference is one of size (the metrics below).")
    return " ".join(parts)

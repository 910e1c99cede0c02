"""A comparison (compare.json) reshaped for display: values, signed changes, arrows and marks, for two batches
(analysis/compare.py's dict) and for two arms of steps (analysis/arms.py's, `kind == "arms"`).

Shared by the compare page and compare.md; display only.
"""

from __future__ import annotations

from ...catalogue import metrics as catalogue
from ...catalogue.numbers import fixed, fmt, times
from ..token_text import visible

DIRECTION_MARK = {"better": "🟢", "worse": "🔴", "same": "⚪", "changed": "•", "n/a": ""}  # markdown (GitHub has the emoji)
HTML_MARK = {"better": "✓", "worse": "✖", "same": "○", "changed": "•", "n/a": ""}  # page: text symbols every font has


def value(key: str, v) -> str:
    """A metric's value as the catalogue writes it (a key without an entry: a plain number)."""
    entry = catalogue.BY_KEY.get(key)
    return entry.write(v) if entry else fmt(v)


def signed(key: str, x) -> str:
    """A change of a metric's value, signed; a change of a share in percentage points."""
    if x is None:
        return "—"
    entry = catalogue.BY_KEY.get(key)
    s = fmt(100.0 * abs(x), 3) + " pp" if entry and entry.unit == "share" else value(key, abs(x))
    if x == 0:
        return "0"
    return ("+" if x > 0 else "−") + s


def arrow(x) -> str:
    if x is None:
        return ""
    return "▲" if x > 0 else ("▼" if x < 0 else "=")


def rel(x) -> str:
    if x is None:
        return "—"
    if x == 0:
        return "0%"
    return ("+" if x > 0 else "−") + fmt(100.0 * abs(x), 3) + "%"


def metric_rows(cmp: dict, marks: dict = DIRECTION_MARK) -> list[dict]:
    out = []
    for r in cmp["metrics"]:
        k = r["key"]
        out.append({"key": k, "name": r["name"], "before": value(k, r["before"]), "after": value(k, r["after"]),
                    "change": signed(k, r["change"]), "arrow": arrow(r["change"]), "rel": rel(r["relative_change"]),
                    "direction": r["direction"], "mark": marks.get(r["direction"], ""),
                    "better_text": r["better_text"]})
    return out


def token_rows(rows: list[dict]) -> list[dict]:
    return [{"sequence": t["sequence"], "position": t["position"],
             "token": visible(t["token"]) if t.get("token") is not None else "",
             "token_id": t.get("token_id"), "diff_before": fmt(t["diff_before"]), "diff_after": fmt(t["diff_after"]),
             "abs_change": signed("abs_delta", t["abs_change"]), "arrow": arrow(t["abs_change"]),
             "rollout": _moved(t["rollout_before"], t["rollout_after"]), "trainer": _moved(t["trainer_before"], t["trainer_after"])}
            for t in rows]


def _moved(before: float, after: float) -> str:
    """A log-prob on both sides: one number when it did not move, `before → after` when it did."""
    return fixed(after) if before == after else f"{fixed(before)} → {fixed(after)}"


def seq_rows(rows: list[dict]) -> list[dict]:
    return [{"sequence": s["sequence"], "tokens": fmt(s["tokens"]), "before": fmt(s["abs_delta_mean_before"]),
             "after": fmt(s["abs_delta_mean_after"]), "change": signed("abs_delta", s["change"]), "arrow": arrow(s["change"]),
             "better": fmt(s["tokens_better"]), "worse": fmt(s["tokens_worse"])} for s in rows]


# ---- two arms of steps ----------------------------------------------------------------------------

ARM_HTML_MARK = {"lower": "✓", "higher": "✖", "unresolved": "≈", "zero": "=", None: "–"}  # the arms page
ARM_MARK = {"lower": "🟢", "higher": "🔴", "unresolved": "⚪", "zero": "⚪", None: "➖"}  # compare.md for arms


def _writer(key: str):
    """How a gap is written: in the metric's own unit when the gap is the metric (ideal 0), else as a plain number
    (1 − ESS = 0.000301, not ESS's four decimals)."""
    m = catalogue.metric(key)
    return m.write if not m.ideal else fmt


def arm_level(m: dict, side: str) -> tuple[str, str]:
    """(the arm's mean, its interval or why there is none)."""
    a, write = m[side], _writer(m["key"])
    if a["low"] is None:
        return write(a["mean"]), "one step"
    return write(a["mean"]), f"[{write(a['low'])}, {write(a['high'])}]"


def arm_effect(m: dict) -> tuple[str, str]:
    e = m["effect"]
    if e is None or m["direction"] == "zero":
        return "—", ""
    if m["scale"] == "ratio":
        return times(e["value"]), f"[{times(e['low'])}, {times(e['high'])}]"
    write = _writer(m["key"])
    return write(e["value"]), f"[{write(e['low'])}, {write(e['high'])}]"


def arm_rows(cmp: dict, marks: dict) -> list[dict]:
    return [{"gap": m["gap"], "before": arm_level(m, "before"), "after": arm_level(m, "after"), "effect": arm_effect(m),
             "direction": m["direction"] or "no verdict", "mark": marks[m["direction"]], "sentence": m["sentence"],
             "cls": {"lower": "better", "higher": "worse"}.get(m["direction"] or "", "")} for m in cmp["metrics"]]

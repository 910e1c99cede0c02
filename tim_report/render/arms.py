"""The A/B arms comparison (analysis/arms.py's dict) as a page and as GitHub markdown: display only."""

from __future__ import annotations

from ..catalogue.metrics import metric
from ..catalogue.numbers import fmt, times
from ..config import ARM_LEVEL
from .md import esc, href, table
from .pages import environment, page_context

MARK = {"lower": "✓", "higher": "✖", "unresolved": "≈", "zero": "=", None: "–"}
EMOJI = {"lower": "🟢", "higher": "🔴", "unresolved": "⚪", "zero": "⚪", None: "➖"}


def _writer(key: str):
    """How a gap is written: in the metric's own unit when the gap is the metric (ideal 0), else as a plain number
    (1 − ESS = 0.000301, not ESS's four decimals)."""
    m = metric(key)
    return m.write if not m.ideal else fmt


def level(m: dict, side: str) -> tuple[str, str]:
    """(the arm's mean, its interval or why there is none)."""
    a, write = m[side], _writer(m["key"])
    if a["low"] is None:
        return write(a["mean"]), "one step"
    return write(a["mean"]), f"[{write(a['low'])}, {write(a['high'])}]"


def effect(m: dict) -> tuple[str, str]:
    e = m["effect"]
    if e is None or m["direction"] == "zero":
        return "—", ""
    if m["scale"] == "ratio":
        return times(e["value"]), f"[{times(e['low'])}, {times(e['high'])}]"
    write = _writer(m["key"])
    return write(e["value"]), f"[{write(e['low'])}, {write(e['high'])}]"


def rows(cmp: dict, marks: dict) -> list[dict]:
    return [{"gap": m["gap"], "before": level(m, "before"), "after": level(m, "after"), "effect": effect(m),
             "direction": m["direction"] or "no verdict", "mark": marks[m["direction"]], "sentence": m["sentence"],
             "cls": {"lower": "better", "higher": "worse"}.get(m["direction"] or "", "")} for m in cmp["metrics"]]


def render_arms_html(cmp: dict, timestamp: str | None = None, assets: str | None = None) -> str:
    """The arms page; `assets` as html.render_run's (None: self-contained)."""
    return environment().get_template("arms.html").render(c=cmp, labels=cmp["labels"], tally=cmp["tally"],
                                                          rows=rows(cmp, MARK), level=round(ARM_LEVEL * 100),
                                                          **page_context([], timestamp, assets))


def render_arms_md(cmp: dict, html_url: str | None = "index.html") -> str:
    """compare.md for arms: why first, a verdict per metric, the table; short enough for any PR comment."""
    lab, arms, t = cmp["labels"], cmp["arms"], cmp["tally"]
    b, a = esc(lab["before"]), esc(lab["after"])
    head = [f"<!-- tim-report compare -->\n## tim-report A/B arms: {b} → {a}"]
    if html_url:
        head.append(f"[Full comparison]({href(html_url, None)})")
    head.append(f"**Why:** {esc(cmp['why']['sentence'], None, own=True)}")
    zero = f" · {t['zero']} at the ideal in both" if t["zero"] else ""
    head.append(f"**{t['lower']} lower 🟢 · {t['higher']} higher 🔴 · {t['unresolved']} not resolved ⚪{zero}** "
                f"({b}: {fmt(arms['before']['steps'])} steps, {a}: {fmt(arms['after']['steps'])} steps)")
    r = rows(cmp, EMOJI)
    head.append("\n".join(f"- {x['mark']} {esc(x['sentence'], None, own=True)}" for x in r))
    head.append(table(["gap from the ideal", b, a, "after vs before", "verdict"],
                      [[esc(x["gap"]), *(esc(" ".join(x[c]).strip()) for c in ("before", "after", "effect")),
                        f"{x['mark']} {x['direction']}"]
                       for x in r], numeric=range(1, 4)))
    head.append(f"_{esc(cmp['method'], None, own=True)}_")
    return "\n\n".join(head) + "\n"

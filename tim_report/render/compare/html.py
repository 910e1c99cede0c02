"""The comparison page (HTML): two batches' metrics side by side, overlaid distributions, the per-token change;
or two arms of steps, each metric's level per arm with its interval and the effect between them.

Display only: formatting, symbols and Altair specs from the pre-binned data in compare.json.

    render_compare_html(cmp, timestamp=None, assets=None) -> str     DIR/index.html (assets: as html.render_run's)
"""

from __future__ import annotations

import altair as alt

from ...catalogue.numbers import fmt, sig
from ...config import ARM_LEVEL
from .. import charts as ch
from ..pages import environment, page_context
from .views import ARM_HTML_MARK, HTML_MARK, arm_rows, metric_rows, seq_rows, signed, token_rows

BEFORE_COLOUR = "#8c8c8c"
AFTER_COLOUR = ch.BLUE


# ---- charts -------------------------------------------------------------------------------------

def _steps(edges: list[float], sides: dict[str, list[float]]) -> list[dict]:
    """Step-line points: each bin's left edge with its value, and the last edge closing the line."""
    pts = []
    for label, frac in sides.items():
        for i, f in enumerate(frac):
            pts.append({"x": sig(edges[i], 6), "f": sig(f, 4), "side": label})
        pts.append({"x": sig(edges[-1], 6), "f": sig(frac[-1], 4), "side": label})
    return pts


def _dashes(labels: dict) -> alt.Scale:
    """Before dashed, after solid."""
    return alt.Scale(domain=[labels["before"], labels["after"]], range=[[5, 3], [1, 0]])


def _side_colour(labels: dict) -> alt.Color:
    return alt.Color("side:N", scale=alt.Scale(domain=[labels["before"], labels["after"]], range=[BEFORE_COLOUR, AFTER_COLOUR]),
                     legend=alt.Legend(title=None, orient="top-left"))


def ratio_overlay(d: dict, labels: dict) -> dict:
    edges, c = d["edges"], d["symlog_constant"]
    lo, hi = edges[0], edges[-1]
    b2, b5 = d["bands"]["2x"], d["bands"]["5x"]
    x_scale, x_axis = ch.ratio_axis(lo, hi, c, d["bands"])
    bands = alt.Chart(alt.Data(values=[{"a": b5[0], "b": b5[1], "o": 0.06}, {"a": b2[0], "b": b2[1], "o": 0.08}])).mark_rect(
        color=ch.ORANGE).encode(x=alt.X("a:Q", scale=x_scale, axis=x_axis), x2="b:Q", opacity=alt.Opacity("o:Q", legend=None, scale=None))
    floor = ch.density_floor(d["before"]["density"] + d["after"]["density"])
    sides = {labels[k]: [max(v, floor) for v in d[k]["density"]] for k in ("before", "after")}  # empty bins sit on the floor
    lines = alt.Chart(alt.Data(values=_steps(edges, sides))).mark_line(interpolate="step-after", strokeWidth=1.8).encode(
        x="x:Q", y=alt.Y("f:Q", title="share of tokens per unit of log r (log scale)",
                         scale=alt.Scale(type="log", domainMin=floor), axis=alt.Axis(format="~g")),
        color=_side_colour(labels), strokeDash=alt.StrokeDash("side:N", legend=None,
                                                              scale=_dashes(labels)),
        tooltip=[alt.Tooltip("side:N"), alt.Tooltip("x:Q", title="log r from", format=".3g"),
                 alt.Tooltip("f:Q", title="share per unit log r", format=".3g")])
    one = alt.Chart(alt.Data(values=[{"x": 0}])).mark_rule(strokeWidth=1).encode(x="x:Q", color=alt.value("#111"))
    return ch.finish(ch.sized(alt.layer(bands, lines, one)))


def abs_dp_overlay(d: dict, labels: dict) -> dict:
    e = d["edges"]
    pts = _steps(e, {labels["before"]: d["before"]["fraction"], labels["after"]: d["after"]["fraction"]})
    chart = alt.Chart(alt.Data(values=pts)).mark_line(interpolate="step-after", strokeWidth=1.8).encode(
        x=alt.X("x:Q", scale=alt.Scale(type="log", domain=[e[0], e[-1]], nice=False),
                axis=alt.Axis(format="~e", title="|Δp| = |p_train − p_rollout| (log scale)", grid=False, tickCount=9)),
        y=alt.Y("f:Q", title="share of tokens", axis=alt.Axis(format="%")), color=_side_colour(labels),
        strokeDash=alt.StrokeDash("side:N", legend=None, scale=_dashes(labels)),
        tooltip=[alt.Tooltip("side:N"), alt.Tooltip("x:Q", title="|Δp| from", format=".2e"),
                 alt.Tooltip("f:Q", title="share", format=".2%")])
    return ch.finish(ch.sized(chart))


def seq_scatter(points: dict, labels: dict) -> dict | None:
    pts = [{"s": s, "b": sig(b), "a": sig(a)} for s, b, a in zip(points["sequence"], points["before"], points["after"])
           if b and a and b > 0 and a > 0]
    if not pts:
        return None
    lo = sig(min(min(p["b"], p["a"]) for p in pts) / 1.25)
    hi = sig(max(max(p["b"], p["a"]) for p in pts) * 1.25)
    scale = alt.Scale(type="log", domain=[lo, hi], nice=False)
    axis = alt.Axis(format="~g", labelOverlap="greedy", tickCount=5, titleLimit=280)  # a decade can hold 9 ticks: keep few
    dots = alt.Chart(alt.Data(values=pts)).mark_circle(size=18, opacity=0.65, color=ch.BLUE).encode(
        x=alt.X("b:Q", scale=scale, axis=axis, title=f"mean |δ| per sequence, {labels['before']} (nats)"),
        y=alt.Y("a:Q", scale=scale, axis=axis, title=f"{labels['after']} (nats)"),
        tooltip=[alt.Tooltip("s:Q", title="row"), alt.Tooltip("b:Q", title=labels["before"], format=".3g"),
                 alt.Tooltip("a:Q", title=labels["after"], format=".3g")])
    line = alt.Chart(alt.Data(values=[{"x": lo, "y": lo}, {"x": hi, "y": hi}])).mark_line(
        color=ch.RED, strokeDash=[4, 3], strokeWidth=1).encode(x="x:Q", y="y:Q")
    return ch.finish(ch.sized(alt.layer(dots, line), 300))


def compare_charts(cmp: dict) -> list[dict]:
    labels, dist = cmp["labels"], cmp["distributions"]
    out = [{"id": "ratio", "title": "Importance ratio r per token, both batches on the same bins",
            "caption": f"Share of each batch's tokens per unit of log r, on a log scale ({labels['before']} dashed grey, "
                       f"{labels['after']} solid blue). Better: the peak narrows around r = 1 (black); the shading marks "
                       "verl's 2x and 5x bands.",
            "spec": ratio_overlay(dist["ratio"], labels)}]
    if dist.get("abs_dp"):
        out.append({"id": "abs_dp", "title": "Probability difference |Δp| per token",
                    "caption": "Better: the line moves left (smaller differences). Tokens with |Δp| = 0 are not drawn (log axis).",
                    "spec": abs_dp_overlay(dist["abs_dp"], labels)})
    pt = cmp.get("per_token") or {}
    if pt.get("available"):
        spec = seq_scatter(pt["sequences"]["points"], labels)
        if spec:
            out.append({"id": "seqs", "title": "Mean |δ| per sequence, before vs after",
                        "caption": "One dot per sequence over the same tokens. Dots below the dashed y = x line got better, "
                                   "above it worse.",
                        "spec": spec})
    return out


# ---- pages --------------------------------------------------------------------------------------

def compare_context(cmp: dict, timestamp: str | None = None, assets: str | None = None) -> dict:
    charts = compare_charts(cmp)
    pt = cmp.get("per_token") or {}
    per_token = None
    if pt.get("available"):
        per_token = {**pt, "improved": token_rows(pt["most_improved"]), "worsened": token_rows(pt["most_worsened"]),
                     "seq_improved": seq_rows(pt["sequences"]["most_improved"]),
                     "seq_worsened": seq_rows(pt["sequences"]["most_worsened"]),
                     "change_mean": signed("abs_delta", pt["abs_delta_change_mean"]),
                     "change_se": fmt(pt.get("abs_delta_change_se"), 2),
                     "change_median": signed("abs_delta", pt["abs_delta_change_median"])}
    return {"c": cmp, "labels": cmp["labels"], "runs": cmp["runs"], "rows": metric_rows(cmp, HTML_MARK), "tally": cmp["tally"],
            "per_token": per_token, "per_token_reason": None if pt.get("available") else pt.get("reason"),
            **page_context(charts, timestamp, assets), "mark": HTML_MARK}


def render_compare_html(cmp: dict, timestamp: str | None = None, assets: str | None = None) -> str:
    """The comparison's page, of two batches or of two arms (`kind == "arms"`)."""
    if cmp.get("kind") == "arms":
        return _arms_page(cmp, timestamp, assets)
    return environment().get_template("compare.html").render(**compare_context(cmp, timestamp, assets))


def _arms_page(cmp: dict, timestamp: str | None = None, assets: str | None = None) -> str:
    """The arms page; `assets` as html.render_run's (None: self-contained)."""
    return environment().get_template("arms.html").render(c=cmp, labels=cmp["labels"], tally=cmp["tally"],
                                                          rows=arm_rows(cmp, ARM_HTML_MARK), level=round(ARM_LEVEL * 100),
                                                          **page_context([], timestamp, assets))

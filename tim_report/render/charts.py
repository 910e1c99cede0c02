"""Vega-Lite chart specs from the Report's pre-binned data. Reshaping and rounding only: no statistics here.

The run page's charts and the index's trend panels are written as dicts; compare's charts go through Altair.

Each chart is a dict {id, title, caption, spec}; `spec` is a Vega-Lite dict embedded with `|tojson`.
Floats are rounded to a few significant digits so pages stay small and files stay byte-stable.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..catalogue.numbers import fixed, fmt, plain, sig
from ..config import (
    TREND_POINTS_MAX,
    VERL_PROBS_DIFF_NORMAL,
    VERL_PROBS_DIFF_PROBLEM,
    DiagnosisThresholds,
)

if TYPE_CHECKING:  # Altair is imported where it is used (compare): a build needs none of it
    import altair as alt

HEIGHT = 220
ORANGE = "#e08a00"
RED = "#d62728"
BLUE = "#3b6ea5"


def finish(chart: alt.TopLevelMixin, **datasets: list) -> dict:
    """The Vega-Lite dict. Not validated here (a second per page at 16M tokens, most of it walking the data):
    tests/test_html.py validates every chart against the schema instead.

    `datasets` are the chart's bulky data, which its layers name (`alt.Data(name=...)`): they go straight into
    the spec's top-level `datasets`, where Vega-Lite finds them by name, instead of through Altair, which
    validates, hashes and deep-copies every value (most of a page's rendering time)."""
    from altair.utils.schemapi import debug_mode  # imported by name: a Ray worker once lacked alt.utils.schemapi

    with debug_mode(False):  # no validation at instantiation either, for the same reason
        spec = chart.to_dict(validate=False)
    spec.pop("$schema", None)  # never fetched, but keep every URL out of the page
    if datasets:
        spec["datasets"] = {**spec.get("datasets", {}), **datasets}
    return spec


def sized(chart, height: int = HEIGHT):
    """The chart fills its container's width (pages work from 420 px phones to wide screens)."""
    return chart.properties(width="container", height=height)


# ---- ratio histogram on a symlog axis of log r -------------------------------------------------

def ratio_ticks(lo: float, hi: float, c: float, bands: dict) -> list[float]:
    """Tick positions (in log r) that read well as r on a symlog axis: 1, the band edges, 1 ± 10^-k, big ratios."""
    cands = [0.0] + [v for pair in bands.values() for v in pair]
    for k in range(1, 7):
        cands += [math.log1p(10.0 ** -k), math.log1p(-(10.0 ** -k))]
    for big in (20.0, 100.0, 1e3, 1e4, 1e6, 1e8):
        cands += [math.log(big), -math.log(big)]

    def u(v: float) -> float:
        return math.copysign(math.log1p(abs(v) / c), v)

    span = u(hi) - u(lo)
    keep: list[float] = []
    for v in cands:  # in priority order
        if lo <= v <= hi and all(abs(u(v) - u(k)) > span / 14 for k in keep):
            keep.append(v)
    return sorted(keep)


# r as a reader writes it: 0.999, 1.001, 1.01, 2, 0.2, 1e+3 (plain decimals near 1, never "1+1e-2")
RATIO_LABEL = "format(exp(datum.value), abs(datum.value) < 0.05 ? '.7~g' : '.3~g')"


def ratio_axis_spec(lo: float, hi: float, c: float, bands: dict) -> tuple[dict, dict]:
    """The symlog x-axis of log r shared by the run page and the comparison, labelled in r: (scale, axis)."""
    ticks = [v for v in (sig(t, 6) for t in ratio_ticks(lo, hi, c, bands)) if v is not None]
    return ({"type": "symlog", "constant": c, "domain": [lo, hi], "nice": False},
            {"values": ticks, "labelExpr": RATIO_LABEL, "title": "r = p_train / p_rollout (stretched near 1: symlog of log r)",
             "labelOverlap": True, "grid": False})


def ratio_axis(lo: float, hi: float, c: float, bands: dict) -> tuple[alt.Scale, alt.Axis]:
    import altair as alt

    scale, axis = ratio_axis_spec(lo, hi, c, bands)
    return alt.Scale(**scale), alt.Axis(**axis)


def density_floor(values: list[float]) -> float:
    """Where log-scale bars start: a third of the smallest non-zero density, so the thinnest bar shows."""
    nonzero = [v for v in values if v and v > 0]
    return sig(min(nonzero) / 3, 3) or 1e-9 if nonzero else 1e-9


# ---- the run page's charts (and the index's trend panels below), as Vega-Lite dicts --------------------
# Written as the dicts Altair produced (tests/test_html.py validates them against the schema; the gold files hold
# Altair's): a page's six charts cost 60% of its rendering through Altair, which validates, hashes and deep-copies
# its schema objects at every step; a dict costs nothing (docs/performance.md).

def q(field: str, **kw: Any) -> dict:
    return {"field": field, "type": "quantitative", **kw}


def page_spec(spec: dict, height: int = HEIGHT, **datasets: list) -> dict:
    """A top-level chart that fills its container's width, with its bulky data in `datasets` (see `finish`)."""
    out = {"config": {"view": {"continuousHeight": 300, "continuousWidth": 300}}, **spec, "height": height,
           "width": "container"}
    if datasets:
        out["datasets"] = datasets
    return out


def ratio_chart(ratio: dict) -> dict:
    edges, density, counts, c = ratio["edges"], ratio["density"], ratio["counts"], ratio["symlog_constant"]
    lo, hi = edges[0], edges[-1]
    floor = density_floor(density)
    bars = [{"a": sig(edges[i], 6), "b": sig(edges[i + 1], 6), "d": sig(density[i], 4), "n": counts[i], "f": floor}
            for i in range(len(counts)) if counts[i]]
    b2, b5 = ratio["bands"]["2x"], ratio["bands"]["5x"]
    x_scale, x_axis = ratio_axis_spec(lo, hi, c, ratio["bands"])
    band = {"data": {"values": [{"a": b5[0], "b": b5[1], "band": "5x"}, {"a": b2[0], "b": b2[1], "band": "2x"}]},
            "mark": {"type": "rect", "opacity": 0.1},
            "encoding": {"x": q("a", scale=x_scale, axis=x_axis), "x2": {"field": "b"},
                         "color": {"field": "band", "type": "nominal", "scale": {"domain": ["2x", "5x"], "range": [ORANGE, RED]},
                                   "legend": {"title": "verl band", "orient": "top-right"}}}}
    edges_ = {"values": [{"x": v, "band": "2x"} for v in b2] + [{"x": v, "band": "5x"} for v in b5]}
    rules = [{"data": edges_, "mark": {"type": "rule", "color": colour, "strokeDash": dash, "strokeWidth": 1.5},
              "encoding": {"x": q("x")}, "transform": [{"filter": f"datum.band == '{name}'"}]}
             for name, colour, dash in (("2x", ORANGE, [2, 2]), ("5x", RED, [6, 3]))]
    hist = {"data": {"name": "bars"}, "mark": {"type": "rect", "color": BLUE},
            "encoding": {"x": q("a"), "x2": {"field": "b"},
                         "y": q("d", title="share of tokens per unit of log r (log scale)",
                                scale={"type": "log", "domainMin": floor}, axis={"format": "~g"}),
                         "y2": {"field": "f"},
                         "tooltip": [q("a", title="log r from", format=".3g"), q("b", title="log r to", format=".3g"),
                                     q("n", title="tokens"), q("d", title="share per unit log r", format=".3g")]}}
    one = {"data": {"values": [{"x": 0}]}, "mark": {"type": "rule", "color": "currentColor", "strokeWidth": 1.5},
           "encoding": {"x": q("x"), "color": {"value": "#111"}}}
    return page_spec({"layer": [band, hist, *rules, one]}, bars=bars)


# ---- |Δp| histogram ------------------------------------------------------------------------------

def abs_dp_chart(d: dict) -> dict:
    e, counts = d["edges"], d["counts"]
    bars = [{"a": sig(e[i], 4), "b": sig(e[i + 1], 4), "n": counts[i]} for i in range(len(counts)) if counts[i]]
    return page_spec({"data": {"name": "bars"}, "mark": {"type": "rect", "color": BLUE}, "encoding": {
        "x": q("a", scale={"type": "log", "domain": [e[0], e[-1]], "nice": False},
               axis={"format": "~e", "title": "|Δp| = |p_train − p_rollout| (log scale)", "grid": False, "tickCount": 9}),
        "x2": {"field": "b"}, "y": q("n", title="tokens"),
        "tooltip": [q("a", title="|Δp| from", format=".2e"), q("b", title="to", format=".2e"), q("n", title="tokens")]}},
        bars=bars)


# ---- rollout vs trainer log-prob density --------------------------------------------------------

def density_chart(d: dict, corr: float | None) -> dict:
    e = d["edges"]
    lo, hi = e[0], e[-1]
    w = (hi - lo) / (len(e) - 1)
    cells = [{"i": i, "j": j, "n": n} for i, j, n in d["cells"]]
    xs = {"domain": [lo, hi], "nice": False, "zero": False}
    rects = {"data": {"name": "cells"}, "mark": {"type": "rect"},
             "transform": [{"calculate": f"{lo!r} + datum.i * {w!r}", "as": "x0"},
                           {"calculate": f"{lo!r} + (datum.i + 1) * {w!r}", "as": "x1"},
                           {"calculate": f"{lo!r} + datum.j * {w!r}", "as": "y0"},
                           {"calculate": f"{lo!r} + (datum.j + 1) * {w!r}", "as": "y1"}],
             "encoding": {"x": q("x0", scale=xs, title="rollout log-prob"), "x2": {"field": "x1"},
                          "y": q("y0", scale=dict(xs), title="trainer log-prob"), "y2": {"field": "y1"},
                          "color": q("n", scale={"type": "log", "scheme": "blues"}, title="tokens"),
                          "tooltip": [q("x0", title="rollout logp from", format=".2f"),
                                      q("y0", title="trainer logp from", format=".2f"), q("n", title="tokens")]}}
    line = {"data": {"values": [{"x": lo, "y": lo}, {"x": hi, "y": hi}]},
            "mark": {"type": "line", "color": RED, "strokeDash": [4, 3], "strokeWidth": 1},
            "encoding": {"x": q("x"), "y": q("y")}}
    title = f"Pearson r = {fixed(corr, 6)}" if corr is not None else ""
    return page_spec({"layer": [rects, line],
                      "title": {"text": title, "fontSize": 12, "fontWeight": "normal", "anchor": "start"}}, 300, cells=cells)


# ---- |δ| by bucket -------------------------------------------------------------------------------

def bucket_chart(rows: list[dict], x_title: str, mark: str = "bar") -> dict:
    data = [{"bucket": r["bucket"], "k": k, "m": sig(r["abs_delta_mean"]), "se": sig(r.get("abs_delta_se") or 0.0),
             "lo": sig(r["abs_delta_mean"] - (r.get("abs_delta_se") or 0.0)),
             "hi": sig(r["abs_delta_mean"] + (r.get("abs_delta_se") or 0.0)),
             "tokens": r["tokens"], "share": sig(r["token_share"], 3), "dshare": sig(r["abs_delta_share"], 3)}
            for k, r in enumerate(rows)]
    order = [r["bucket"] for r in rows]

    def x() -> dict:
        return {"field": "bucket", "type": "nominal", "sort": list(order), "title": x_title, "axis": {"labelAngle": -30}}

    tooltip = [{"field": "bucket", "type": "nominal"}, q("m", title="mean |δ|", format=".3g"),
               q("se", title="± s.e.", format=".2g"), q("tokens"), q("share", title="share of tokens", format=".1%"),
               q("dshare", title="share of Σ|δ|", format=".1%")]
    main = {"mark": {"type": "bar", "color": BLUE} if mark == "bar" else {"type": "line", "point": True, "color": BLUE},
            "encoding": {"x": x(), "y": q("m", title="mean |δ| (nats)"), "tooltip": tooltip}}
    err = {"mark": {"type": "rule", "color": "#555"}, "encoding": {"x": x(), "y": q("lo"), "y2": {"field": "hi"}}}
    return page_spec({"data": {"name": "buckets"}, "layer": [main, err]}, buckets=data)


# ---- sequence log-ratio vs length -----------------------------------------------------------------

def seq_chart(d: dict) -> dict:
    pts = [{"L": L, "s": sig(s), "i": i} for L, s, i in zip(d["length"], d["seq_log_ratio"], d["sequence"]) if s is not None]
    points = {"data": {"name": "sequences"}, "mark": {"type": "circle", "size": 14, "opacity": 0.6, "color": BLUE},
              "encoding": {"x": q("L", title="response length (tokens)"), "y": q("s", title="Σδ (nats)"),
                           "tooltip": [q("i", title="row"), q("L", title="tokens"), q("s", title="Σδ", format=".3g")]}}
    zero = {"data": {"values": [{"y": 0}]}, "mark": {"type": "rule", "color": "#888"}, "encoding": {"y": q("y")}}
    return page_spec({"layer": [points, zero]}, sequences=pts)


# ---- index: trend over steps ---------------------------------------------------------------------

def trend_charts(trend: dict) -> list[dict]:
    """One panel per headline metric over steps (each its own y-axis, log where it spans decades), each point a
    link to its step's page, a dashed red rule at each change point. Above TREND_POINTS_MAX steps the points
    fade so a 1,000-step run still reads as a line."""
    dense = trend["steps"] > TREND_POINTS_MAX
    out = []
    for m in trend["metrics"]:
        if m.get("constant") is not None:  # said in a sentence instead (templates/index.html)
            continue
        pts = [{"step": r["step"], "run": r["run"], "v": sig(r[m["key"]], 4)} for r in trend["rows"] if r[m["key"]] is not None]
        if not pts:
            continue
        line = {**_steps(), "mark": {"type": "line", "color": BLUE, "strokeWidth": 1 if dense else 1.5}, "encoding": _xy(m)}
        dots = {**_steps(), "mark": {"type": "circle", "color": BLUE, "size": 10 if dense else 28,
                                     "opacity": 0.35 if dense else 0.9, "cursor": "pointer"},
                "encoding": {**_xy(m), "href": {"field": "href", "type": "nominal"},
                             "tooltip": [{"field": "run", "type": "nominal"}, q("step"), q("v", title=m["name"], format=".4g")]}}
        layers = [line, dots]
        spec: dict = {"layer": layers}
        cps = [{"step": c["step"]} for c in trend.get("change_points") or [] if c["metric"] == m["key"]]
        if cps:
            layers.append({"data": {"values": cps}, "mark": {"type": "rule", "color": RED, "strokeDash": [4, 3]},
                           "encoding": {"x": q("step")}})
        else:  # the two layers share their data: said once, at the top (as Altair writes it)
            for layer in layers:
                del layer["data"]
            spec = {"data": {"name": "steps"}, "layer": layers}
        out.append({"id": f"trend-{m['key']}", "title": m["name"], "log_axis": m["log_axis"],
                    "spec": page_spec(spec, 120, steps=pts)})
    return out


def _xy(m: dict) -> dict:
    return {"x": q("step", title="training step", axis={"format": "d", "tickMinStep": 1}),
            "y": q("v", title=m["name"], scale={"type": "log"} if m["log_axis"] else {"zero": False})}


def _steps() -> dict:
    """A trend layer's data; run ids are safe path segments (build.safe_run_id): the link is computed in the page."""
    return {"data": {"name": "steps"}, "transform": [{"calculate": "datum.run + '/index.html'", "as": "href"}]}


def run_charts(report) -> list[dict[str, Any]]:
    """The run page's charts, each with the one sentence that says what good looks like."""
    dist, bd, m = report.distributions, report.breakdowns, report.metrics
    out = []
    ratio = dist.get("ratio")
    if ratio and ratio.get("counts"):
        cap = ("Numerical noise is one peak centred on r = 1 (black line), well inside verl's 2x band (dotted orange) and 5x band "
               "(dashed red). The height is the share of tokens per unit of log r on a log scale, so a single token far out still "
               "shows; the axis is stretched near 1 so bf16-sized noise is visible.")
        if ratio.get("exact_one"):
            cap += f" {fmt(ratio['exact_one'])} tokens have r exactly 1."
        out.append({"id": "ratio", "title": "Importance ratio r per token", "caption": cap, "spec": ratio_chart(ratio)})
    if dist.get("abs_dp") and dist["abs_dp"].get("counts"):
        cap = (f"Mean |Δp| is {fmt(m.get('abs_dp_mean'))}; verl's FAQ calls a mean below {plain(VERL_PROBS_DIFF_NORMAL)} normal and "
               f"above {plain(VERL_PROBS_DIFF_PROBLEM)} a precision problem. A bump near 1 means tokens one side finds likely and the "
               "other does not.")
        if dist["abs_dp"].get("zero"):
            cap += f" {fmt(dist['abs_dp']['zero'])} tokens with |Δp| = 0 are not shown (log axis)."
        out.append({"id": "abs_dp", "title": "Probability difference |Δp| per token", "caption": cap, "spec": abs_dp_chart(dist["abs_dp"])})
    if dist.get("logp_density") and dist["logp_density"].get("cells"):
        d = dist["logp_density"]
        dt = DiagnosisThresholds()
        cap = (f"On numerical noise every cell sits on the dashed y = x line and the correlation stays above {plain(dt.noise_corr_min)} "
               f"(the diagnosis's noise limit); below {plain(dt.systematic_corr_max)}, or a cloud off the line, the two sides score "
               "different things.")
        if d.get("clipped_below"):
            cap += f" {fmt(d['clipped_below'])} tokens below {plain(d['edges'][0])} are drawn at the edge."
        out.append({"id": "density", "title": "Rollout vs trainer log-prob", "caption": cap, "spec": density_chart(d, m.get("corr_logp"))})
    if bd.get("by_probability"):
        out.append({"id": "by_probability", "title": "|δ| by rollout probability",
                    "caption": "Good: low bars everywhere. Unlikely tokens (left) normally carry more mismatch; a tall bar on "
                               "likely tokens (right) is a warning sign.",
                    "spec": bucket_chart(bd["by_probability"], "rollout probability p_rollout")})
    if bd.get("by_position"):
        out.append({"id": "by_position", "title": "|δ| by position in the response",
                    "caption": "Good: a flat line. A rise along the response means the two sides drift apart as the context "
                               "grows (KV cache, positions, long-context kernels).",
                    "spec": bucket_chart(bd["by_position"], "token position in the response", mark="line")})
    sl = dist.get("seq_log_ratio")
    if sl and sl.get("length"):
        out.append({"id": "seq", "title": "Sequence log-ratio Σδ vs length", "caption": _seq_caption(sl, bd.get("length_growth") or {}),
                    "spec": seq_chart(sl)})
    return out


def _seq_caption(sl: dict, g: dict) -> str:
    """The Σδ-vs-length chart's sentence, with the fitted growth (or why there is none) and how many sequences it shows."""
    cap = ("Noise is a random walk: points spread evenly around 0 and widen slowly with length; a fan that leans one way "
           "is systematic drift.")
    if g.get("exponent") is not None:
        cap += (f" Fitted |Σδ| ∝ length^b: b = {fixed(g['exponent'], 2)} ± {fixed(g['exponent_se'], 2)} (0.5 for a random walk); the "
                f"diagnosis calls it drift at b ≥ {plain(DiagnosisThresholds().drift_exponent_min)} when b is also clearly above 0.5.")
    elif g.get("reason"):
        cap += f" Growth with length is not fitted: {g['reason']}."
    if sl.get("shown", 0) < sl.get("total", 0):
        cap += f" Showing {fmt(sl['shown'])} of {fmt(sl['total'])} sequences."
    return cap

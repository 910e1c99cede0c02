"""What bisect's page and report.md show, from summary.json's dict: rows of the site table and the chart's spec.
Display only: rounding, labels and layout; every number comes from the analysis."""

from __future__ import annotations

import math

from ..catalogue.bisect import KINDS
from ..catalogue.numbers import fmt, pct, sig
from .charts import BLUE, ORANGE, RED, page_spec, q

DISPLAY_MIN = 0.01  # multiples below this are drawn at it (a log axis has no zero)


def times(x) -> str:
    return "—" if x is None else f"{fmt(x, 3)}×"


def flips_text(site: dict) -> str:
    f = site.get("flips")
    if not f:
        return ""
    loc, flo = f.get("local") or {}, f.get("floor") or {}
    return (f"{fmt(loc.get('tokens'))} of {fmt(loc.get('of'))} tokens ({pct(loc.get('rate'))}) route to another expert "
            f"set; floor {fmt(flo.get('tokens'))} ({pct(flo.get('rate'))})")


def site_rows(summary: dict) -> list[dict]:
    first = summary.get("first_site")
    rows = []
    for i, s in enumerate(summary["sites"]):
        m, p = s["multiple"], s["prompts"]
        rows.append({"i": i, "name": s["name"], "kind": s["kind"], "what": KINDS[s["kind"]][0],
                     "median": times(m["median"]), "p99": times(m["p99"]),
                     "spread": f"{times(p['min'])} – {times(p['max'])}" if p["n"] > 1 else times(p["min"]),
                     "local": fmt(s["local"]["median"]), "floor": fmt(s["floor_used"]["median"]), "segments": segments(s["name"]),
                     "plain": times(s["plain_multiple"]["median"]), "flips": flips_text(s),
                     "beyond": s["beyond"], "first": s["name"] == first,
                     "cls": "worse" if s["name"] == first else ("warn" if s["beyond"] else "")})
    return rows


def label(name: str) -> str:
    """A site's name on the chart's axis: without the `model.` every site shares."""
    return name.removeprefix("model.")


def segments(name: str) -> list[str]:
    """A site's name cut after each dot: the page breaks a long name only there, never inside a word."""
    parts = name.split(".")
    return [p + "." for p in parts[:-1]] + parts[-1:]


ROW_PX = 15  # the chart's height per site: one readable label each, in forward order from the top


def chart(summary: dict) -> dict:
    """Local error / floor by site (log axis), one row per site named on the axis: the median as a dot, p99 as a tick,
    the plain forward's as a faint line, the band within the floor shaded, the first site beyond it marked."""
    th = summary["thresholds"]
    data = []
    for i, s in enumerate(summary["sites"]):
        m = s["multiple"]
        data.append({"i": i, "site": s["name"], "label": label(s["name"]), "median": sig(max(m["median"] or 0.0, DISPLAY_MIN), 4),
                     "p99": sig(max(m["p99"] or 0.0, DISPLAY_MIN), 4),
                     "plain": sig(max(s["plain_multiple"]["median"] or 0.0, DISPLAY_MIN), 4),
                     "state": "first beyond" if s["name"] == summary.get("first_site") else
                     ("beyond" if s["beyond"] else "within")})
    top = max([d["p99"] for d in data] + [th["p99"] * 2])
    y = {"field": "label", "type": "nominal", "sort": [d["label"] for d in data], "title": None,
         "axis": {"labelLimit": 260, "labelFontSize": 11, "ticks": False, "grid": True}}
    x_scale = {"type": "log", "domain": [DISPLAY_MIN, sig(top * 1.5, 3)]}
    decades = [10.0 ** k for k in range(round(math.log10(DISPLAY_MIN)), math.floor(math.log10(top * 1.5)) + 1)]
    tip = [{"field": "site", "type": "nominal"}, q("median", title="× floor (median)", format=".3g"),
           q("p99", title="× floor (p99)", format=".3g"), q("plain", title="plain forward × floor", format=".3g")]
    layers = [
        {"data": {"values": [{"lo": DISPLAY_MIN, "hi": th["median"]}]}, "mark": {"type": "rect", "color": "#2ca02c", "opacity": 0.12},
         "encoding": {"x": q("lo", scale=x_scale), "x2": {"field": "hi"}}},
        {"data": {"values": [{"v": th["median"]}]}, "mark": {"type": "rule", "color": ORANGE, "strokeDash": [4, 3]},
         "encoding": {"x": q("v")}},
        {"data": {"name": "sites"}, "mark": {"type": "line", "color": "#999999", "strokeWidth": 1, "opacity": 0.7},
         "encoding": {"y": y, "x": q("plain", title="local error ÷ floor (log)", scale=x_scale, axis={"orient": "top", "values": decades}),
                      "order": {"field": "i", "type": "quantitative"}}},
        {"data": {"name": "sites"},
         "mark": {"type": "tick", "orient": "vertical", "size": 10, "color": BLUE, "opacity": 0.7, "thickness": 2},
         "encoding": {"y": y, "x": q("p99"), "tooltip": tip}},
        {"data": {"name": "sites"}, "mark": {"type": "circle", "size": 40, "opacity": 0.9},
         "encoding": {"y": y, "x": q("median"), "tooltip": tip,
                      "color": {"field": "state", "type": "nominal", "title": None,
                                "scale": {"domain": ["within", "beyond", "first beyond"], "range": [BLUE, ORANGE, RED]},
                                "legend": {"orient": "bottom"}}}},
    ]
    first = [d for d in data if d["state"] == "first beyond"]
    if first:
        layers.append({"data": {"values": first}, "mark": {"type": "text", "align": "right", "dx": -8, "color": RED,
                                                           "fontWeight": "bold"},  # left of its dot: a phone's chart ends at p99
                       "encoding": {"y": y, "x": q("median"), "text": {"value": "first beyond"}}})
    return {"id": "bisect", "title": "Local error ÷ floor by site",
            "caption": (("Each dot is a site's local error (the candidate's module on the reference's input)" if summary.get("replay", True)
                         else "Each dot is a site's difference in the saved states (no replay)") + " at the median "
                        f"token, as a multiple of the same site's floor; the tick is its 99th percentile; the grey line the "
                        f"plain forward's difference (which carries every earlier error). Shaded: within the floor "
                        f"(below {fmt(th['median'])}× at the median, {fmt(th['p99'])}× at p99)."),
            "spec": page_spec({"layer": layers}, ROW_PX * len(data) + 10, sites=data)}

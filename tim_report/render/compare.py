"""Compare page (HTML) and compare.md from the dict `analyze.compare.compare_batches` returns.

Display only: formatting, symbols and Altair specs from the pre-binned data; no statistics here.

    render_compare_html(cmp, timestamp=None) -> str     DIR/index.html
    render_compare_md(cmp, html_url="index.html") -> str   DIR/compare.md (GitHub-flavoured, ≤ 60,000 chars)
"""

from __future__ import annotations

import altair as alt

from . import charts as ch
from .html import _vega, _version, environment, fixed, fmt, pct
from .tokens import visible

MD_LIMIT = 60_000
PERCENT_KEYS = {"outside_2x", "outside_5x", "phantom_clip", "veto_token_fraction", "veto_seq_fraction"}
NEAR_ONE_KEYS = {"ess", "ess_seq", "corr_logp", "spearman_logp", "corr_prob"}
DIRECTION_MARK = {"better": "🟢", "worse": "🔴", "same": "⚪", "changed": "•", "n/a": ""}  # markdown (GitHub has the emoji)
HTML_MARK = {"better": "✓", "worse": "✖", "same": "○", "changed": "•", "n/a": ""}  # page: text symbols every font has
BEFORE_COLOUR = "#8c8c8c"
AFTER_COLOUR = ch.BLUE


# ---- formatting ---------------------------------------------------------------------------------

def value(key: str, v) -> str:
    if key in PERCENT_KEYS:
        return pct(v)
    if key in NEAR_ONE_KEYS and isinstance(v, float):
        return fixed(v, 6) if key.startswith(("corr", "spearman")) else fixed(v, 4)
    return fmt(v)


def signed(key: str, x) -> str:
    if x is None:
        return "—"
    s = value(key, abs(x)) if key not in PERCENT_KEYS else fmt(100.0 * abs(x), 3) + " pp"
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
             "rollout": f"{fixed(t['rollout_before'])} → {fixed(t['rollout_after'])}" if t["rollout_before"] != t["rollout_after"] else fixed(t["rollout_after"]),
             "trainer": f"{fixed(t['trainer_before'])} → {fixed(t['trainer_after'])}" if t["trainer_before"] != t["trainer_after"] else fixed(t["trainer_after"])}
            for t in rows]


def seq_rows(rows: list[dict]) -> list[dict]:
    return [{"sequence": s["sequence"], "tokens": fmt(s["tokens"]), "before": fmt(s["abs_delta_mean_before"]),
             "after": fmt(s["abs_delta_mean_after"]), "change": signed("abs_delta", s["change"]), "arrow": arrow(s["change"]),
             "better": fmt(s["tokens_better"]), "worse": fmt(s["tokens_worse"])} for s in rows]


# ---- charts -------------------------------------------------------------------------------------

def _steps(edges: list[float], sides: dict[str, list[float]]) -> list[dict]:
    """Step-line points: each bin's left edge with its value, and the last edge closing the line."""
    pts = []
    for label, frac in sides.items():
        for i, f in enumerate(frac):
            pts.append({"x": ch.sig(edges[i], 6), "f": ch.sig(f, 4), "side": label})
        pts.append({"x": ch.sig(edges[-1], 6), "f": ch.sig(frac[-1], 4), "side": label})
    return pts


def _side_colour(labels: dict) -> alt.Color:
    return alt.Color("side:N", scale=alt.Scale(domain=[labels["before"], labels["after"]], range=[BEFORE_COLOUR, AFTER_COLOUR]),
                     legend=alt.Legend(title=None, orient="top-left"))


def ratio_overlay(d: dict, labels: dict) -> dict:
    edges, c = d["edges"], d["symlog_constant"]
    lo, hi = edges[0], edges[-1]
    b2, b5 = d["bands"]["2x"], d["bands"]["5x"]
    x_scale = alt.Scale(type="symlog", constant=c, domain=[lo, hi], nice=False)
    x_axis = alt.Axis(values=[ch.sig(v, 6) for v in ch._ratio_ticks(lo, hi, c, d["bands"])], labelExpr=ch.RATIO_LABEL,
                      title="r = p_train / p_rollout (symlog scale of log r)", labelOverlap=True, grid=False)
    bands = alt.Chart(alt.Data(values=[{"a": b5[0], "b": b5[1], "o": 0.06}, {"a": b2[0], "b": b2[1], "o": 0.08}])).mark_rect(
        color=ch.ORANGE).encode(x=alt.X("a:Q", scale=x_scale, axis=x_axis), x2="b:Q", opacity=alt.Opacity("o:Q", legend=None, scale=None))
    pts = _steps(edges, {labels["before"]: d["before"]["fraction"], labels["after"]: d["after"]["fraction"]})
    lines = alt.Chart(alt.Data(values=pts)).mark_line(interpolate="step-after", strokeWidth=1.8).encode(
        x="x:Q", y=alt.Y("f:Q", title="share of tokens", scale=alt.Scale(type="sqrt"), axis=alt.Axis(format="%")),
        color=_side_colour(labels), strokeDash=alt.StrokeDash("side:N", legend=None,
                                                              scale=alt.Scale(domain=[labels["before"], labels["after"]], range=[[5, 3], [1, 0]])),
        tooltip=[alt.Tooltip("side:N"), alt.Tooltip("x:Q", title="log r from", format=".3g"), alt.Tooltip("f:Q", title="share", format=".2%")])
    one = alt.Chart(alt.Data(values=[{"x": 0}])).mark_rule(strokeWidth=1).encode(x="x:Q", color=alt.value("#111"))
    return ch._finish(ch._base(alt.layer(bands, lines, one)))


def abs_dp_overlay(d: dict, labels: dict) -> dict:
    e = d["edges"]
    pts = _steps(e, {labels["before"]: d["before"]["fraction"], labels["after"]: d["after"]["fraction"]})
    chart = alt.Chart(alt.Data(values=pts)).mark_line(interpolate="step-after", strokeWidth=1.8).encode(
        x=alt.X("x:Q", scale=alt.Scale(type="log", domain=[e[0], e[-1]], nice=False),
                axis=alt.Axis(format="~e", title="|Δp| = |p_train − p_rollout| (log scale)", grid=False, tickCount=9)),
        y=alt.Y("f:Q", title="share of tokens", axis=alt.Axis(format="%")), color=_side_colour(labels),
        strokeDash=alt.StrokeDash("side:N", legend=None, scale=alt.Scale(domain=[labels["before"], labels["after"]], range=[[5, 3], [1, 0]])),
        tooltip=[alt.Tooltip("side:N"), alt.Tooltip("x:Q", title="|Δp| from", format=".2e"), alt.Tooltip("f:Q", title="share", format=".2%")])
    return ch._finish(ch._base(chart))


def seq_scatter(points: dict, labels: dict) -> dict | None:
    pts = [{"s": s, "b": ch.sig(b), "a": ch.sig(a)} for s, b, a in zip(points["sequence"], points["before"], points["after"])
           if b and a and b > 0 and a > 0]
    if not pts:
        return None
    lo = ch.sig(min(min(p["b"], p["a"]) for p in pts) / 1.25)
    hi = ch.sig(max(max(p["b"], p["a"]) for p in pts) * 1.25)
    scale = alt.Scale(type="log", domain=[lo, hi], nice=False)
    dots = alt.Chart(alt.Data(values=pts)).mark_circle(size=18, opacity=0.65, color=ch.BLUE).encode(
        x=alt.X("b:Q", scale=scale, title=f"mean |δ| per sequence, {labels['before']} (nats)"),
        y=alt.Y("a:Q", scale=scale, title=f"{labels['after']} (nats)"),
        tooltip=[alt.Tooltip("s:Q", title="row"), alt.Tooltip("b:Q", title=labels["before"], format=".3g"),
                 alt.Tooltip("a:Q", title=labels["after"], format=".3g")])
    line = alt.Chart(alt.Data(values=[{"x": lo, "y": lo}, {"x": hi, "y": hi}])).mark_line(
        color=ch.RED, strokeDash=[4, 3], strokeWidth=1).encode(x="x:Q", y="y:Q")
    return ch._finish(alt.layer(dots, line).properties(width=300, height=300))


def compare_charts(cmp: dict) -> list[dict]:
    labels, dist = cmp["labels"], cmp["distributions"]
    out = [{"id": "ratio", "title": "Importance ratio r per token, both batches on the same bins",
            "caption": f"Share of each batch's tokens per bin ({labels['before']} dashed grey, {labels['after']} solid blue). "
                       "Better: the line narrows around r = 1 (black); the shading marks the 2x and 5x bands.",
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
                        "caption": "One dot per sequence over the same tokens. Dots below the dashed y = x line got better, above it worse.",
                        "spec": spec})
    return out


# ---- pages --------------------------------------------------------------------------------------

def compare_context(cmp: dict, timestamp: str | None = None) -> dict:
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
            "charts": charts, "chart_specs": [{"id": c["id"], "spec": c["spec"]} for c in charts],
            "vega_js": _vega(charts), "timestamp": timestamp, "version": _version(), "mark": HTML_MARK}


def render_compare_html(cmp: dict, timestamp: str | None = None) -> str:
    return environment().get_template("compare.html").render(**compare_context(cmp, timestamp))


# ---- markdown -----------------------------------------------------------------------------------

_MD_ESCAPE = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "&#124;", "`": "&#96;", "\\": "&#92;", "*": "&#42;",
              "_": "&#95;", "[": "&#91;", "]": "&#93;", "~": "&#126;", "#": "&#35;", "!": "&#33;", "$": "&#36;"}


def md_text(s) -> str:
    """Untrusted text (labels, reasons) made inert inside a GitHub table cell: markup as entities, one line."""
    if s is None:
        return ""
    return "".join(_MD_ESCAPE.get(ch_, ch_) for ch_ in str(s).replace("\r", " ").replace("\n", " "))


def _md_token_table(rows: list[dict]) -> list[str]:
    out = ["| row | pos | token | diff before | diff after | Δ\\|δ\\| |", "|---:|---:|---|---:|---:|---:|"]
    for t in token_rows(rows):
        tok = md_text(t["token"]) if t["token"] else (f"[{t['token_id']}]" if t["token_id"] is not None else "")
        out.append(f"| {t['sequence']} | {t['position']} | {tok} | {t['diff_before']} | {t['diff_after']} | {t['arrow']} {t['abs_change']} |")
    return out


def _md(cmp: dict, html_url: str | None, top: int) -> str:
    lab = cmp["labels"]
    b, a = md_text(lab["before"]), md_text(lab["after"])
    runs, tally = cmp["runs"], cmp["tally"]
    lines = ["<!-- tim-report compare -->", f"## tim-report compare: {b} → {a}", ""]
    if html_url:
        lines += [f"[Full comparison with charts]({html_url})", ""]
    lines.append(f"**{tally['better']} metrics better 🟢 · {tally['worse']} worse 🔴 · {tally['same']} about the same ⚪** "
                 f"(▲ / ▼ is the sign of the change; 🟢 / 🔴 whether that is better or worse for the metric).")
    lines.append("")
    lines.append(f"- {b}: **{md_text((runs['before'].get('regime') or 'no diagnosis').replace('_', ' '))}**, "
                 f"{fmt(runs['before'].get('tokens'))} tokens, {fmt(runs['before'].get('sequences'))} sequences")
    lines.append(f"- {a}: **{md_text((runs['after'].get('regime') or 'no diagnosis').replace('_', ' '))}**, "
                 f"{fmt(runs['after'].get('tokens'))} tokens, {fmt(runs['after'].get('sequences'))} sequences")
    lines += ["", f"| metric | {b} | {a} | change | relative | |", "|---|---:|---:|---:|---:|---|"]
    for r in metric_rows(cmp):
        mark = f"{r['mark']} {r['direction']}" if r["direction"] in ("better", "worse", "same") else ""
        lines.append(f"| {md_text(r['name'])} | {r['before']} | {r['after']} | {r['arrow']} {r['change']} | {r['rel']} | {mark} |")
    lines += ["", f"_{md_text(cmp['rules']['same'])}_", ""]
    pt = cmp.get("per_token") or {}
    lines.append("### Per token")
    if not pt.get("available"):
        lines += ["", md_text(pt.get("reason", "Not compared.")), ""]
        return "\n".join(lines) + "\n"
    c, f = pt["counts"], pt["fractions"]
    s = pt["sequences"]["counts"]
    lines += ["", f"Over the same {fmt(pt['tokens_compared'])} tokens ({md_text(pt['how'])}): "
                  f"🟢 **{fmt(c['better'])}** ({pct(f['better'])}) got better, 🔴 **{fmt(c['worse'])}** ({pct(f['worse'])}) worse, "
                  f"⚪ {fmt(c['same'])} moved by at most {fmt(pt['tolerance'])} nats. "
                  f"Mean change of |δ|: {signed('abs_delta', pt['abs_delta_change_mean'])} nats. "
                  f"Sequences (mean |δ|): 🟢 {fmt(s['better'])} better, 🔴 {fmt(s['worse'])} worse, ⚪ {fmt(s['same'])} same.", ""]
    for note in pt.get("notes", []):
        lines += [f"> {md_text(note)}", ""]
    if top and pt["most_worsened"]:
        lines += [f"<details><summary>🔴 most worsened tokens ({min(top, len(pt['most_worsened']))})</summary>", ""]
        lines += _md_token_table(pt["most_worsened"][:top]) + ["", "</details>", ""]
    if top and pt["most_improved"]:
        lines += [f"<details><summary>🟢 most improved tokens ({min(top, len(pt['most_improved']))})</summary>", ""]
        lines += _md_token_table(pt["most_improved"][:top]) + ["", "</details>", ""]
    return "\n".join(lines) + "\n"


def render_compare_md(cmp: dict, html_url: str | None = "index.html") -> str:
    """GitHub-flavoured markdown; token lists shrink until the text fits in MD_LIMIT characters."""
    for top in (20, 10, 5, 0):
        text = _md(cmp, html_url, top)
        if len(text) <= MD_LIMIT:
            return text
    return text[: MD_LIMIT - 40] + "\n\n… (cut to fit 60,000 characters)\n"

"""compare.md: the before/after comparison as GitHub-flavoured markdown, for a PR comment.

Escaping and the size budget are the shared ones (`md.esc`, `md.assemble`): labels and tokens are
inert, and the text stays within MAX_CHARS UTF-16 units. Token lists shrink (20, 10, 5, none) before
anything else is cut.

    render_compare_md(cmp, html_url="index.html") -> str
"""

from __future__ import annotations

from ...catalogue.numbers import fmt, pct
from .. import md
from ..md import details, esc, table
from .views import ARM_MARK, DIRECTION_MARK, arm_rows, metric_rows, signed, token_rows

TOKEN_CHARS = 32


def _head(cmp: dict, html_url: str | None) -> list[str]:
    lab, runs, tally = cmp["labels"], cmp["runs"], cmp["tally"]
    b, a = esc(lab["before"]), esc(lab["after"])
    blocks = [f"<!-- tim-report compare -->\n## tim-report compare: {b} → {a}"]
    if html_url:
        blocks.append(f"[Full comparison with charts]({md.href(html_url, None)})")

    def side(label: str, r: dict) -> str:
        regime = (r.get("regime") or "no diagnosis").replace("_", " ")
        return f"- {label}: **{esc(regime)}**, {fmt(r.get('tokens'))} tokens, {fmt(r.get('sequences'))} sequences"

    if cmp.get("why"):  # what differs between the sides comes first: "systematic" with its reason
        blocks.append(f"**Why:** {esc(cmp['why']['sentence'], None, own=True)}")
    blocks.append(f"**{tally['better']} metrics better 🟢 · {tally['worse']} worse 🔴 · {tally['same']} about the same ⚪** "
                  "(▲ / ▼ is the sign of the change; 🟢 / 🔴 whether that is better or worse for the metric).\n\n"
                  + side(b, runs["before"]) + "\n" + side(a, runs["after"]))
    rows = [[esc(r["name"]), r["before"], r["after"], f"{r['arrow']} {r['change']}", r["rel"],
             f"{r['mark']} {r['direction']}" if r["direction"] in ("better", "worse", "same") else ""]
            for r in metric_rows(cmp, DIRECTION_MARK)]
    blocks.append(table(["metric", b, a, "change", "relative", ""], rows, numeric=range(1, 5)))
    blocks.append(f"_{esc(cmp['rules']['same'], None, own=True)}_")
    return blocks


def _per_token(pt: dict) -> str:
    if not pt.get("available"):
        return "### Per token\n\n" + esc(pt.get("reason", "Not compared."), None, own=True)
    c, f, s = pt["counts"], pt["fractions"], pt["sequences"]["counts"]
    lines = ["### Per token", "",
             f"Over the same {fmt(pt['tokens_compared'])} tokens ({esc(pt['how'], None, own=True)}): "
             f"🟢 **{fmt(c['better'])}** ({pct(f['better'])}) got better, 🔴 **{fmt(c['worse'])}** ({pct(f['worse'])}) worse, "
             f"⚪ {fmt(c['same'])} moved by at most {fmt(pt['tolerance'])} nats. "
             f"Mean change of \\|δ\\|: {signed('abs_delta', pt['abs_delta_change_mean'])} nats. "
             f"Sequences (mean \\|δ\\|): 🟢 {fmt(s['better'])} better, 🔴 {fmt(s['worse'])} worse, ⚪ {fmt(s['same'])} same."]
    lines += [f"\n> {esc(note, None, own=True)}" for note in pt.get("notes", [])]
    return "\n".join(lines)


def _token_table(rows: list[dict]) -> str:
    body = []
    for t in token_rows(rows):
        tok = esc(t["token"], TOKEN_CHARS) if t["token"] else (f"\\[{t['token_id']}\\]" if t["token_id"] is not None else "")
        body.append([str(t["sequence"]), str(t["position"]), tok, esc(t["diff_before"]), esc(t["diff_after"]),
                     f"{t['arrow']} {esc(t['abs_change'])}"])
    return table(["row", "pos", "token", "diff before", "diff after", "Δ\\|δ\\|"], body, numeric=[0, 1, 3, 4, 5])


def _token_lists(pt: dict, top: int) -> list[str]:
    if not pt.get("available") or not top:
        return []
    out = []
    for key, title in (("most_worsened", "🔴 most worsened tokens"), ("most_improved", "🟢 most improved tokens")):
        if pt[key]:
            rows = pt[key][:top]
            out.append(details(f"{title} ({len(rows)})", _token_table(rows)))
    return out


def _batches_md(cmp: dict, html_url: str | None = "index.html") -> str:
    """GitHub-flavoured markdown within md.MAX_CHARS: the token lists shrink first, then whole blocks go."""
    pt = cmp.get("per_token") or {}
    core = _head(cmp, html_url) + [_per_token(pt)]
    link = f"[HTML comparison]({md.href(html_url, None)})" if html_url else "HTML comparison"
    for top in (20, 10, 5):
        text = "\n\n".join(core + _token_lists(pt, top)) + "\n"
        if md.width(text) <= md.MAX_CHARS:
            return text
    return md.assemble(core, [], link)


def _arms_md(cmp: dict, html_url: str | None = "index.html") -> str:
    """compare.md for arms: why first, a verdict per metric, the table; short enough for any PR comment."""
    lab, arms, t = cmp["labels"], cmp["arms"], cmp["tally"]
    b, a = esc(lab["before"]), esc(lab["after"])
    head = [f"<!-- tim-report compare -->\n## tim-report A/B arms: {b} → {a}"]
    if html_url:
        head.append(f"[Full comparison]({md.href(html_url, None)})")
    head.append(f"**Why:** {esc(cmp['why']['sentence'], None, own=True)}")
    zero = f" · {t['zero']} at the ideal in both" if t["zero"] else ""
    head.append(f"**{t['lower']} lower 🟢 · {t['higher']} higher 🔴 · {t['unresolved']} not resolved ⚪{zero}** "
                f"({b}: {fmt(arms['before']['steps'])} steps, {a}: {fmt(arms['after']['steps'])} steps)")
    r = arm_rows(cmp, ARM_MARK)
    head.append("\n".join(f"- {x['mark']} {esc(x['sentence'], None, own=True)}" for x in r))
    head.append(table(["gap from the ideal", b, a, "after vs before", "verdict"],
                      [[esc(x["gap"]), *(esc(" ".join(x[c]).strip()) for c in ("before", "after", "effect")),
                        f"{x['mark']} {x['direction']}"]
                       for x in r], numeric=range(1, 4)))
    head.append(f"_{esc(cmp['method'], None, own=True)}_")
    return "\n\n".join(head) + "\n"


def render_compare_md(cmp: dict, html_url: str | None = "index.html") -> str:
    """compare.md, of two batches or of two arms (`kind == "arms"`)."""
    return _arms_md(cmp, html_url) if cmp.get("kind") == "arms" else _batches_md(cmp, html_url)

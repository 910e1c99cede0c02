"""bisect's report.md: the verdict, the first site and what it usually means, the table of sites. Display only."""

from __future__ import annotations

from .bisect_views import flips_text, site_rows
from .md import esc, table


def render_bisect_md(summary: dict) -> str:
    lab = summary.get("labels") or {}
    out = [f"<!-- tim-report bisect -->\n## tim-report bisect: {esc(lab.get('candidate'))} against "
           f"{esc(lab.get('reference'))} ({esc(lab.get('model'))})",
           f"**{esc(summary['verdict'], None, own=True)}**"]
    first = summary.get("first")
    if first:
        out.append(f"**What it usually means:** {esc(first['meaning'], None, own=True)}.")
    routers = [s for s in summary["sites"] if s.get("flips")]
    if routers:
        out.append("\n".join(f"- `{esc(s['name'])}`: {esc(flips_text(s), None, own=True)}" for s in routers))
    rows = site_rows(summary)
    out.append(table(["site", "× floor (median)", "× floor (p99)", "over prompts", "plain forward × floor", ""],
                     [[f"`{esc(r['name'])}`", r["median"], r["p99"], r["spread"], r["plain"],
                       "🔴 first" if r["first"] else ("beyond" if r["beyond"] else "")] for r in rows],
                     numeric=range(1, 5)))
    out.append(f"{summary['prompts']} prompts, {summary['tokens']:,} tokens. _{esc(summary['method'], None, own=True)}_")
    return "\n\n".join(out) + "\n"

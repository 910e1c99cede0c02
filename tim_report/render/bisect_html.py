"""bisect's page (index.html): the verdict, the chart of local error ÷ floor by site, the site table. Display only."""

from __future__ import annotations

from .bisect_views import chart, flips_text, site_rows, times
from .pages import environment, page_context


def render_bisect_html(summary: dict, timestamp: str | None = None, assets: str | None = None) -> str:
    """`assets`: the relative folder of the shared assets (pages.assets_href); None makes a self-contained page."""
    charts = [chart(summary)] if summary["sites"] else []
    return environment().get_template("bisect.html").render(
        s=summary, rows=site_rows(summary), first=summary.get("first"), times=times,
        routers=[r for r in summary["sites"] if r.get("flips")], flips_text=flips_text,
        **page_context(charts, timestamp, assets))

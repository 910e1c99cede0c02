"""HTML pages: one per run and the index. Jinja2 with autoescape; charts via Altair specs; no statistics here.

Entry points (`RENDERER`, the html format of `tim_report.render`):
    render_run(report, notes_md=None, timestamp=None) -> str      site/<run-id>/index.html
    render_index(index, timestamp=None) -> str                     site/index.html (index: analysis.runs.index_summary)
"""

from __future__ import annotations

from ..catalogue import metrics as catalogue
from ..config import HOT_DIFF, TREND_LOG_AXIS_SPAN, health
from . import charts as ch
from .pages import environment, page_context, render_notes
from .views import (
    TOKEN_ROWS_OPEN,
    env_view,
    flat_metrics,
    groups_view,
    headline,
    percentile_rows,
    samples_view,
    title_parts,
    topk_view,
)


def run_context(report, notes_md: str | None = None, timestamp: str | None = None) -> dict:
    charts = ch.run_charts(report)
    th = report.run.get("thresholds") or {}
    return {
        **page_context(charts, timestamp),
        "r": report, "t": title_parts(report), "m": report.metrics, "headline": headline(report),
        "health_colour": health(report.metrics.get("ess")),
        "groups": groups_view(report), "envs": env_view(report), "samples": samples_view(report), "metrics_table": flat_metrics(report),
        "percentiles": percentile_rows(report), "notes": render_notes(notes_md), "th": th,
        "hot_diff": HOT_DIFF, "token_rows_open": TOKEN_ROWS_OPEN, "diagnosis": report.diagnosis,
        "topk": topk_view(report),
    }


def render_run(report, notes_md: str | None = None, timestamp: str | None = None) -> str:
    return environment().get_template("run.html").render(**run_context(report, notes_md, timestamp))


def render_index(index: dict, timestamp: str | None = None, notes_md: str | None = None) -> str:
    """site/index.html from the index summary (analysis.runs.index_summary)."""
    charts = ch.trend_charts(index["trend"]) if index.get("trend") else []
    return environment().get_template("index.html").render(rows=index["runs"], ix=index, notes=render_notes(notes_md),
                                                           columns=[catalogue.metric(k) for k in catalogue.INDEX],
                                                           log_span=TREND_LOG_AXIS_SPAN,
                                                           **page_context(charts, timestamp))


class HtmlRenderer:
    def run(self, report, options) -> dict[str, str]:
        return {"index.html": render_run(report, notes_md=options.notes_md, timestamp=options.timestamp)}

    def index(self, index: dict, options) -> dict[str, str]:
        return {"index.html": render_index(index, timestamp=options.timestamp, notes_md=options.notes_md)}

    def compare(self, comparison: dict, options) -> dict[str, str]:
        if comparison.get("kind") == "arms":
            from .arms import render_arms_html

            return {"index.html": render_arms_html(comparison, options.timestamp)}
        from .compare_html import render_compare_html

        return {"index.html": render_compare_html(comparison, options.timestamp)}


RENDERER = HtmlRenderer()

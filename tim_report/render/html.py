"""HTML pages: one per run and the index. Jinja2 with autoescape; charts via Altair specs; no statistics here.

Entry points (`RENDERER`, the html format of `tim_report.render`):
    render_run(report, notes_md=None, timestamp=None, assets=None) -> str   site/<run-id>/index.html
    render_index(index, timestamp=None, assets=None) -> str                  site/index.html (analysis.run_index.index_summary)

`assets` is the relative folder of the site's shared assets (pages.assets_href); None makes a self-contained page.
The renderer writes the assets once, with the site's index (and with a comparison).
"""

from __future__ import annotations

from markupsafe import Markup

from ..catalogue import kept as kept_words
from ..catalogue import metrics as catalogue
from ..catalogue.rescore import table_intro as weights_intro
from ..catalogue.staleness import cache_intro, table_intro
from ..catalogue.sync import TABLE_INTRO as SYNC_INTRO
from ..config import HOT_DIFF, TREND_LOG_AXIS_SPAN, step_health
from . import charts as ch
from . import index_views, run_tables
from .chain_views import bitwise_identical, chain_view
from .pages import asset_files, assets_href, environment, page_context, render_notes
from .samples_js import NAME as SAMPLES_JS
from .samples_js import samples_js, samples_json
from .views import (
    SAMPLES_OPEN,
    TOP_TOKENS,
    banners,
    env_view,
    flat_metrics,
    groups_view,
    headline,
    percentile_rows,
    samples_view,
    title_parts,
    topk_view,
    written_by,
)


def run_context(report, notes_md: str | None = None, timestamp: str | None = None, assets: str | None = None) -> dict:
    bitwise = bitwise_identical(report)
    charts = [] if bitwise else ch.run_charts(report)  # a bitwise-identical batch says so instead of empty charts
    th = report.run.get("thresholds") or {}
    return {
        **page_context(charts, timestamp, assets),
        "r": report, "t": title_parts(report), "m": report.metrics, "headline": headline(report),
        "health_colour": step_health(report.metrics.get("ess"), (report.diagnosis or {}).get("regime"),
                                     bool((report.routing or {}).get("blocked_by_bug"))),
        "groups": groups_view(report), "envs": env_view(report), "samples": samples_view(report, 0), "metrics_table": flat_metrics(report),
        "percentiles": percentile_rows(report), "notes": render_notes(notes_md), "th": th,
        "hot_diff": HOT_DIFF, "samples_open": SAMPLES_OPEN, "top_tokens": TOP_TOKENS, "diagnosis": report.diagnosis,
        "topk": topk_view(report), "banners": banners(report), "chain": chain_view(report), "bitwise": bitwise,
        "tables": {"envs": run_tables.env_table(report), "what_if": run_tables.what_if_table(report),
                   "by_probability": run_tables.probability_table(report), "lags": run_tables.lag_table(report),
                   "weights": run_tables.weights_table(report),
                   "topk": run_tables.topk_tables(report), "cache": run_tables.cache_table(report),
                   "sync": run_tables.sync_table(report), "kept": run_tables.kept_table(report)},
        "sync_intro": SYNC_INTRO, "written_by": written_by(report),
        "kept_intro": kept_words.intro(report.diagnosis["kept_sets"]) if (report.diagnosis or {}).get("kept_sets") else None,
        "staleness_intro": table_intro(report.staleness) if report.staleness else None,
        "weights_intro": weights_intro(report.rescore) if report.rescore else None,
        "cache_intro": cache_intro(report.diagnosis["prefix_cache"]) if (report.diagnosis or {}).get("prefix_cache") else None,
        # the token tables' rows: samples.js beside the page, or inline in a self-contained one
        "samples_data": (Markup(samples_json(report)) if assets is None else True) if report.samples else None,
    }


def render_run(report, notes_md: str | None = None, timestamp: str | None = None, assets: str | None = None) -> str:
    return environment().get_template("run.html").render(**run_context(report, notes_md, timestamp, assets))


def render_index(index: dict, timestamp: str | None = None, notes_md: str | None = None, assets: str | None = None) -> str:
    """site/index.html from the index summary (analysis.run_index.index_summary)."""
    charts = ch.trend_charts(index["trend"]) if index.get("trend") else []
    return environment().get_template("index.html").render(rows=index["runs"], ix=index, notes=render_notes(notes_md),
                                                           columns=[catalogue.metric(k) for k in catalogue.INDEX],
                                                           log_span=TREND_LOG_AXIS_SPAN, runs=index_views.runs_table(index),
                                                           sections=index_views.sections(index),
                                                           **page_context(charts, timestamp, assets))


class HtmlRenderer:
    """A run page one folder below the site's root; the index and a comparison at their folder's root, with the assets."""

    def run(self, report, options) -> dict[str, str]:
        return {"index.html": render_run(report, notes_md=options.notes_md, timestamp=options.timestamp,
                                         assets=assets_href(options.self_contained, 1)),
                SAMPLES_JS: samples_js(report)}

    def index(self, index: dict, options) -> dict[str, str]:
        page = render_index(index, timestamp=options.timestamp, notes_md=options.notes_md,
                            assets=assets_href(options.self_contained, 0))
        return {"index.html": page, **({} if options.self_contained else asset_files())}

    def compare(self, comparison: dict, options) -> dict[str, str]:
        assets = assets_href(options.self_contained, 0)
        from .compare.html import render_compare_html

        page = render_compare_html(comparison, options.timestamp, assets)
        return {"index.html": page, **({} if options.self_contained else asset_files())}


RENDERER = HtmlRenderer()

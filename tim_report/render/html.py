"""HTML pages: one per run and the index. Jinja2 with autoescape; charts via Altair specs; no statistics here.

Entry points (called from `tim_report.build`):
    render_run(report, notes_md=None, timestamp=None) -> str      site/<run-id>/index.html
    render_index(index, timestamp=None) -> str                     site/index.html (index: analysis.runs.index_summary)
"""

from __future__ import annotations

import functools
from pathlib import Path

from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup, escape

from .. import glossary
from ..config import HEALTH, HOT_DIFF, TREND_LOG_AXIS_SPAN, health
from . import charts as ch
from .format import fixed, fmt, metric_value, pct, sig, visible
from .vega import javascript_bundle
from .views import (TOKEN_ROWS_OPEN, flat_metrics, groups_view, headline, kv_items, kv_tables, percentile_rows,
                    samples_view, title_parts, topk_view)


# The index table's numeric columns, explained on the index from the glossary (key, column heading).
INDEX_COLUMNS = (("abs_delta_median", "median |δ|"), ("kl_k3", "KL k3"), ("ess", "ESS"), ("outside_2x", "outside 2x"),
                 ("outside_5x", "outside 5x"), ("phantom_clip", "phantom clip"), ("veto_token_fraction", "veto"),
                 ("routing", "routing"))


def templates_dir() -> Path:
    """The page templates, inside the package (installed or a checkout alike)."""
    return Path(__file__).parent / "templates"


def code_spans(text: str | None) -> Markup:
    """Text tim-report wrote (verdicts, advice) with its `backtick spans` as <code>; everything else escaped."""
    if text is None:
        return Markup("")
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unbalanced backtick: show it as it is
        return escape(str(text))
    return Markup("").join(escape(p) if i % 2 == 0 else Markup("<code>%s</code>") % p for i, p in enumerate(parts))


def render_notes(notes_md: str | None) -> Markup | None:
    """The author's markdown narrative; raw HTML in it is escaped, unsafe link schemes are dropped, and images are
    not rendered (a page promises to load nothing from the network; the Content-Security-Policy enforces it too)."""
    if not notes_md:
        return None
    from markdown_it import MarkdownIt

    md = (MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
          .enable("table").enable("strikethrough").disable("image"))
    return Markup(md.render(notes_md))


# ---- environment and pages ------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def environment(path: str | None = None) -> Environment:
    env = Environment(loader=FileSystemLoader(path or str(templates_dir())), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False}
    env.filters.update(fmt=fmt, pct=pct, fixed=fixed, visible=visible, code=code_spans)
    env.globals.update(metric_value=metric_value)
    env.globals.update(glossary=glossary.GLOSSARY, glossary_by_key=glossary.BY_KEY, conventions=glossary.CONVENTIONS,
                       health=health, health_bands=HEALTH, health_legend=glossary.HEALTH_LEGEND, kv_items=kv_items,
                       kv_tables=kv_tables)
    return env


def tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("tim-report")
    except Exception:  # pragma: no cover - running from a bare checkout
        return "dev"


def page_context(charts: list[dict], timestamp: str | None) -> dict:
    """What every page's base template needs: the charts, their specs, the Vega bundle (only with charts), the footer."""
    return {"charts": charts, "chart_specs": [{"id": c["id"], "spec": c["spec"]} for c in charts],
            "vega_js": Markup(javascript_bundle()) if charts else None, "timestamp": timestamp, "version": tool_version()}


def run_context(report, notes_md: str | None = None, timestamp: str | None = None) -> dict:
    charts = ch.run_charts(report)
    th = report.run.get("thresholds") or {}
    return {
        **page_context(charts, timestamp),
        "r": report, "t": title_parts(report), "m": report.metrics, "headline": headline(report),
        "health_colour": health(report.metrics.get("ess")),
        "groups": groups_view(report), "samples": samples_view(report), "metrics_table": flat_metrics(report),
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
                                                           columns=INDEX_COLUMNS, log_span=TREND_LOG_AXIS_SPAN,
                                                           **page_context(charts, timestamp))

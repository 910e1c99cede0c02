"""What every HTML page shares: the Jinja2 environment over the package's templates, the notes, the page frame,
and the shared assets.

Used by the run page and the index (html.py) and by the comparison (compare/html.py). A page either links the
site's one copy of the assets (`assets/vega.js`, `assets/tim.js`, `assets/style.css`, by a relative path: a run
page is one folder down) or, self-contained, carries them inline (`--self-contained`, the API's `to_html()`,
Jupyter). Either way it loads nothing from the network, and its Content-Security-Policy says so.
"""

from __future__ import annotations

import functools
from pathlib import Path

from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup, escape

from ..catalogue import metrics as catalogue
from ..catalogue.evidence import items as evidence_items
from ..catalogue.formats import ASSETS
from ..catalogue.numbers import fixed, fmt, pct
from ..config import HEALTH, health
from .precompiled import Precompiled
from .token_text import visible
from .vega import javascript_bundle
from .views import band_helps, kv_items, kv_tables


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
    env.globals.update(metric=catalogue.metric, glossary=catalogue.glossary, conventions=catalogue.CONVENTIONS,
                       health=health, health_bands=HEALTH, health_legend=catalogue.HEALTH_LEGEND,
                       health_verdict=catalogue.HEALTH_VERDICT, kv_items=kv_items,
                       kv_tables=kv_tables, kl_band_table=catalogue.kl_band_table, evidence_items=evidence_items,
                       band_helps=band_helps)
    if path is None:  # the package's own templates: compiled once, shipped (render/precompiled.py)
        env.bytecode_cache = Precompiled(env)
    return env


def tool_version() -> str:
    try:
        from importlib.metadata import version

        return version("tim-report")
    except Exception:  # pragma: no cover - running from a bare checkout
        return "dev"


def assets_href(self_contained: bool, depth: int) -> str | None:
    """Where a page `depth` folders below the site's root finds the shared assets; None: it carries them inline."""
    return None if self_contained else "../" * depth + ASSETS + "/"


def asset_files() -> dict[str, str]:
    """The shared assets, by their path in the site: written once per site (and per comparison folder)."""
    return {f"{ASSETS}/vega.js": javascript_bundle(), f"{ASSETS}/tim.js": asset_text("embed.js"),
            f"{ASSETS}/style.css": asset_text("style.css")}


@functools.lru_cache(maxsize=4)
def asset_text(name: str) -> str:
    return (templates_dir() / name).read_text(encoding="utf-8")


def page_context(charts: list[dict], timestamp: str | None, assets: str | None = None) -> dict:
    """What every page's base template needs: the charts, their specs, the footer, and the assets: linked from
    `assets` (a relative folder), or inline when it is None (the Vega bundle only with charts)."""
    inline = assets is None
    return {"charts": charts, "chart_specs": [{"id": c["id"], "spec": c["spec"]} for c in charts], "assets": assets,
            "vega_js": Markup(javascript_bundle()) if charts and inline else None,
            "css": Markup(asset_text("style.css")) if inline else None,
            "embed_js": Markup(asset_text("embed.js")) if charts and inline else None,
            "timestamp": timestamp, "version": tool_version()}

"""Rendering: a Report, the index summary or a comparison → the files of each output format. Display only.

Every format is one module here defining `RENDERER`, an object with the three methods of `Renderer`; the
formats and their modules are listed in `tim_report.catalogue.formats`, and a module is imported only when
its format is asked for (a markdown-only build loads no Altair, no Jinja2).

    html.py, charts.py, vega.py        the run page and the index (Jinja2 + Altair from pre-binned data)
    markdown.py, md.py                 report.md (no Altair, no Jinja2)
    compare/                           a comparison of two batches or two arms: its page and compare.md
    json.py                            summary.json, samples.js, compare.json
    views.py, run_tables.py            view models of the run page the formats share
    index_views.py, tables.py          the index's tables as view models; the table and cell they are made of
    token_text.py                      token text made visible
    jupyter.py                         one Jupyter display for every renderable object
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

from ..catalogue.formats import FORMATS


@dataclass(frozen=True)
class RenderOptions:
    """What a page says beyond the data: the author's notes, absolute links, the build time; and whether each page
    carries its own assets."""

    notes_md: str | None = None  # --notes: markdown shown on every page
    base_url: str | None = None  # --base-url: the markdown's links made absolute
    timestamp: str | None = None  # --timestamp: stamped into the pages
    self_contained: bool = False  # --self-contained: every page inlines the chart runtime and stylesheet

    def __post_init__(self) -> None:
        if self.base_url is not None:
            check_base_url(self.base_url)


URL_SCHEMES = ("http", "https")  # --base-url: a web address (or a path relative to the page), never javascript:/data:


def check_base_url(url: str) -> None:
    """A base URL for the markdown's links: http(s) with a host, or a relative path; no other scheme (javascript:,
    data:, file:), no whitespace or control character (a link target cannot hold them unescaped)."""
    from urllib.parse import urlsplit

    from ..errors import BadInput

    if not url or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7f for c in url):
        raise BadInput("--base-url", "is empty or holds whitespace or a control character")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise BadInput("--base-url", f"is not a URL ({exc})") from None
    if parts.scheme.lower() in URL_SCHEMES and not parts.netloc:
        raise BadInput("--base-url", f"names no host after '{parts.scheme}:': write {parts.scheme}://HOST/...")
    if parts.scheme and parts.scheme.lower() not in URL_SCHEMES:
        raise BadInput("--base-url", f"scheme '{parts.scheme[:20]}:' is not allowed: give an http(s):// address "
                                     "(e.g. https://you.github.io/site) or a relative path")
    if not parts.scheme and ":" in url.split("/", 1)[0]:  # 'javascript&colon;' aside, a colon before any slash
        raise BadInput("--base-url", "has a colon before its first '/': give an http(s):// address or a relative path")


class Renderer(Protocol):
    """One output format. Each method returns {file name: text}: the files this format adds."""

    def run(self, report: Any, options: RenderOptions) -> dict[str, str]: ...

    def index(self, index: dict, options: RenderOptions) -> dict[str, str]: ...

    def compare(self, comparison: dict, options: RenderOptions) -> dict[str, str]: ...


def renderer(name: str) -> Renderer:
    """The renderer of format `name`, its module imported now."""
    return importlib.import_module(f"{__name__}.{FORMATS[name].module}").RENDERER


def render(kind: str, data: Any, formats: tuple[str, ...], options: RenderOptions | None = None) -> dict[str, str]:
    """Every file of `formats` for one `kind` of output: "run" (a Report), "index" (the index summary) or "compare"."""
    options = options or RenderOptions()
    files: dict[str, str] = {}
    for name in formats:
        files.update(getattr(renderer(name), kind)(data, options))
    return files

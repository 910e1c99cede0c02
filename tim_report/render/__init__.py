"""Rendering: a Report, the index summary or a comparison → the files of each output format. Display only.

Every format is one module here defining `RENDERER`, an object with the three methods of `Renderer`; the
formats and their modules are listed in `tim_report.catalogue.formats`, and a module is imported only when
its format is asked for (a markdown-only build loads no Altair, no Jinja2).

    html.py, charts.py, vega.py        the run page and the index (Jinja2 + Altair from pre-binned data)
    compare_html.py                    the comparison page
    markdown.py, compare_md.py, md.py  report.md, compare.md (no Altair, no Jinja2)
    json.py                            summary.json, samples.json, compare.json
    views.py, compare_views.py         view models the formats share
    format.py                          token text made visible
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

"""The JSON files: summary.json of a run (and its samples.js, the samples' one copy), compare.json of a comparison.

The site's index.json is not a format's: every build writes it (tim_report.site.index_json).
"""

from __future__ import annotations

from ..model import dumps
from .samples_js import NAME, samples_js


class JsonRenderer:
    def run(self, report, options) -> dict[str, str]:
        return {"summary.json": dumps(report.summary_dict()), NAME: samples_js(report)}

    def index(self, index: dict, options) -> dict[str, str]:
        return {}

    def compare(self, comparison: dict, options) -> dict[str, str]:
        return {"compare.json": dumps(comparison)}


RENDERER = JsonRenderer()

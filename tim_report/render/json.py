"""The JSON files: summary.json and samples.json of a run, compare.json of a comparison (`model.dumps`).

The site's index.json is not a format's: every build writes it (tim_report.site.index_json).
"""

from __future__ import annotations

from ..model import dumps


class JsonRenderer:
    def run(self, report, options) -> dict[str, str]:
        return {"summary.json": dumps(report.summary_dict()), "samples.json": dumps(report.samples_dict(), compact=True)}

    def index(self, index: dict, options) -> dict[str, str]:
        return {}

    def compare(self, comparison: dict, options) -> dict[str, str]:
        return {"compare.json": dumps(comparison)}


RENDERER = JsonRenderer()

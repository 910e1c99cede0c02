"""Report: the analysis result as plain, JSON-able data. summary.json and samples.json are its serialisation."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class Report:
    run: dict
    metrics: dict
    breakdowns: dict
    routing: dict
    what_if: list
    verl: dict
    data_problems: dict
    distributions: dict
    diagnosis: dict | None = None
    samples: list = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def summary_dict(self) -> dict:
        d = asdict(self)
        d.pop("samples")
        return {"schema_version": d.pop("schema_version"), **d}

    def samples_dict(self) -> dict:
        return {"schema_version": self.schema_version, "run_id": self.run.get("id"), "samples": self.samples}

    def to_dict(self) -> dict:
        return {**self.summary_dict(), "samples": self.samples}

    def to_html(self, notes_md: str | None = None) -> str:
        """The run page (the same `index.html` that `tim-report build` writes for this batch)."""
        from .render.html import render_run

        return render_run(self, notes_md=notes_md)

    def to_markdown(self, base_url: str | None = None) -> str:
        """The run's GitHub-flavoured markdown (`report.md`); `base_url` makes its links absolute."""
        from .render.markdown import render_run_md

        return render_run_md(self, base_url=base_url)

    def _repr_html_(self) -> str:
        """Jupyter display: the full run page in an iframe whose `srcdoc` is the escaped page.

        Why an iframe and not the page's HTML inline: the page carries its own stylesheet and an inlined
        Vega bundle plus chart specs. Inline, its CSS would restyle the notebook and its scripts would
        run (or be blocked) in the notebook's context; JupyterLab does not execute <script> tags in
        rendered HTML output at all. `srcdoc` gives the page its own document, needs no file and no
        network (everything is inlined), and the `sandbox="allow-scripts"` iframe keeps its scripts
        away from the notebook. The iframe is fixed-height and scrolls; `.to_html()` gives the page
        itself to save or open in a browser.
        """
        import html

        page = html.escape(self.to_html(), quote=True)
        title = html.escape(f"tim-report: {self.run.get('id') or 'run'}", quote=True)
        return (f'<iframe title="{title}" srcdoc="{page}" sandbox="allow-scripts" '
                f'style="width:100%;height:900px;border:1px solid #ccc;border-radius:4px"></iframe>')

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**fields)


def clean(obj: Any) -> Any:
    """NaN / inf become null so the JSON is valid everywhere (browsers, jq, GitHub)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def dumps(obj: Any, compact: bool = False) -> str:
    """Deterministic JSON: sorted keys, trailing newline; `compact` for bulky per-token data."""
    layout = {"separators": (",", ":")} if compact else {"indent": 1}
    return json.dumps(clean(obj), sort_keys=True, ensure_ascii=False, allow_nan=False, **layout) + "\n"

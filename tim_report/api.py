"""The Python API for notebooks and scripts: the model's Report and Comparison, able to render themselves.

    report = tim_report.analyze(tim_report.load("step_batch.pt"))
    report.to_html(); report.to_markdown(); report.to_dict()     # and it displays itself in Jupyter
    tim_report.compare("before.pt", "after.pt").write("cmp/")

This module sits beside the build pipeline, above every layer it joins; the renderers are imported
only when a page is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import model
from .config import DiagnosisThresholds, Thresholds
from .render.jupyter import JupyterMixin


@dataclass
class Report(model.Report, JupyterMixin):
    """A `model.Report` with `.to_html()`, `.to_markdown()` and Jupyter display."""

    def to_html(self, notes_md: str | None = None) -> str:
        """The run page (the same `index.html` that `tim-report build` writes for this batch)."""
        from .render.html import render_run

        return render_run(self, notes_md=notes_md)

    def to_markdown(self, base_url: str | None = None) -> str:
        """The run's GitHub-flavoured markdown (`report.md`); `base_url` makes its links absolute."""
        from .render.markdown import render_run_md

        return render_run_md(self, base_url=base_url)

    def jupyter_title(self) -> str:
        return str(self.run.get("id") or "run")


@dataclass
class Comparison(model.Comparison, JupyterMixin):
    """A `model.Comparison` with `.to_html()`, `.to_markdown()`, `.write(folder)` and Jupyter display."""

    def to_html(self, timestamp: str | None = None) -> str:
        from .render.compare_html import render_compare_html

        return render_compare_html(self.data, timestamp)

    def to_markdown(self, html_url: str | None = None) -> str:
        from .render.compare_md import render_compare_md

        return render_compare_md(self.data, html_url)

    def write(self, out: str | Path) -> Path:
        from .build import write_compare

        return write_compare(self, Path(out))

    def jupyter_title(self) -> str:
        labels = self.data.get("labels") or {}
        return f"{labels.get('before')} → {labels.get('after')}"


def load(path, **kwargs) -> model.StepBatch:
    """Read a step batch file into a StepBatch (see tim_report.io.load)."""
    from .io import load as _load

    return _load(path, **kwargs)


def analyze(batch: model.StepBatch, thresholds: Thresholds | None = None, run_id: str | None = None,
            diagnosis_thresholds: DiagnosisThresholds | None = None) -> Report:
    """Analyse a StepBatch into a Report (see tim_report.analysis.analyze)."""
    from .analysis import analyze as _analyze

    r = _analyze(batch, thresholds, run_id, diagnosis_thresholds)
    return Report(**vars(r))


def compare(before, after, labels: tuple[str, str] | None = None, thresholds: Thresholds | None = None,
            **load_kwargs) -> Comparison:
    """Compare two StepBatches or step batch files; labels default to the file stems."""
    from .analysis.compare import compare_batches

    sides, names = [], []
    for i, x in enumerate((before, after)):
        if isinstance(x, (str, Path)):
            sides.append(load(x, **load_kwargs))
            names.append(Path(x).stem)
        else:
            sides.append(x)
            names.append(("before", "after")[i])
    if labels is None:
        labels = (names[0], names[1]) if names[0] != names[1] else ("before", "after")
    return Comparison(compare_batches(sides[0], sides[1], labels=tuple(labels), thresholds=thresholds))

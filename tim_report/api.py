"""The Python API for notebooks and scripts: the model's Report and Comparison, able to render themselves.

    report = tim_report.analyze(tim_report.load("step_batch.pt"))
    report.to_html(); report.to_markdown(); report.to_dict()     # and it displays itself in Jupyter
    tim_report.compare("before.pt", "after.pt").write("cmp/")
    report.tokens_frame(); tim_report.read_site("site/").steps_frame()   # pandas, for a notebook (tim_report.frames)

The same service calls as the command line (`tim_report.service`); renderers are imported only when a page is
asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import model
from .config import DiagnosisThresholds, Thresholds
from .render.jupyter import JupyterMixin


@dataclass
class Report(model.BatchReport, JupyterMixin):
    """A `model.BatchReport` with `.to_html()`, `.to_markdown()` and Jupyter display."""

    def to_html(self, notes_md: str | None = None) -> str:
        """The run page, self-contained (the `index.html` that `tim-report build --self-contained` writes)."""
        from .render import RenderOptions, renderer

        return renderer("html").run(self, RenderOptions(notes_md=notes_md, self_contained=True))["index.html"]

    def to_markdown(self, base_url: str | None = None) -> str:
        """The run's GitHub-flavoured markdown (`report.md`); `base_url` makes its links absolute."""
        from .render import RenderOptions, renderer

        return renderer("md").run(self, RenderOptions(base_url=base_url))["report.md"]

    def scalars(self, prefix: str = "tim/") -> dict[str, float]:
        """The headline and summary numbers as `{prefix + key: float}`, for an experiment logger as they are:
        `wandb.log(report.scalars(), step=step)`, `mlflow.log_metrics(...)`, a TensorBoard `add_scalar` each
        (docs/watch.md). A metric this batch has no finite value for (None, NaN, inf) is left out, not logged as
        NaN: a logger draws a gap, and no backend rejects the call."""
        from .analysis.lag.history import lag_scalars
        from .analysis.stats import finite
        from .catalogue.metrics import SCALARS

        values = {key: finite(self.metrics.get(key)) for key in SCALARS}
        st = getattr(self, "staleness", None) or {}
        lags = {str(r.get("lag")): r.get("kl_k3") for r in st.get("by_lag") or [] if isinstance(r, dict)}
        return {**{prefix + key: v for key, v in values.items() if v is not None},
                **lag_scalars(lags, st.get("share"), prefix)}  # per-lag KL k3 and the staleness share, with versions

    def tokens_frame(self, text: bool = False):
        """The analysed batch's tokens as a pandas DataFrame, one row per token (tim_report.frames.tokens_frame:
        both log-probs, δ, r, sequence, position, turn, environment, group). Needs the batch: a Report from
        `tim_report.analyze(batch)` has it; one read back from summary.json does not (load and analyse the file)."""
        batch = getattr(self, "_batch", None)
        if batch is None:
            raise ValueError("this Report holds no batch (read back from JSON?): "
                             "tim_report.analyze(tim_report.load(path)).tokens_frame()")
        from .frames import tokens_frame

        return tokens_frame(batch, text=text)

    def jupyter_title(self) -> str:
        return str(self.run.get("id") or "run")


@dataclass
class Comparison(model.Comparison, JupyterMixin):
    """A `model.Comparison` with `.to_html()`, `.to_markdown()`, `.write(folder)` and Jupyter display."""

    def to_html(self, timestamp: str | None = None) -> str:
        from .render import RenderOptions, renderer

        return renderer("html").compare(self.data, RenderOptions(timestamp=timestamp, self_contained=True))["index.html"]

    def to_markdown(self) -> str:
        from .render import RenderOptions, renderer

        return renderer("md").compare(self.data, RenderOptions())["compare.md"]

    def write(self, out: str | Path) -> Path:
        """index.html, compare.md and compare.json into the folder `out` (as `tim-report compare -o` writes them)."""
        from .service.compare import write_compare

        return write_compare(self, Path(out))

    def jupyter_title(self) -> str:
        labels = self.data.get("labels") or {}
        return f"{labels.get('before')} → {labels.get('after')}"


def load(path, **options) -> model.StepBatch:
    """Read a step batch file into a StepBatch; `options` are `io.LoadOptions`' fields (keys, meta, allow_pickle,
    tokenizer, format_hint, max_tokens)."""
    from .io import LoadOptions
    from .io import load as _load

    return _load(path, LoadOptions(**options))


def analyze(batch: model.StepBatch, thresholds: Thresholds | None = None, run_id: str | None = None,
            diagnosis_thresholds: DiagnosisThresholds | None = None) -> Report:
    """Analyse a StepBatch into a Report (see tim_report.analysis.analyze)."""
    from .analysis import analyze as _analyze

    r = _analyze(batch, thresholds, run_id, diagnosis_thresholds)
    report = Report(**vars(r))
    object.__setattr__(report, "_batch", batch)  # for tokens_frame(); not a field: never in to_dict() or summary.json
    return report


def compare(before, after, labels: tuple[str, str] | None = None, thresholds: Thresholds | None = None,
            **options) -> Comparison:
    """Compare two StepBatches or step batch files (`options`: how to read files, as for `load`). Labels default to
    the file stems ("before" / "after" for a StepBatch), told apart when they are the same."""
    from .io import LoadOptions
    from .service.compare import compare as _compare

    c = _compare(before, after, LoadOptions(**options), labels or (None, None), thresholds)
    return Comparison(c.data)

"""tim-report: measure and explain the mismatch between an RL rollout engine and its trainer.

The Python API, for notebooks and scripts; heavy packages are imported only when used:

    report = tim_report.analyze(tim_report.load("step_batch.pt"))
    report.to_html(); report.to_markdown(); report.to_dict()
    tim_report.compare("before.pt", "after.pt").write("cmp/")
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "analyze", "compare", "load"]


def load(path, **kwargs):
    """Read a step batch file into a StepBatch (see tim_report.loader.load)."""
    from .loader import load as _load

    return _load(path, **kwargs)


def analyze(batch, thresholds=None, run_id=None, **kwargs):
    """Analyse a StepBatch into a Report (see tim_report.analysis.analyze)."""
    from .analysis import analyze as _analyze

    return _analyze(batch, thresholds, run_id, **kwargs)


def compare(before, after, labels=None, thresholds=None, **load_kwargs):
    """Compare two StepBatches or step batch files; returns a Comparison (.to_dict/.to_html/.to_markdown/.write).

    See tim_report.commands.compare.compare and tim_report.analysis.compare.compare_batches.
    """
    from .commands.compare import compare as _compare

    return _compare(before, after, labels=labels, thresholds=thresholds, **load_kwargs)

"""tim-report: measure and explain the mismatch between an RL rollout engine and its trainer."""

from __future__ import annotations

import sys as _sys
import types as _types

__version__ = "0.1.0"

__all__ = ["__version__", "analyze", "compare", "load"]


def load(path, **kwargs):
    """Read a step batch file into a StepBatch (see tim_report.loader.load)."""
    from .loader import load as _load

    return _load(path, **kwargs)


class _Analyze:
    """tim_report.analyze(batch, thresholds=None, run_id=None) -> Report (see tim_report.analyze.analyze).

    A callable rather than a plain function because `tim_report.analyze` is also the name of the
    analysis subpackage: importing it (which the first call does) would otherwise replace the function
    with the module, and the second `tim_report.analyze(batch)` would fail with "'module' object is not
    callable". Attribute access is passed on to the subpackage, so `tim_report.analyze.Thresholds` works.
    """

    def __call__(self, batch, thresholds=None, run_id=None, **kwargs):
        from .analyze import analyze as _analyze

        return _analyze(batch, thresholds, run_id, **kwargs)

    def __getattr__(self, name):
        import importlib

        return getattr(importlib.import_module(__name__ + ".analyze"), name)

    def __repr__(self) -> str:
        return "<function tim_report.analyze(batch, thresholds=None, run_id=None)>"


class _Package(_types.ModuleType):
    """The tim_report module, keeping `analyze` callable when its subpackage is imported."""

    def __setattr__(self, name, value):
        if name == "analyze" and isinstance(value, _types.ModuleType):
            return  # the subpackage stays in sys.modules; the callable forwards attribute access to it
        super().__setattr__(name, value)


analyze = _Analyze()
_sys.modules[__name__].__class__ = _Package


def compare(before, after, labels=None, thresholds=None, **load_kwargs):
    """Compare two StepBatches or step batch files; returns a Comparison (.to_dict/.to_html/.to_markdown/.write).

    See tim_report.commands.compare.compare and tim_report.analyze.compare.compare_batches.
    """
    from .commands.compare import compare as _compare

    return _compare(before, after, labels=labels, thresholds=thresholds, **load_kwargs)

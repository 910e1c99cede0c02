"""tim-report: measure and explain the mismatch between an RL rollout engine and its trainer.

The Python API, for notebooks and scripts (tim_report.api); heavy packages are imported only when used:

    report = tim_report.analyze(tim_report.load("step_batch.pt"))
    report.to_html(); report.to_markdown(); report.to_dict()
    tim_report.compare("before.pt", "after.pt").write("cmp/")
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "analyze", "compare", "load"]


def __getattr__(name: str):
    """The API functions, imported on first use so `import tim_report` stays light."""
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'tim_report' has no attribute {name!r}")

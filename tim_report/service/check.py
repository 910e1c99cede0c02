"""`check`: each batch against fixed limits, the diagnosis's findings and, with a history, the run's own band."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import analyze
from ..analysis.gate import CheckResult, Limit, evaluate
from ..analysis.history import HistoryResult, check_history
from ..analysis.runs import run_row
from ..config import HISTORY_MARGIN, HISTORY_WINDOW, DiagnosisThresholds, Thresholds
from ..io import LoadOptions, load
from ..model import Report
from ..site.index_json import read_history


@dataclass
class CheckOptions:
    limits: list[Limit] = field(default_factory=list)
    fail_on: str = "error"  # findings of this severity or worse fail ("never": none)
    thresholds: Thresholds = field(default_factory=Thresholds)
    diagnosis: DiagnosisThresholds | None = None
    history: Path | None = None  # a site whose index.json holds the run's earlier steps
    history_window: int = HISTORY_WINDOW
    history_margin: float = HISTORY_MARGIN
    history_floors: dict[str, float] = field(default_factory=dict)


@dataclass
class Checked:
    """One batch checked: its report and index row, the verdict on its limits and findings, and on the run's band."""

    path: Path
    report: Report
    row: dict
    result: CheckResult
    history: HistoryResult | None


def check(paths: list[Path], load_options: LoadOptions, options: CheckOptions) -> Iterator[Checked]:
    """Each batch checked in turn. An unusable history is bad input before any batch is read."""
    rows = read_history(options.history) if options.history is not None else None
    for path in paths:
        report = analyze(load(path, load_options), options.thresholds, diagnosis_thresholds=options.diagnosis)
        row = run_row(report)
        result = evaluate(report, options.limits, options.fail_on)
        band = None
        if rows is not None:
            band = check_history(row, rows, options.history_window, options.history_margin, options.history_floors)
            result.violations += band.violations
            if band.note is None:
                result.summary += f"; within the run's band ({band.basis})"
        yield Checked(Path(path), report, row, result, band)

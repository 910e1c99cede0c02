"""`check`: each batch against fixed limits, the diagnosis's findings and, with a history, the run's own band.

A run folder is checked step by step; a step of it that cannot be read is an `Unread` naming it and saying why
(the command exits 2 after checking the others). A file that cannot be read is BadInput, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..analysis import GATE, GATE_HISTORY, analyze
from ..analysis.exact import exact_gate
from ..analysis.gate import CheckResult, Limit, Violation, evaluate
from ..analysis.history import HistoryResult, check_history
from ..analysis.lag.history import has_lag, run_reads
from ..analysis.run_index import run_row
from ..analysis.tokens import valid_tokens
from ..catalogue import staleness as lag_words
from ..catalogue.chain import exact_line
from ..catalogue.findings.lag import STALE
from ..catalogue.run_words import make_run_finding
from ..config import HISTORY_MARGIN, HISTORY_WINDOW, DiagnosisThresholds, Thresholds
from ..errors import BadInput
from ..io import LoadOptions, Source, Unreadable, load, scan
from ..io.discover import step_order
from ..model import BatchReport, StepBatch
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
    exact: bool = False  # also fail unless no token differs along the chain (by more than `atol`)
    atol: float = 0.0


@dataclass
class Checked:
    """One batch checked: its report and index row, the verdict on its limits and findings, and on the run's band.
    The report holds what the gate reads (analysis.GATE): `build` or `analyze` give the whole of it."""

    path: Path
    report: BatchReport
    row: dict
    result: CheckResult
    history: HistoryResult | None
    exact: dict | None = None  # the exact gate (analysis/exact.py) when asked
    source: Path | None = None  # the file or run folder given: a run folder's steps are also read together


@dataclass
class Unread:
    """A step of a run folder that could not be read: its file or step folder, and why."""

    path: Path
    reason: str


def check(paths: list[Path], load_options: LoadOptions, options: CheckOptions) -> Iterator[Checked | Unread]:
    """Each batch checked in turn (a run folder's steps in step order). An unusable history is bad input before any
    batch is read."""
    rows = read_history(options.history) if options.history is not None else None
    for path in paths:
        found, bad = scan(path, load_options.format_hint)
        several = len(found) + len(bad) > 1
        steps: list[Source | Unreadable] = sorted([*found, *bad], key=step_order)
        for src in steps:
            if isinstance(src, Unreadable):
                yield Unread(src.origin, src.reason)
                continue
            try:
                batch = load(src, load_options)
            except BadInput as exc:
                if not several:
                    raise
                yield Unread(src.origin, Unreadable.of(src.origin, exc).reason)
                continue
            yield replace(_checked(src.origin if several else Path(path), batch, rows, options), source=Path(path))


def run_errors(rows: list[dict]) -> list[dict]:
    """The errors a run folder's steps show only read together, each {"id", "title"}: the weight digests' sync faults
    (analysis/lag/digests.py), a lag beyond the run's own history of it (its first step of each event) and an engine
    that never took an update (analysis/lag/history.py): what the index's run verdict says, so `check RUN` and the
    index agree."""
    from ..analysis.lag.digests import across_steps

    out = [{"id": f["id"], "title": f["title"]} for f in across_steps(rows)]
    readings, never = run_reads(rows)
    if never is not None and never["per_lr"]:
        out.append(make_run_finding("never_delivered", never))
    firsts = {(r["lag"], r["since_step"]) for r in readings.values() if r["status"] == "beyond"}
    for row in sorted((r for r in rows if r.get("step") is not None), key=lambda r: r["step"]):
        reading = readings.get(row["id"])
        if reading and reading["status"] == "beyond" and (reading["lag"], row["step"]) in firsts:
            out.append({"id": STALE, "title": f"{row['id']}: stale weights: {lag_words.run_reading(reading)}"})
    return [{"id": f["id"], "title": f["title"]} for f in out]


NEW = "\0the step checked"  # the checked step's id among the history's rows: no run id can be it


def _checked(path: Path, batch: StepBatch, rows: list[dict] | None, options: CheckOptions) -> Checked:
    """One batch against the limits, the findings and, with a history, the run's own band."""
    report = analyze(batch, options.thresholds, diagnosis_thresholds=options.diagnosis,
                     scope=GATE if rows is None else GATE_HISTORY)  # only what the gate and the band read
    row = run_row(report)
    result = evaluate(report, options.limits, options.fail_on)
    band = None
    if rows is not None:
        band = check_history(row, rows, options.history_window, options.history_margin, options.history_floors)
        lagged = has_lag(row)
        if lagged:  # its whole-batch numbers hold the lag's own mismatch: it is read lag by lag instead
            band.violations = []
        reading = run_reads([*rows, {**row, "id": NEW}], options.history_window)[0].get(NEW)
        if reading is not None and reading["status"] in ("beyond", "never"):  # as the index reads it (in_run)
            band.violations.append(Violation("history", "lag_kl_k3", f"stale weights: {lag_words.run_reading(reading)}"))
        result.violations += band.violations
        if lagged and reading is not None and not band.violations:  # what judged it: its lag against its own history
            band.note = None
            result.summary += "; " + (lag_words.run_reading(reading) or lag_words.unjudged(reading))
        elif band.note is None and not band.violations:
            result.summary += f"; within the run's band ({band.basis})"
    gate = None
    if options.exact:
        gate = exact_gate(batch, valid_tokens(batch)[0], options.atol)
        if not gate["passed"]:
            result.violations.append(Violation("exact", "exact", exact_line(gate).removeprefix("exact: ")))
        elif result.ok:
            result.summary += "; " + exact_line(gate)
    return Checked(path, report, row, result, band, gate)

"""`compare`: two batches on the same tokens, before and after, or two arms of several steps each (an A/B of a config
change); the comparison folder written all or nothing."""

from __future__ import annotations

from pathlib import Path

from ..analysis import analyze
from ..analysis.arms import compare_arms
from ..analysis.compare import compare_batches
from ..analysis.run_index import run_row
from ..catalogue.formats import FORMATS
from ..config import Thresholds
from ..io import LoadOptions, load, sources
from ..model import Comparison, StepBatch
from ..render import RenderOptions, render
from ..site.publish import move_into, staging, write_files


def labels_for(names: tuple[str, str]) -> tuple[str, str]:
    """The page's names for the two sides: their own (file stems), told apart when they are the same."""
    before, after = names
    return (f"{before} (before)", f"{after} (after)") if before == after else (before, after)


def compare(before: str | Path | StepBatch, after: str | Path | StepBatch, load_options: LoadOptions | None = None,
            labels: tuple[str | None, str | None] = (None, None), thresholds: Thresholds | None = None) -> Comparison:
    """Two batches (files or StepBatches) compared. A label not given is the file's stem ("before" / "after" for a
    StepBatch); two equal names are told apart by " (before)" / " (after)"."""
    sides, names = [], []
    for side, x, given in zip(("before", "after"), (before, after), labels):
        if isinstance(x, StepBatch):
            sides.append(x)
            names.append(given or side)
        else:
            sides.append(load(x, load_options))
            names.append(given or Path(x).stem)
    return Comparison(compare_batches(sides[0], sides[1], labels=labels_for((names[0], names[1])), thresholds=thresholds))


def arms_or_pair(before: str | Path, after: str | Path, load_options: LoadOptions | None = None,
                 labels: tuple[str | None, str | None] = (None, None), thresholds: Thresholds | None = None) -> Comparison:
    """`tim-report compare BEFORE AFTER`: two batches compared token by token when each side holds one, else two arms
    (a run folder or a folder of step files per side) compared step by step (analysis/arms.py)."""
    opts = load_options or LoadOptions()
    found = [sources(x, opts.format_hint) for x in (before, after)]
    if len(found[0]) == 1 and len(found[1]) == 1:
        return compare(found[0][0].origin, found[1][0].origin, opts, labels, thresholds)
    names = labels_for((labels[0] or Path(before).name, labels[1] or Path(after).name))
    rows = [[run_row(analyze(load(src, opts), thresholds, run_id=src.run_id)) for src in side] for side in found]
    return Comparison(compare_arms(rows[0], rows[1], names))


def write_compare(comparison: Comparison, out: Path, formats: tuple[str, ...] = tuple(FORMATS),
                  options: RenderOptions | None = None) -> Path:
    """The comparison's files (index.html and its assets/ unless self-contained, compare.md, compare.json) rendered
    into a staging folder inside `out`, then moved in."""
    with staging(out) as folder:
        write_files(folder, render("compare", comparison.to_dict(), formats, options))
        move_into(folder, out)
    return out

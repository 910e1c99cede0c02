"""Build the output site: one folder per batch plus the index, written atomically.

Everything is rendered into a temporary folder beside the output and moved into place only
when every input has succeeded, so a bad input never leaves a half-written site.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .analysis import Thresholds, analyze
from .errors import BadInput
from .loader import load
from .report import Report, dumps

FORMATS = ("html", "md", "json")


@dataclass
class BuildOptions:
    keys: dict[str, str] = field(default_factory=dict)
    allow_pickle: bool = False
    tokenizer: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    formats: tuple[str, ...] = FORMATS
    notes_md: str | None = None
    base_url: str | None = None
    timestamp: str | None = None
    jobs: int = 1


def safe_run_id(name: str) -> str:
    rid = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return rid or "run"


def unique_ids(paths: list[Path], given: list[str] | None) -> list[str]:
    if given:
        if len(given) != len(paths):
            raise BadInput("--run-id", f"given {len(given)} times for {len(paths)} input files")
        ids = [safe_run_id(g) for g in given]
    else:
        ids = [safe_run_id(p.stem) for p in paths]
    seen: dict[str, int] = {}
    out = []
    for rid in ids:
        seen[rid] = seen.get(rid, 0) + 1
        out.append(rid if seen[rid] == 1 else f"{rid}-{seen[rid]}")
    return out


def analyze_file(path: Path, run_id: str, opts: BuildOptions) -> Report:
    batch = load(path, keys=opts.keys, allow_pickle=opts.allow_pickle, tokenizer=opts.tokenizer)
    return analyze(batch, opts.thresholds, run_id=run_id)


def write_run(report: Report, run_dir: Path, opts: BuildOptions) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    if "json" in opts.formats:
        (run_dir / "summary.json").write_text(dumps(report.summary_dict()), encoding="utf-8")
        (run_dir / "samples.json").write_text(dumps(report.samples_dict(), compact=True), encoding="utf-8")
    if "html" in opts.formats:
        from .render.html import render_run

        (run_dir / "index.html").write_text(render_run(report, notes_md=opts.notes_md, timestamp=opts.timestamp), encoding="utf-8")
    if "md" in opts.formats:
        from .render.markdown import render_run_md

        (run_dir / "report.md").write_text(render_run_md(report, base_url=opts.base_url), encoding="utf-8")


def analyze_all(paths: list[Path], ids: list[str], opts: BuildOptions,
                progress: Callable[[int, int], None] | None = None) -> list[Report]:
    """Analyse every input, serially or in `opts.jobs` processes; results in input order either way.

    The first bad input raises its BadInput (the pending analyses are cancelled), so nothing is written.
    `progress(done, total)` is called after each input.
    """
    total = len(paths)
    if opts.jobs <= 1 or total <= 1:
        reports = []
        for i, (p, rid) in enumerate(zip(paths, ids)):
            reports.append(analyze_file(p, rid, opts))
            if progress:
                progress(i + 1, total)
        return reports
    with ProcessPoolExecutor(max_workers=min(opts.jobs, total)) as pool:
        futures = [pool.submit(analyze_file, p, rid, opts) for p, rid in zip(paths, ids)]
        for n, f in enumerate(as_completed(futures), 1):
            if f.exception() is not None:
                for g in futures:
                    g.cancel()  # not yet started; the running ones finish before the pool closes
                break
            if progress:
                progress(n, total)
    # Inputs start in order, so every input before a cancelled one ran: the first failure in input
    # order is the one a serial build would have stopped at.
    for f in futures:
        if not f.cancelled() and f.exception() is not None:
            raise f.exception()
    return [f.result() for f in futures]


def build(paths: list[Path], out: Path, opts: BuildOptions, run_ids: list[str] | None = None,
          progress: Callable[[int, int], None] | None = None) -> list[Report]:
    """Analyse every input, render into a temporary folder, then move the results into `out`."""
    ids = unique_ids(paths, run_ids)
    reports = analyze_all(paths, ids, opts, progress)
    if out.exists() and not out.is_dir():
        raise BadInput(out, "output path exists and is not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    from .analysis.runs import index_summary

    index = index_summary(reports)
    with tempfile.TemporaryDirectory(prefix=".tim-report-", dir=out.parent) as tmp:
        staging = Path(tmp)
        for report in reports:
            write_run(report, staging / report.run["id"], opts)
        if "html" in opts.formats:
            from .render.html import render_index

            (staging / "index.html").write_text(render_index(reports, timestamp=opts.timestamp, index=index), encoding="utf-8")
        if "md" in opts.formats:
            from .render.markdown import render_index_md

            (staging / "report.md").write_text(render_index_md(reports, index, base_url=opts.base_url), encoding="utf-8")
        _move_into(staging, out)
    return reports


def _move_into(staging: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for item in sorted(staging.iterdir()):
        target = out / item.name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        shutil.move(str(item), str(target))

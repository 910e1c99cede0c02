"""Build the output site: one folder per batch plus the index, written all or nothing.

Everything is rendered into a staging folder beside the output and moved into place only when every
input has succeeded, so a bad input never leaves a half-written site. Renderers are imported only for
the formats asked for: a markdown-only build never loads Altair or Jinja2.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import analyze
from ..analysis.runs import index_summary
from ..config import Thresholds
from ..errors import BadInput
from ..io import Source, load, sources
from ..io.output import move_into, staging
from ..model import Comparison, Report, dumps
from .executors import Progress, analyze_all

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
    format_hint: str | None = None


def safe_run_id(name: str) -> str:
    rid = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return rid or "run"


def unique_ids(names: list[str]) -> list[str]:
    """Safe folder names, unique: a repeated name gets -2, -3, ..."""
    seen: dict[str, int] = {}
    out = []
    for rid in (safe_run_id(n) for n in names):
        seen[rid] = seen.get(rid, 0) + 1
        out.append(rid if seen[rid] == 1 else f"{rid}-{seen[rid]}")
    return out


def expand(paths: list[Path], given: list[str] | None, format_hint: str | None = None) -> tuple[list[Source], list[str]]:
    """Every batch under the command-line paths (a run folder gives one per step) and its run id.

    `--run-id` is given once per path; a path holding several steps prefixes each step's id with it.
    """
    if given and len(given) != len(paths):
        raise BadInput("--run-id", f"given {len(given)} times for {len(paths)} inputs")
    found, names = [], []
    for i, path in enumerate(paths):
        batches = sources(path, format_hint)
        found += batches
        names += [s.run_id if not given else given[i] if len(batches) == 1 else f"{given[i]}-{s.run_id}" for s in batches]
    return found, unique_ids(names)


def analyze_file(opts: BuildOptions, src: Source, run_id: str) -> Report:
    batch = load(src, keys=opts.keys, allow_pickle=opts.allow_pickle, tokenizer=opts.tokenizer)
    return analyze(batch, opts.thresholds, run_id=run_id)


def write_run(report: Report, run_dir: Path, opts: BuildOptions) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    if "json" in opts.formats:
        (run_dir / "summary.json").write_text(dumps(report.summary_dict()), encoding="utf-8")
        (run_dir / "samples.json").write_text(dumps(report.samples_dict(), compact=True), encoding="utf-8")
    if "html" in opts.formats:
        from ..render.html import render_run

        (run_dir / "index.html").write_text(render_run(report, notes_md=opts.notes_md, timestamp=opts.timestamp), encoding="utf-8")
    if "md" in opts.formats:
        from ..render.markdown import render_run_md

        (run_dir / "report.md").write_text(render_run_md(report, base_url=opts.base_url), encoding="utf-8")


def write_index(reports: list[Report], folder: Path, opts: BuildOptions) -> None:
    index = index_summary(reports)
    if "html" in opts.formats:
        from ..render.html import render_index

        (folder / "index.html").write_text(render_index(index, timestamp=opts.timestamp), encoding="utf-8")
    if "md" in opts.formats:
        from ..render.markdown import render_index_md

        (folder / "report.md").write_text(render_index_md(index, base_url=opts.base_url), encoding="utf-8")


def build(paths: list[Path], out: Path, opts: BuildOptions, run_ids: list[str] | None = None,
          progress: Progress | None = None) -> list[Report]:
    """Analyse every batch under the inputs (a run folder: one per step), render into a staging folder, then
    move the results into `out`."""
    found, ids = expand(paths, run_ids, opts.format_hint)
    reports = analyze_all(functools.partial(analyze_file, opts), found, ids, opts.jobs, progress)
    with staging(out) as folder:
        for report in reports:
            write_run(report, folder / report.run["id"], opts)
        write_index(reports, folder, opts)
        move_into(folder, out)
    return reports


def write_compare(comparison: Comparison, out: Path, timestamp: str | None = None) -> Path:
    """index.html, compare.json and compare.md rendered into a staging folder beside `out`, then moved in."""
    from ..render.compare_html import render_compare_html
    from ..render.compare_md import render_compare_md

    data = comparison.to_dict()
    with staging(out) as folder:
        (folder / "index.html").write_text(render_compare_html(data, timestamp), encoding="utf-8")
        (folder / "compare.json").write_text(dumps(data), encoding="utf-8")
        (folder / "compare.md").write_text(render_compare_md(data, "index.html"), encoding="utf-8")
        move_into(folder, out)
    return out

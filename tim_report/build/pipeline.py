"""Build the output site: one folder per batch plus the index, written all or nothing.

Everything is rendered into a staging folder beside the output and moved into place only when every
input has succeeded, so a bad input never leaves a half-written site. Renderers are imported only for
the formats asked for: a markdown-only build never loads Altair or Jinja2.
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis import analyze
from ..analysis.runs import index_from_rows, run_row
from ..config import Thresholds
from ..errors import BadInput
from ..io import Source, load, sources
from ..io.output import MARKER, check_replaceable, check_target, move_into, staging, write_files
from ..model import Comparison, Report, dumps
from .cache import CACHE_FILE, cache_entry, cached_row, options_fingerprint, step_key
from .executors import Progress, analyze_all, session

FORMATS = ("html", "md", "json")


@dataclass
class BuildOptions:
    keys: dict[str, str] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)  # --meta: names the files do not carry
    allow_pickle: bool = False
    tokenizer: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    formats: tuple[str, ...] = FORMATS
    notes_md: str | None = None
    base_url: str | None = None
    timestamp: str | None = None
    jobs: int = 1
    executor: str = "local"  # "local" (in-process or --jobs processes) or "ray" (executors.EXECUTORS)
    ray_address: str | None = None  # --ray-address: None starts a local Ray on demand
    format_hint: str | None = None
    max_tokens: int | None = None  # --max-tokens (None: config.MAX_TOKENS)


@dataclass
class BuildResult:
    """What a build did: every run's index row (input order), the steps where the run changed, how many steps it analysed
    and reused, how long it took."""

    rows: list[dict]
    change_steps: list[dict]
    analysed: int
    reused: int
    seconds: float


RAY_CHUNK = 256  # steps in flight at once on Ray: enough to keep a cluster busy, a few hundred MB of Reports

# Names a run folder cannot take: the site's own files beside the run folders.
RESERVED = {"index.html", "report.md", "index.json", MARKER}
MAX_RUN_ID = 100  # characters; file systems allow 255 bytes per name, and a run id is also a URL path segment


def safe_run_id(name: str) -> str:
    """A folder name and URL segment: letters, digits, '.', '_', '-'; never hidden, never too long."""
    rid = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    if len(rid) > MAX_RUN_ID:  # keep it unique: the cut name plus a short hash of the whole
        rid = rid[: MAX_RUN_ID - 9].rstrip("-.") + "-" + hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:8]
    return rid or "run"


def unique_ids(names: list[str], given: bool = False) -> list[str]:
    """One run folder per batch, never two alike (case-insensitively: macOS and Windows disks) nor a reserved
    name; `given` names come from --run-id and are refused rather than renamed."""
    if given:
        for g in names:
            if safe_run_id(g).lower() in RESERVED or len(g) > MAX_RUN_ID:
                raise BadInput("--run-id", f"'{g}' cannot name a run folder (reserved for the site's own files, or longer "
                                           f"than {MAX_RUN_ID} characters)")
    taken = set(RESERVED)
    out = []
    for rid in (safe_run_id(n) for n in names):
        candidate, n = rid, 1
        while candidate.lower() in taken:
            n += 1
            candidate = f"{rid}-{n}"
        if given and candidate != rid:
            raise BadInput("--run-id", f"'{rid}' is given twice")
        taken.add(candidate.lower())
        out.append(candidate)
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
    return found, unique_ids(names, given=bool(given))


def analyze_file(opts: BuildOptions, src: Source, run_id: str) -> Report:
    batch = load(src, keys=opts.keys, allow_pickle=opts.allow_pickle, tokenizer=opts.tokenizer, meta=opts.meta,
                 max_tokens=opts.max_tokens)
    return analyze(batch, opts.thresholds, run_id=run_id)


def analyze_and_render(analyse, opts: BuildOptions, src: Source, run_id: str) -> tuple[dict, dict[str, str]]:
    """One step's whole work, wherever it runs (this process, a --jobs worker, a Ray task): its analysis, its
    index row and its rendered files, so rendering is spread over the workers too. `analyse` is passed rather
    than looked up so that a worker runs the same function as the caller."""
    report = analyse(opts, src, run_id)
    return run_row(report), run_files(report, opts)


def run_files(report: Report, opts: BuildOptions) -> dict[str, str]:
    """A run folder's files, rendered: the formats asked for, their renderers imported only then."""
    files = {}
    if "json" in opts.formats:
        files["summary.json"] = dumps(report.summary_dict())
        files["samples.json"] = dumps(report.samples_dict(), compact=True)
    if "html" in opts.formats:
        from ..render.html import render_run

        files["index.html"] = render_run(report, notes_md=opts.notes_md, timestamp=opts.timestamp)
    if "md" in opts.formats:
        from ..render.markdown import render_run_md

        files["report.md"] = render_run_md(report, base_url=opts.base_url)
    return files


def index_files(index: dict, opts: BuildOptions) -> dict[str, str]:
    """The site's own files from the index summary (analysis.runs.index_from_rows)."""
    files = {}
    if "json" in opts.formats:  # for scripts, dashboards and `check --history`: one row per run (run_row's keys)
        tr = index["trend"] or {}
        files["index.json"] = dumps({"tool": "tim-report", "runs": index["runs"], "steps": tr.get("steps", 0),
                                     "change_points": tr.get("change_points", []), "change_steps": tr.get("change_steps", [])})
    if "html" in opts.formats:
        from ..render.html import render_index

        files["index.html"] = render_index(index, timestamp=opts.timestamp, notes_md=opts.notes_md)
    if "md" in opts.formats:
        from ..render.markdown import render_index_md

        files["report.md"] = render_index_md(index, base_url=opts.base_url)
    return files


def cache_options(opts: BuildOptions) -> str:
    """Every option that changes what a run folder holds (not the timestamp, not how the work is spread)."""
    return options_fingerprint({"keys": opts.keys, "meta": opts.meta, "allow_pickle": opts.allow_pickle,
                                "tokenizer": opts.tokenizer, "thresholds": opts.thresholds.to_dict(),
                                "formats": opts.formats, "notes": opts.notes_md, "base_url": opts.base_url,
                                "format_hint": opts.format_hint, "max_tokens": opts.max_tokens})


def build(paths: list[Path], out: Path, opts: BuildOptions, run_ids: list[str] | None = None,
          progress: Progress | None = None) -> BuildResult:
    """Analyse every batch under the inputs (a run folder: one per step), render into a staging folder, then
    move the results into `out`. A step whose run folder a previous build wrote from the same input, options
    and tool is reused as it is (build/cache.py); the index is rewritten from every step's row."""
    start = time.monotonic()
    check_target(out)  # before the analysis: refusing after minutes of work would waste them
    found, ids = expand(paths, run_ids, opts.format_hint)
    fingerprint = cache_options(opts)
    keys = [step_key(s.paths, f"{s.framework}\0{s.origin}", rid, fingerprint) for s, rid in zip(found, ids)]
    rows: list[dict | None] = [cached_row(out, rid, k, opts.formats) for rid, k in zip(ids, keys)]
    todo = [i for i, r in enumerate(rows) if r is None]
    check_replaceable(out, [ids[i] for i in todo])  # a user's file in a run folder: refused before the work, too
    task = functools.partial(analyze_and_render, analyze_file, opts)
    with staging(out) as folder, session(opts.executor if todo else "local", opts.jobs, opts.ray_address):
        # in chunks, so that at most a chunk of steps' rendered files is in memory at once
        chunk = max(RAY_CHUNK if opts.executor == "ray" else 32, 8 * opts.jobs)
        for lo in range(0, len(todo), chunk):
            part = todo[lo:lo + chunk]
            done = functools.partial(_offset, progress, lo, len(todo)) if progress else None
            steps = analyze_all(task, [found[i] for i in part], [ids[i] for i in part], opts.jobs, done, opts.executor,
                                opts.ray_address)
            for i, (row, files) in zip(part, steps):
                rows[i] = row
                write_files(folder / ids[i], {**files, CACHE_FILE: cache_entry(keys[i], row)})
        index = index_from_rows(rows)
        write_files(folder, index_files(index, opts))
        move_into(folder, out)
    return BuildResult(rows, (index["trend"] or {}).get("change_steps", []), len(todo), len(found) - len(todo),
                       time.monotonic() - start)


def _offset(progress: Progress, offset: int, total: int, done: int, _chunk_total: int) -> None:
    progress(offset + done, total)


def write_compare(comparison: Comparison, out: Path, timestamp: str | None = None) -> Path:
    """index.html, compare.json and compare.md rendered into a staging folder beside `out`, then moved in."""
    from ..render.compare_html import render_compare_html
    from ..render.compare_md import render_compare_md

    data = comparison.to_dict()
    with staging(out) as folder:
        write_files(folder, {"index.html": render_compare_html(data, timestamp), "compare.json": dumps(data),
                             "compare.md": render_compare_md(data, "index.html")})
        move_into(folder, out)
    return out

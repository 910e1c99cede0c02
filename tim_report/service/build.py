"""`build`: the output site, one folder per batch plus the index, written all or nothing.

load → analyze → render → write. Everything is rendered into a staging folder inside the output and moved
into place only when every input has succeeded, so a bad input never leaves a half-written site. Renderers
are imported only for the formats asked for: a markdown-only build never loads Altair or Jinja2.
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
from ..catalogue.formats import FORMATS
from ..config import Thresholds
from ..errors import BadInput
from ..io import LoadOptions, Source, load, sources
from ..model import Report
from ..render import RenderOptions, render
from ..site import index_json
from ..site.cache import cache_entry, cached_row, options_fingerprint, step_key
from ..site.layout import CACHE_FILE, RESERVED
from ..site.publish import (
    check_replaceable,
    check_target,
    move_into,
    staging,
    write_files,
)
from .executors import Progress, analyze_all, session


@dataclass
class BuildOptions:
    load: LoadOptions = field(default_factory=LoadOptions)
    thresholds: Thresholds = field(default_factory=Thresholds)
    formats: tuple[str, ...] = tuple(FORMATS)
    render: RenderOptions = field(default_factory=RenderOptions)
    jobs: int = 1
    executor: str = "local"  # "local" (in-process or --jobs processes) or "ray" (executors.EXECUTORS)
    ray_address: str | None = None  # --ray-address: None starts a local Ray on demand


@dataclass
class BuildResult:
    """What a build did: every run's index row (input order), the steps where the run changed, the run's verdict over its
    steps (None under two steps), how many steps it analysed and reused, how long it took."""

    rows: list[dict]
    change_steps: list[dict]
    run: dict | None
    analysed: int
    reused: int
    seconds: float


RAY_CHUNK = 256  # steps in flight at once on Ray: enough to keep a cluster busy, a few hundred MB of Reports

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
    tried: dict[str, int] = {}  # per name, the last suffix tried: the next one starts there (linear, not quadratic)
    out = []
    for rid in (safe_run_id(n) for n in names):
        n = tried.get(rid.lower(), 1)
        candidate = _candidate(rid, n)
        while candidate.lower() in taken:
            n += 1
            candidate = _candidate(rid, n)
        tried[rid.lower()] = n
        if given and candidate != rid:
            raise BadInput("--run-id", f"'{rid}' is given twice")
        taken.add(candidate.lower())
        out.append(candidate)
    return out


def _candidate(rid: str, n: int) -> str:
    """The n-th name a run id may take: itself, then rid-2, rid-3, ... (cut to stay within MAX_RUN_ID)."""
    return rid if n == 1 else f"{rid[:MAX_RUN_ID - len(str(n)) - 1]}-{n}"


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
    return analyze(load(src, opts.load), opts.thresholds, run_id=run_id)


def analyze_and_render(analyse, opts: BuildOptions, src: Source, run_id: str) -> tuple[dict, dict[str, str]]:
    """One step's whole work, wherever it runs (this process, a --jobs worker, a Ray task): its analysis, its
    index row and its rendered files, so rendering is spread over the workers too. `analyse` is passed rather
    than looked up so that a worker runs the same function as the caller."""
    report = analyse(opts, src, run_id)
    return run_row(report), render("run", report, opts.formats, opts.render)


def cache_options(opts: BuildOptions) -> str:
    """Every option that changes what a run folder holds (not the timestamp, not how the work is spread)."""
    return options_fingerprint({"load": opts.load.to_dict(), "thresholds": opts.thresholds.to_dict(),
                                "formats": opts.formats, "notes": opts.render.notes_md, "base_url": opts.render.base_url,
                                "self_contained": opts.render.self_contained})


def build(paths: list[Path], out: Path, opts: BuildOptions, run_ids: list[str] | None = None,
          progress: Progress | None = None) -> BuildResult:
    """Analyse every batch under the inputs (a run folder: one per step), render into a staging folder, then
    move the results into `out`. A step whose run folder a previous build wrote from the same input, options
    and tool is reused as it is (build/cache.py); the index is rewritten from every step's row."""
    start = time.monotonic()
    check_target(out)  # before the analysis: refusing after minutes of work would waste them
    found, ids = expand(paths, run_ids, opts.load.format_hint)
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
        done_rows = [r for r in rows if r is not None]  # every step, cached or analysed
        index = index_from_rows(done_rows)
        write_files(folder, {**render("index", index, opts.formats, opts.render), index_json.INDEX_JSON: index_json.text(index)})
        move_into(folder, out)
    return BuildResult(done_rows, (index["trend"] or {}).get("change_steps", []), index["run"], len(todo),
                       len(found) - len(todo), time.monotonic() - start)


def _offset(progress: Progress, offset: int, total: int, done: int, _chunk_total: int) -> None:
    progress(offset + done, total)


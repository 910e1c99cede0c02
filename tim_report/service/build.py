"""`build`: the output site, one folder per batch plus the index, written all or nothing.

load → analyze → render → write. Everything is rendered into a staging folder inside the output and moved
into place only when every input has succeeded, so a bad input never leaves a half-written site. Renderers
are imported only for the formats asked for: a markdown-only build never loads Altair or Jinja2.

A step of a run folder (a folder argument holding several steps) that cannot be read (an empty or truncated
file, a FIFO, a step folder with no rank file) does not stop the run: it is left out, said in the index (a row
saying why; index.json's `unreadable`) and in `BuildResult.unreadable`, and the rest is built. A file given on
its own, or a run whose every step is unreadable, is bad input as before: nothing is written.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..analysis import analyze
from ..analysis.run_index import index_from_rows, run_row
from ..catalogue.findings import INPUT_PROBLEM
from ..catalogue.formats import FORMATS
from ..config import Thresholds
from ..errors import BadInput
from ..io import LoadOptions, Source, Unreadable, load, scan
from ..model import BatchReport
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

Skip = Callable[[Path, BadInput], None]  # a step left out of a build: its path and why (watch says it)


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
    """What a build did: every run's index row (input order, as its run reads it: run_index.in_run), the steps where
    the run changed, the run's verdict over its steps (None under two steps), how many steps it analysed and reused,
    how long it took, and the steps of a run folder it could not read (index.json's `unreadable`: id, step, path,
    reason; and `file`, the path as given)."""

    rows: list[dict]
    change_steps: list[dict]
    run: dict | None
    analysed: int
    reused: int
    seconds: float
    unreadable: list[dict] = field(default_factory=list)


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


@dataclass
class Expanded:
    """The batches under the command-line paths with their run ids, the steps of run folders that cannot be read
    (ids too), and which run ids belong to a run folder (a step of one that fails later is left out, not fatal)."""

    found: list[Source]
    ids: list[str]
    bad: list[Unreadable]
    in_run: frozenset[str]


def expand(paths: list[Path], given: list[str] | None, format_hint: str | None = None,
           skip: Skip | None = None) -> Expanded:
    """Every batch under the command-line paths (a run folder gives one per step) and its run id.

    `--run-id` is given once per path; a path holding several steps prefixes each step's id with it. Each Source
    carries `shown`, the name pages and the cache key give it (`shown_path`). With `skip`, a path that cannot be read
    is handed to it and left out; without, it is bad input.
    """
    if given and len(given) != len(paths):
        raise BadInput("--run-id", f"given {len(given)} times for {len(paths)} inputs")
    steps: list[tuple[Source | Unreadable, bool]] = []  # each step, and whether it is one of a run folder's
    names = []
    for i, path in enumerate(paths):
        try:
            batches, unreadable = scan(path, format_hint)
        except BadInput as exc:
            if skip is None:
                raise
            skip(path, exc)
            continue
        several = len(batches) + len(unreadable) > 1
        each: list[Source | Unreadable] = [*batches, *unreadable]
        for st in (replace(x, shown=shown_path(x.origin)) for x in each):
            steps.append((st, several))
            names.append(st.run_id if not given else given[i] if not several else f"{given[i]}-{st.run_id}")
    ids = unique_ids(names, given=bool(given))
    found = [(st, rid) for (st, _), rid in zip(steps, ids) if isinstance(st, Source)]
    bad = [replace(st, run_id=rid) for (st, _), rid in zip(steps, ids) if isinstance(st, Unreadable)]
    in_run = frozenset(rid for (_, several), rid in zip(steps, ids) if several)
    return Expanded([s for s, _ in found], [rid for _, rid in found], bad, in_run)


def shown_path(origin: Path) -> str:
    """How pages and the cache name a step: its file's or step folder's own name (`step_7`, `global_step_3.pt`), so
    the site is the same whichever working directory, spelling (`inc/run`, `/abs/inc/run`) or place of the run folder
    built it, and whether `build RUN` or `watch` (which builds step folders one by one) wrote it."""
    return Path(os.path.abspath(origin)).name


def analyze_file(opts: BuildOptions, src: Source, run_id: str) -> BatchReport:
    """One step's report; a batch the gate finds unusable (`unusable_input`, which `check` refuses) is bad input here
    too: a file on its own is exit 2 with nothing written, a run folder's step its red row (exit 3)."""
    batch = load(src, opts.load)
    try:
        report = analyze(batch, opts.thresholds, run_id=run_id)
    except BadInput as exc:  # the analysis names the batch's file as pages do; a message names it as it was given
        if exc.source == src.shown:
            raise BadInput(src.origin, exc.problem) from None
        raise
    unusable = next((f for f in (report.diagnosis or {}).get("findings", []) if f["id"] == INPUT_PROBLEM), None)
    if unusable is not None:
        raise BadInput(src.origin, unusable["title"])
    return report


def analyze_and_render(analyse, opts: BuildOptions, in_run: frozenset[str], src: Source,
                       run_id: str) -> tuple[dict, dict[str, str]] | BadInput:
    """One step's whole work, wherever it runs (this process, a --jobs worker, a Ray task): its analysis, its
    index row and its rendered files, so rendering is spread over the workers too. `analyse` is passed rather
    than looked up so that a worker runs the same function as the caller. A step of a run folder (`in_run`) that
    is bad input returns its BadInput, so that the rest of the run goes on."""
    try:
        report = analyse(opts, src, run_id)
    except BadInput as exc:
        if run_id not in in_run:
            raise
        return exc
    return run_row(report), render("run", report, opts.formats, opts.render)


def cache_options(opts: BuildOptions) -> str:
    """Every option that changes what a run folder holds (not the timestamp, not how the work is spread)."""
    return options_fingerprint({"load": opts.load.to_dict(), "thresholds": opts.thresholds.to_dict(),
                                "formats": opts.formats, "notes": opts.render.notes_md, "base_url": opts.render.base_url,
                                "self_contained": opts.render.self_contained})


def build(paths: list[Path], out: Path, opts: BuildOptions, run_ids: list[str] | None = None,
          progress: Progress | None = None, before_publish: Callable[[BuildResult], None] | None = None,
          skip: Skip | None = None) -> BuildResult:
    """Analyse every batch under the inputs (a run folder: one per step), render into a staging folder, then
    move the results into `out`. A step whose run folder a previous build wrote from the same input, options
    and tool is reused as it is (site/cache.py); the index is rewritten from every step's row. `before_publish`
    runs with the result before anything moves into `out`: when it raises, nothing is published.

    `skip` (watch's): a step that is bad input is handed to it as it is met (its path, the problem) and left out of
    the site, not listed as unreadable; the rest is built in the same pass. BadInput when no step is left."""
    start = time.monotonic()
    check_target(out)  # before the analysis: refusing after minutes of work would waste them
    ex = expand(paths, run_ids, opts.load.format_hint, skip)
    found, ids = ex.found, ex.ids
    in_run = ex.in_run if skip is None else frozenset(ids)  # with skip, no step stops the others
    bad: list[Unreadable] = []
    said: set[str] = set()  # the run ids a skip was said for, in this process as their analysis failed

    def drop(u: Unreadable) -> None:
        if skip is None:
            bad.append(u)
        elif u.run_id not in said:
            said.add(u.run_id)
            skip(u.origin, BadInput(u.origin, u.reason))

    for u in ex.bad:
        drop(u)
    fingerprint = cache_options(opts)
    keys: list[str | None] = [_key(s, rid, fingerprint, in_run, drop) for s, rid in zip(found, ids)]
    rows: list[dict | None] = [cached_row(out, rid, k, opts.formats) if k else None for rid, k in zip(ids, keys)]
    todo = [i for i, r in enumerate(rows) if r is None and keys[i] is not None]
    check_replaceable(out, [ids[i] for i in todo])  # a user's file in a run folder: refused before the work, too
    task = functools.partial(analyze_and_render, analyze_file, opts, in_run)
    if skip is not None and opts.executor == "local" and opts.jobs <= 1:  # in this process: said as each one fails
        task = functools.partial(_telling, task, drop)
    with staging(out) as folder, session(opts.executor if todo else "local", opts.jobs, opts.ray_address):
        # in chunks, so that at most a chunk of steps' rendered files is in memory at once
        chunk = max(RAY_CHUNK if opts.executor == "ray" else 32, 8 * opts.jobs)
        for lo in range(0, len(todo), chunk):
            part = todo[lo:lo + chunk]
            done = functools.partial(_offset, progress, lo, len(todo)) if progress else None
            steps = analyze_all(task, [found[i] for i in part], [ids[i] for i in part], opts.jobs, done, opts.executor,
                                opts.ray_address)
            for i, result in zip(part, steps):
                if isinstance(result, BadInput):
                    drop(_unreadable(found[i], ids[i], result))
                    continue
                row, files = result
                rows[i] = row
                write_files(folder / ids[i], {**files, CACHE_FILE: cache_entry(keys[i] or "", row)})
        done_rows = [r for r in rows if r is not None]  # every step, cached or analysed
        bad.sort(key=lambda u: (u.step is None, u.step or 0, u.run_id))
        if not done_rows:  # nothing to build: bad input, as a single bad file is
            raise BadInput(bad[0].origin, bad[0].reason) if bad else BadInput(out, "no step left to build")
        index = {**index_from_rows(done_rows), "unreadable": [u.entry() for u in bad]}
        write_files(folder, {**render("index", index, opts.formats, opts.render), index_json.INDEX_JSON: index_json.text(index)})
        reused = len(found) - len(todo) - keys.count(None)
        built = BuildResult(index["runs"], (index["trend"] or {}).get("change_steps", []), index["run"],
                            len(done_rows) - reused, reused, time.monotonic() - start,
                            [{**u.entry(), "file": str(u.origin)} for u in bad])
        if before_publish is not None:  # the caller's own last step that can fail (the CLI's summary on stdout)
            before_publish(built)
        move_into(folder, out)
    return built


def _key(src: Source, rid: str, fingerprint: str, in_run: frozenset[str],
         drop: Callable[[Unreadable], None]) -> str | None:
    """The step's cache key (site/cache.py); None, with the step dropped (left out, said), when a run folder's step
    cannot be hashed (a FIFO or device among its files, a file that vanished)."""
    try:
        return step_key(src.paths, f"{src.framework}\0{src.shown or src.origin}", rid, fingerprint)
    except BadInput as exc:
        if rid not in in_run:
            raise
        drop(_unreadable(src, rid, exc))
        return None


def _telling(task: Callable, drop: Callable[[Unreadable], None], src: Source, rid: str):
    """`task`, with a step that fails dropped at once (watch says its skip as it is met, not after the pass)."""
    result = task(src, rid)
    if isinstance(result, BadInput):
        drop(_unreadable(src, rid, result))
    return result


def _unreadable(src: Source, rid: str, exc: BadInput) -> Unreadable:
    u = Unreadable.of(src.origin, exc)
    return replace(u, step=src.step, run_id=rid, shown=src.shown)


def _offset(progress: Progress, offset: int, total: int, done: int, _chunk_total: int) -> None:
    progress(offset + done, total)


"""The per-step cache: a step whose input, options and tool are unchanged keeps its run folder as it is.

Each run folder a build writes holds `.tim-report-cache.json`: the step's key and its index row. The key
hashes the input's bytes (every file of the step), its framework and the name the page gives it (its file's or
step folder's own name, `service.build.shown_path`: never the path as spelled, so the same run reached from another
working directory, spelled `inc/run` or `/abs/inc/run`, moved elsewhere, or written by `watch`, keeps every key),
the run id,
every option that changes what is written (keys, meta, thresholds, formats, notes, base URL, ...; not `--timestamp`, which only stamps
pages) and the tool itself (its version and a digest of its own code and templates, so a changed
tim-report never serves a page an older one wrote). A rebuild re-analyses only the steps whose key
changed or whose folder lost a file, and rewrites the index from the rows.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..model import dumps, row_problem
from .layout import CACHE_FILE, run_files

MAX_CACHE_BYTES = 1 << 20  # a row is about 1 KB; anything bigger is not one of ours
PACKAGE = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def tool_fingerprint() -> str:
    """The version and a digest of the package's code and templates (installed or a checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        h = hashlib.sha256(version("tim-report").encode())
    except PackageNotFoundError:  # a bare checkout on the path: the code digest below still tells versions apart
        h = hashlib.sha256(b"checkout")
    for p in sorted(PACKAGE.rglob("*")):
        if p.is_file() and p.suffix in (".py", ".html", ".css", ".js") and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(PACKAGE)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def options_fingerprint(options: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()


def step_key(paths: tuple[Path, ...], source: str, run_id: str, options: str) -> str:
    """The key of one step: its files' bytes and names, `source` (who wrote them and where they sit in the run: the
    page names both), the run id, the options' fingerprint and the tool's."""
    h = hashlib.sha256()
    for part in (tool_fingerprint(), options, run_id, source):
        h.update(part.encode("utf-8", "replace") + b"\0")
    for p in paths:
        h.update(p.name.encode("utf-8", "replace") + b"\0")
        h.update(file_digest(p))
    return h.hexdigest()


DIGESTS: dict[tuple, bytes] = {}  # this process's digests by file identity and state (a watch's rounds reuse them)
MEMO_MAX = 1 << 20  # entries (about 200 bytes each) before the memos start over
SETTLED_NS = 2_000_000_000  # a file is remembered only once its times are older than this: a write within the same
# clock tick as the one remembered (file times move in ticks of a few ms) could leave them unchanged ("racy git")


def settled(*infos: os.stat_result) -> bool:
    """Every one of these last changed long enough ago that a change now would show in its times."""
    return all(max(i.st_mtime_ns, i.st_ctime_ns) < time.time_ns() - SETTLED_NS for i in infos)


def file_digest(path: Path) -> bytes:
    """SHA-256 of a regular file's bytes. A FIFO, device or socket is refused before a byte is read (reading one
    could block, or never end); it is opened without blocking so that the check is of the file actually read.

    Remembered for this process by the file's device, inode, size, mtime and ctime (any write changes the ctime), once
    they are `settled`: a `watch` round hashes only the files that changed since its last, not every step of a long run
    again."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise BadInput(path, f"cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(path, "is not a regular file (a FIFO, device, socket or folder): tim-report reads files only")
        state = (os.path.abspath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if state in DIGESTS:
            return DIGESTS[state]
        try:
            digest = hashlib.file_digest(f, "sha256").digest()
        except OSError as exc:
            raise BadInput(path, f"cannot read: {exc.strerror or exc}") from None
    if settled(info):
        if len(DIGESTS) >= MEMO_MAX:
            DIGESTS.clear()
        DIGESTS[state] = digest
    return digest


ROWS: dict[tuple, dict] = {}  # this process's cached rows by run folder and cache file state (a watch's rounds)


def cached_row(out: Path, run_id: str, key: str, formats: tuple[str, ...]) -> dict | None:
    """The row a previous build left for this step, when its key matches and its folder is complete; else None.

    Remembered for this process by the run folder's and its cache file's state once `settled` (a file added, removed or
    replaced changes the folder's times; a run folder is replaced whole when rebuilt): a `watch` round reads no unchanged
    step's folder again. The row is shared: read it, never change it."""
    folder = out / run_id
    try:
        where, info = folder.lstat(), (folder / CACHE_FILE).lstat()  # never follows a link
    except OSError:
        return None
    state = (os.path.abspath(folder), key, formats, where.st_ino, where.st_mtime_ns, where.st_ctime_ns, info.st_ino,
             info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    if state in ROWS:
        return ROWS[state]
    row = _read_row(folder, run_id, key, formats)
    if row is not None and settled(where, info):
        if len(ROWS) >= MEMO_MAX:
            ROWS.clear()
        ROWS[state] = row
    return row


def _read_row(folder: Path, run_id: str, key: str, formats: tuple[str, ...]) -> dict | None:
    if folder.is_symlink() or not folder.is_dir():
        return None
    if any(not (folder / name).is_file() for name in run_files(formats)):
        return None
    try:
        path = folder / CACHE_FILE
        info = path.lstat()  # never follows a link; a FIFO or device (which would block or never end) is not ours
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CACHE_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested past the parser's limit
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    row = data.get("row")
    if not isinstance(row, dict) or row_problem(row) is not None or row["id"] != run_id:
        return None
    return row


def cache_entry(key: str, row: dict) -> str:
    return dumps({"key": key, "row": row}, compact=True)

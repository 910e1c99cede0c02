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


def file_digest(path: Path) -> bytes:
    """SHA-256 of a regular file's bytes. A FIFO, device or socket is refused before a byte is read (reading one
    could block, or never end); it is opened without blocking so that the check is of the file actually read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise BadInput(path, f"cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(path, "is not a regular file (a FIFO, device, socket or folder): tim-report reads files only")
        try:
            return hashlib.file_digest(f, "sha256").digest()
        except OSError as exc:
            raise BadInput(path, f"cannot read: {exc.strerror or exc}") from None


def cached_row(out: Path, run_id: str, key: str, formats: tuple[str, ...]) -> dict | None:
    """The row a previous build left for this step, when its key matches and its folder is complete; else None."""
    folder = out / run_id
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

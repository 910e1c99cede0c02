"""Output that is all or nothing, and that never touches what tim-report did not write.

A site folder carries a marker, `.tim-report.json`, listing the top-level entries tim-report wrote
there. A build renders everything into a staging folder inside the site (so every rename stays on one filesystem,
even when the site is a mount point), then moves each entry into place with renames, so a reader never sees a
half-written run: the old entry is renamed aside, the new one renamed in, the old one deleted. An existing entry
that the marker does not list (a user's `docs/`), a symlink, or a non-empty folder without a marker is refused
before anything moves. A run folder is replaced only while it holds nothing but the files a run folder gets
(`RUN_FILES`), the shared `assets/` folder only while it holds nothing but `ASSET_FILES`: a user's file inside
one is refused by name, before anything moves.

Other processes may be there too (a second build into the same folder, a second container on the same volume):
  - the marker is updated and the entries moved under a lock on the site (`.tim-report.lock`), the marker first, so
    an entry in place is always listed, and the index files last, so an index never links a folder not yet moved;
  - every file is created exclusive and no-follow under a name this process chose (site/safe_fs.py);
  - a staging folder holds a lock file its build keeps locked: a staging folder whose lock can be taken is a dead
    build's (kill -9), whatever PID namespace it ran in; the next build puts back any entry it had renamed aside,
    then removes it. Nothing else is ever removed as stale: a folder without that lock is not provably ours.
A failed write (full disk, read-only folder) or SIGTERM / SIGINT removes the staging folder.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import BadInput
from .layout import (
    ASSET_FILES,
    ASSETS,
    INDEX_FILES,
    MARKER,
    OUTPUT_LOCK,
    RUN_FILES,
    STAGING_LOCK,
    STAGING_PREFIX,
    is_tool_entry,
)
from .safe_fs import create_locked, create_new, locked, move, read_regular, remove, replace_file, try_lock

MAX_MARKER_BYTES = 1 << 20  # a marker lists one name a line: far below this
OLD = ".old-"  # an entry renamed aside into the staging folder while its replacement moves in
SPACE_MARGIN = 16 << 20  # bytes kept free beyond what a write needs


def check_target(out: Path) -> None:
    """Refuse an output folder that cannot be tim-report's: '/', home, a file, or someone else's non-empty folder."""
    try:
        resolved = out.resolve()
        if resolved == Path(resolved.anchor) or resolved == Path.home().resolve():
            raise BadInput(out, "refusing to write a site into the root or home folder; name a folder for it")
        if out.exists() and not out.is_dir():
            raise BadInput(out, "output path exists and is not a folder")
        if out.is_dir() and read_marker(out) is None and any(not is_tool_entry(p.name) for p in out.iterdir()):
            raise BadInput(out, f"is not empty and was not written by tim-report (no {MARKER}); refusing to write into "
                                "it: choose a new or empty folder")
    except OSError as exc:  # a name over 255 bytes, a path over PATH_MAX, a folder we may not list
        raise BadInput(out, f"cannot be used as the output folder ({exc.strerror or exc})") from None


def read_marker(out: Path) -> set[str] | None:
    """The top-level entries the marker says tim-report wrote; None when there is no marker. A marker that is a
    symlink, a FIFO or a device is refused: nothing planted there is trusted."""
    data = read_regular(out / MARKER, MAX_MARKER_BYTES)
    if data is None:
        return None
    try:
        return {str(n) for n in json.loads(data).get("written", [])}
    except (ValueError, AttributeError, TypeError, RecursionError):
        return set()


def owned(out: Path) -> set[str]:
    """The top-level entries the marker says tim-report wrote (empty for a new folder)."""
    return read_marker(out) or set()


@contextlib.contextmanager
def staging(out: Path) -> Iterator[Path]:
    """A staging folder inside `out`, proven ours and live by a lock held until it is removed, whatever happens."""
    check_target(out)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        remove_stale(out)
    except OSError as exc:
        raise BadInput(out, f"cannot write here: {exc.strerror or exc}") from None
    tmp, lock = None, -1
    try:
        with _signals_held():  # a signal before `tmp` is known would leave a folder this `finally` cannot remove
            tmp, lock = _new_staging(out)
        yield tmp
    except OSError as exc:  # a write into staging failed: full disk, quota, permissions
        raise BadInput(exc.filename or out, f"cannot write the output ({exc.strerror or exc}); nothing was changed") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if lock >= 0:
            os.close(lock)
        if created:  # only while empty: never another build's staging folder or a moved entry
            with contextlib.suppress(OSError):
                out.rmdir()


def _new_staging(out: Path) -> tuple[Path, int]:
    """A new staging folder and the descriptor holding its lock."""
    tmp = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
    try:
        return tmp, create_locked(tmp / STAGING_LOCK, tmp.name.encode())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_stale(out: Path) -> None:
    """Remove the staging folders of builds that died (their lock can be taken), after putting back any entry such a
    build had renamed aside and not yet replaced. A folder without a lock holding its own name is left alone."""
    candidates = [p for p in out.iterdir() if p.name.startswith(STAGING_PREFIX) and p.is_dir() and not p.is_symlink()]
    if not candidates:
        return
    with locked(out / OUTPUT_LOCK):
        for folder in candidates:
            fd = try_lock(folder / STAGING_LOCK, folder.name.encode())
            if fd is None:
                continue
            try:
                for aside in folder.glob(f"{OLD}*"):
                    if not os.path.lexists(out / aside.name[len(OLD):]):
                        move(aside, out / aside.name[len(OLD):])
                shutil.rmtree(folder)
            finally:
                os.close(fd)


def write_files(folder: Path, files: dict[str, str]) -> None:
    """Write rendered texts into a staging folder, after checking the disk has room for all of them."""
    data = {name: text.encode("utf-8") for name, text in files.items()}
    folder.mkdir(parents=True, exist_ok=True)
    need = sum(len(b) for b in data.values()) + SPACE_MARGIN
    free = shutil.disk_usage(folder).free
    if free < need:
        raise OSError(errno.ENOSPC, f"no space left on device: {need >> 20} MiB needed, {free >> 20} MiB free", str(folder))
    for name, payload in data.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        create_new(path, payload)


def move_into(staging_dir: Path, out: Path) -> None:
    """Move each staged entry into `out`: only over entries tim-report wrote, each by an atomic rename, under the
    site's lock; the marker is updated first and the index files are moved last."""
    names = sorted((p.name for p in staging_dir.iterdir() if p.name != STAGING_LOCK), key=lambda n: (n in INDEX_FILES, n))
    check_replaceable(out, names)  # before taking the lock: a refusal leaves the folder as it was
    try:
        out.mkdir(parents=True, exist_ok=True)
        with locked(out / OUTPUT_LOCK), _signals_held():  # Ctrl-C or SIGTERM between two renames waits for the move
            mine = check_replaceable(out, names)  # again under the lock: another build may have moved since
            _write_marker(out, mine | set(names))
            for name in names:
                _replace(staging_dir / name, out / name, staging_dir)
    except OSError as exc:
        raise BadInput(exc.filename or out, f"cannot move the output into place ({exc.strerror or exc})") from None


def check_replaceable(out: Path, names: list[str]) -> set[str]:
    """Refuse, before anything moves, to replace an entry of `out` tim-report did not write: one the marker does
    not list, a symlink, or a folder holding anything a run folder never gets. Returns the marker's names."""
    mine = owned(out)
    for name in names:
        target = out / name
        if target.is_symlink():
            raise BadInput(target, "is a symbolic link; refusing to replace it")
        if target.exists() and name not in mine:
            raise BadInput(target, "exists and was not written by tim-report; refusing to replace it "
                                   "(choose another output folder or --run-id)")
        if target.is_dir():
            _refuse_foreign(target)
    return mine


def _refuse_foreign(folder: Path, name: str | None = None) -> None:
    """A run folder tim-report wrote holds only RUN_FILES, and the assets folder only ASSET_FILES, as plain files;
    anything else is someone's. `name`: the folder's name in the site (the one it had before being renamed aside)."""
    allowed = ASSET_FILES if (name or folder.name) == ASSETS else RUN_FILES
    for entry in sorted(folder.iterdir()):
        if entry.name not in allowed or entry.is_symlink() or not entry.is_file():
            raise BadInput(entry, f"is not a file tim-report writes, so {folder} is not replaced; move it out of "
                                  f"{folder.name}/ and build again, or choose another output folder or --run-id")


def _replace(new: Path, target: Path, scratch: Path) -> None:
    """Put `new` at `target`; the old entry is renamed aside first and deleted last. A folder that gained a
    foreign file since the check is put back rather than deleted."""
    old = scratch / f"{OLD}{target.name}"
    if os.path.lexists(target):
        move(target, old)
        if old.is_dir():
            try:
                _refuse_foreign(old, target.name)
            except BadInput:
                move(old, target)
                raise
    try:
        move(new, target)
    except OSError:
        if os.path.lexists(old):
            move(old, target)
        raise
    remove(old)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    held = {signal.SIGINT, signal.SIGTERM}
    if not hasattr(signal, "pthread_sigmask"):  # not on Windows: the moves are only a few renames
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _write_marker(out: Path, names: set[str]) -> None:
    text = json.dumps({"tool": "tim-report", "written": sorted(names)}, indent=1) + "\n"
    replace_file(out / MARKER, text.encode("utf-8"))

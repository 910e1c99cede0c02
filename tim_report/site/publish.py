"""Output that is all or nothing, and that never touches what tim-report did not write.

A site folder carries a marker, `.tim-report.json`, listing the top-level entries tim-report wrote
there. A build renders everything into a staging folder beside the site (same filesystem), then
moves each entry into place with renames, so a reader never sees a half-written run: the old entry is
renamed aside, the new one renamed in, the old one deleted. An existing entry that the marker does not
list (a user's `docs/`), a symlink, or a non-empty folder without a marker is refused before anything
moves. A run folder is replaced only while it holds nothing but the files a run folder gets
(`RUN_FILES`), the shared `assets/` folder only while it holds nothing but `ASSET_FILES`: a user's file inside
one is refused by name, before anything moves. A failed write (full disk, read-only folder) or SIGTERM / SIGINT
removes the staging folder; one left behind by `kill -9` is removed by the next build beside it.
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
from .layout import ASSET_FILES, ASSETS, MARKER, RUN_FILES, STAGING_PREFIX

SPACE_MARGIN = 16 << 20  # bytes kept free beyond what a write needs


def check_target(out: Path) -> None:
    """Refuse an output folder that cannot be tim-report's: '/', home, a file, or someone else's non-empty folder."""
    resolved = out.resolve()
    if resolved == Path(resolved.anchor) or resolved == Path.home().resolve():
        raise BadInput(out, "refusing to write a site into the root or home folder; name a folder for it")
    if out.exists() and not out.is_dir():
        raise BadInput(out, "output path exists and is not a folder")
    if out.is_dir() and not (out / MARKER).is_file() and any(out.iterdir()):
        raise BadInput(out, f"is not empty and was not written by tim-report (no {MARKER}); refusing to write into it: "
                            "choose a new or empty folder")


def owned(out: Path) -> set[str]:
    """The top-level entries the marker says tim-report wrote (empty for a new folder)."""
    try:
        data = json.loads((out / MARKER).read_text(encoding="utf-8"))
        return {str(n) for n in data.get("written", [])}
    except (OSError, ValueError, AttributeError):
        return set()


@contextlib.contextmanager
def staging(out: Path) -> Iterator[Path]:
    """A temporary folder beside `out` (same filesystem), removed afterwards whatever happens."""
    check_target(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(out.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=out.parent))
    except OSError as exc:
        raise BadInput(out, f"cannot write here: {exc.strerror or exc}") from None
    try:
        yield tmp
    except OSError as exc:  # a write into staging failed: full disk, quota, permissions
        raise BadInput(exc.filename or out, f"cannot write the output ({exc.strerror or exc}); nothing was changed") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
        path.write_bytes(payload)


def move_into(staging_dir: Path, out: Path) -> None:
    """Move each staged entry into `out`: only over entries tim-report wrote, each by an atomic rename."""
    names = sorted(p.name for p in staging_dir.iterdir())
    mine = check_replaceable(out, names)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with _signals_held():  # a Ctrl-C or SIGTERM between two renames waits until the move is done
            for name in names:
                _replace(staging_dir / name, out / name, staging_dir)
            _write_marker(out, mine | set(names))
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
    old = scratch / f".old-{target.name}"
    if target.exists():
        os.rename(target, old)
        if old.is_dir():
            try:
                _refuse_foreign(old, target.name)
            except BadInput:
                os.rename(old, target)
                raise
    try:
        os.rename(new, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:  # staging beside `out` is the same filesystem unless `out` is a mount point
            if old.exists():
                os.rename(old, target)
            raise
        shutil.move(str(new), str(target))
    if old.is_dir():
        shutil.rmtree(old)
    elif old.exists():
        old.unlink()


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
    tmp = out / (MARKER + ".tmp")
    tmp.write_text(json.dumps({"tool": "tim-report", "written": sorted(names)}, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out / MARKER)


def _remove_stale(parent: Path) -> None:
    """Staging folders whose build was killed (its process is gone): remove them."""
    for p in parent.glob(f"{STAGING_PREFIX}*"):
        pid = p.name[len(STAGING_PREFIX):].split("-", 1)[0]
        if p.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

"""The GGUF cache: one converted model folder per GGUF file's sha256, written once, checked each time it is reused.

- One conversion of a file at a time: a conversion holds the key's lock (`.<key>.lock`, fcntl.flock, freed by the kernel
  when its process dies, even by kill -9); a second process converting the same file waits for it, then reuses its
  folder instead of converting again (twice the memory and disk).
- Staging folders a killed conversion left are removed as soon as their key's lock can be taken (their process is
  gone), whatever their age; one without a lock file (an older tim-report's) after STALE_STAGING_S.
- The folder is renamed into place whole, with its marker listing every file it wrote (bytes, sha256, mtime). On reuse
  the folder must hold exactly those files, each of its size; the small ones (configs, tokenizer, chat template) are
  hashed again every time, a weight file only when its modification time changed. A folder changed after its marker is
  one line naming the file, never loaded.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput

MARKER = "tim-report-gguf.json"  # written last into the staging folder: what the cache folder was made from
CACHE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}  # the cache's fault, not the file's
STALE_STAGING_S = 86400  # a staging folder without a lock file this old is a killed conversion's
HASH_ALWAYS_BYTES = 64 << 20  # files up to this size are hashed at every reuse; larger (the weights) when touched


def cache_root() -> Path:
    """`$TIM_REPORT_CACHE/gguf`, else `$XDG_CACHE_HOME/tim-report/gguf`, else `~/.cache/tim-report/gguf`."""
    if os.environ.get("TIM_REPORT_CACHE"):
        return Path(os.environ["TIM_REPORT_CACHE"]) / "gguf"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tim-report" / "gguf"


def reuse(key: str) -> Path | None:
    """The cache folder of `key` when a whole conversion of it is there and unchanged; None when there is none yet.
    BadInput for a folder under that name that tim-report did not finish, or that changed after its marker."""
    final = cache_root() / key
    if not (final / MARKER).is_file():
        if final.exists() or final.is_symlink():
            raise BadInput(final, "is in tim-report's GGUF cache but was not written by it (no tim-report-gguf.json): "
                                  "remove it and run again")
        return None
    _check_unchanged(final)
    return final


@dataclass
class Job:
    final: Path
    staging: Path | None  # None: another process finished the folder while this one waited

    def publish(self, record: dict) -> None:
        """The marker (with every file's bytes, sha256 and mtime), then the folder renamed into place in one step."""
        assert self.staging is not None
        files = {p.name: _file_record(p) for p in sorted(self.staging.iterdir())}
        (self.staging / MARKER).write_text(json.dumps({**record, "files": files}, indent=1) + "\n")
        os.rename(self.staging, self.final)


@contextlib.contextmanager
def conversion(key: str, waiting: Callable[[], None] | None = None) -> Iterator[Job]:
    """Hold `key`'s lock (waiting, after one `waiting()` call, while another process converts the same file), remove
    dead conversions' staging folders, and give a fresh staging folder, or the finished folder if one appeared."""
    root = cache_root()
    final = root / key
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = _lock_file(root, key)
    except OSError as exc:
        raise BadInput(root, f"cannot write the GGUF cache here ({exc.strerror or type(exc).__name__}): "
                             "set TIM_REPORT_CACHE to a writable folder") from None
    staging = None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(lock, fcntl.LOCK_EX)
        if reuse(key) is not None:
            yield Job(final, None)
            return
        _sweep(root, key)
        try:
            staging = Path(tempfile.mkdtemp(prefix=f".{key}.staging-", dir=root))
        except OSError as exc:
            raise BadInput(root, f"cannot write the GGUF cache here ({exc.strerror or type(exc).__name__}): "
                                 "set TIM_REPORT_CACHE to a writable folder") from None
        yield Job(final, staging)
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        os.close(lock)  # frees the lock


def _lock_file(root: Path, key: str) -> int:
    fd = os.open(root / f".{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "its lock file is not a regular file")
    return fd


def _sweep(root: Path, key: str) -> None:
    """Staging folders of conversions that are not running: this key's (its lock is ours), another key's whose lock
    can be taken now; one without a lock file after STALE_STAGING_S."""
    for old in root.glob(".*.staging-*"):
        other = old.name[1:].split(".staging-")[0]
        with contextlib.suppress(OSError):
            if other == key:
                shutil.rmtree(old, ignore_errors=True)
            elif (root / f".{other}.lock").is_file():
                fd = _lock_file(root, other)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    shutil.rmtree(old, ignore_errors=True)
                except BlockingIOError:
                    pass  # a live conversion's
                finally:
                    os.close(fd)
            elif time.time() - old.stat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(old, ignore_errors=True)


def _file_record(path: Path) -> dict:
    st = path.stat()
    return {"bytes": st.st_size, "sha256": _sha256(path), "mtime_ns": st.st_mtime_ns}


def _check_unchanged(final: Path) -> None:
    """BadInput naming the first file that differs from what the marker recorded (or the marker itself, unreadable)."""
    def changed(what: str) -> BadInput:
        return BadInput(final, f"was changed after tim-report wrote it ({what}): remove the folder and run again")

    try:
        files = json.loads((final / MARKER).read_text(encoding="utf-8"))["files"]
        assert isinstance(files, dict) and all(isinstance(v, dict) for v in files.values())
    except (OSError, ValueError, KeyError, TypeError, AssertionError, RecursionError):
        raise changed(f"{MARKER} does not list its files: written by an older tim-report, or edited") from None
    present = {p.name for p in final.iterdir()} - {MARKER}
    for name in sorted(present ^ set(files)):
        raise changed(f"{name} {'was added' if name in present else 'is missing'}")
    for name, want in files.items():
        path = final / name
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size != want.get("bytes"):
            raise changed(f"{name} is not the {want.get('bytes')}-byte file it wrote")
        if st.st_size <= HASH_ALWAYS_BYTES or st.st_mtime_ns != want.get("mtime_ns"):
            if _sha256(path) != want.get("sha256"):
                raise changed(f"{name}'s content differs")


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()

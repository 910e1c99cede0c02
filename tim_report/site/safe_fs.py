"""The file-system steps a build's writes are made of, each trusting nothing this process did not create.

    create_new(path, data)      a new file, exclusive and no-follow: a symlink or hard link planted there is refused,
                                never written through
    replace_file(path, data)    create_new on a per-process unique name beside `path`, then an atomic rename over it
    read_regular(path, limit)   a small regular file, opened no-follow and non-blocking (a FIFO never hangs)
    locked(path)                fcntl.flock on a no-follow regular file, held for the block
    create_locked / try_lock    a lock file that only ever appears already locked, and the test a second build makes
                                of it: a lock can be taken only once its holder is gone, whatever PID namespace it ran in
    move(src, dst)              os.rename, or a copy beside `dst` renamed into place when the two are on different
                                devices (EXDEV: a Docker volume, a mount point)
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import BadInput

try:
    import fcntl
except ImportError:  # not on Windows: no lock is taken, so no staging folder is ever judged stale
    fcntl = None  # type: ignore[assignment]

NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
NON_BLOCKING = getattr(os, "O_NONBLOCK", 0)


def unique_name(path: Path, what: str) -> Path:
    """A hidden name beside `path` no other process picks: this pid and 64 random bits."""
    hidden = path.name if path.name.startswith(".") else f".{path.name}"
    return path.with_name(f"{hidden}.{os.getpid()}.{secrets.token_hex(8)}.{what}")


def create_new(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Write a file that must not exist yet (O_EXCL never follows a symlink; a hard link is an existing name)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def replace_file(path: Path, data: bytes) -> None:
    """Put `data` at `path` atomically. Whatever is at `path` (a symlink, a hard link to someone's file) is replaced
    as a name, never written through."""
    tmp = unique_name(path, "tmp")
    create_new(tmp, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _open_regular(path: Path, flags: int) -> int:
    """A descriptor on the regular file at `path`; a symlink, FIFO, device or folder there is BadInput."""
    try:
        fd = os.open(path, flags | NO_FOLLOW | NON_BLOCKING, 0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise BadInput(path, "is not a regular file (a symbolic link, folder or device); refusing to use it") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(path, "is not a regular file (a FIFO, socket or device); refusing to use it")
    return fd


def read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of a small regular file, None when nothing is there."""
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BadInput(path, f"is over {limit} bytes, more than tim-report ever writes there; refusing to use it")
    return data


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created when missing) for the block; waits for its holder."""
    fd = _open_regular(path, os.O_RDWR | os.O_CREAT)  # read-write: NFS takes an exclusive flock only on one
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def create_locked(path: Path, content: bytes) -> int:
    """A new lock file holding `content`, locked before its name appears (it is written and locked under a unique
    name, then renamed), so no one can take it for a dead holder's. Returns the descriptor: the lock lives with it."""
    tmp = unique_name(path, "tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | NO_FOLLOW, 0o600)
    try:
        os.write(fd, content)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(tmp, path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return fd


def try_lock(path: Path, content: bytes) -> int | None:
    """The lock file at `path` locked by us, when it is a regular file holding `content` whose holder is gone;
    else None (absent, someone else's, or its holder alive). The caller closes the descriptor."""
    if fcntl is None:
        return None
    try:
        fd = _open_regular(path, os.O_RDWR)
    except (OSError, BadInput):
        return None
    try:
        if os.read(fd, len(content) + 1) == content:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
    except OSError:  # EWOULDBLOCK: a live process holds it
        pass
    os.close(fd)
    return None


def move(src: Path, dst: Path) -> None:
    """Rename `src` to `dst` (which must not exist). Across devices, copy it beside `dst` (same device as `dst`, so
    the last step is still one atomic rename), then remove `src`."""
    try:
        os.rename(src, dst)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    tmp = unique_name(dst, "copy")
    try:
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, tmp, symlinks=True)
        else:
            shutil.copy2(src, tmp, follow_symlinks=False)
        os.rename(tmp, dst)
    except BaseException:
        remove(tmp)
        raise
    remove(src)


def remove(path: Path) -> None:
    """Remove a file or a folder tree (symlinks inside are removed, never followed); nothing there is fine."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass

"""Where `save_step` writes, and how: the write rules of a site's `-o` for the file a training loop saves each step.

A training loop often writes onto a shared volume that other people (or other jobs) can write too, so:

- the step, rank and world size are checked (integers, in range, the rank inside the world, the world bounded by
  `config.MAX_WORLD_SIZE`) and the meta made JSON before anything is created: a refusal is one line of BadInput and
  leaves no folder behind;
- the folder the caller names is used as named (a link the user made there is the user's); below it, nothing is
  followed through a link tim-report did not create: the step folder `step_S/` is opened no-follow (a symlink or a
  file planted there is refused), and the file is created exclusive and no-follow under a name no other process picks
  (`.rank_R.npz.<pid>.<64 random bits>.tmp`), then renamed over `rank_R.npz` (a link planted there is replaced as a
  name, never written through);
- a failure of the disk (full, read-only, a quota) is BadInput naming the file, with nothing half-written left.
"""

from __future__ import annotations

import contextlib
import errno
import json
import operator
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import MAX_STEP, MAX_WORLD_SIZE
from ..config.bounds import META_MAX_DEPTH
from ..errors import BadInput

WHO = "save_step"
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
AT_FDS = os.open in os.supports_dir_fd and os.mkdir in os.supports_dir_fd  # POSIX; elsewhere by path


@dataclass(frozen=True)
class StepTarget:
    """The file one save writes: `root` as the caller named it, `folder` (step_S, or None for a named `.npz`) created
    here and never followed through a link, and the file's `name`."""

    root: Path
    folder: str | None
    name: str

    @property
    def path(self) -> Path:
        return self.root / self.folder / self.name if self.folder else self.root / self.name


def shown(value: Any) -> str:
    """A value as a message may quote it: short, on one line."""
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return text.encode("unicode_escape").decode("ascii")


def integer(name: str, value: Any, low: int, high: int) -> int:
    """An integer (Python's, numpy's, a one-element integer tensor) within low … high; anything else is BadInput.
    A float, even 2.0, is refused: step=2.9 must never become step_2."""
    if isinstance(value, bool):
        raise BadInput(WHO, f"{name}={value} is a bool, not an integer")
    try:
        number = operator.index(value)
    except (TypeError, ValueError, RuntimeError):
        raise BadInput(WHO, f"{name}={shown(value)} is not an integer ({type(value).__name__})") from None
    if not low <= number <= high:
        raise BadInput(WHO, f"{name}={shown(number)} is outside {low} … {high}")
    return number


def step_target(path: str | Path, step: Any, rank: Any, world_size: Any) -> tuple[StepTarget, int | None, int, int | None]:
    """Where the save goes and the step, rank and world size as checked integers; BadInput before anything exists."""
    try:
        text = os.fspath(path)
    except TypeError:
        raise BadInput(WHO, f"path={shown(path)} is not a path") from None
    if isinstance(text, bytes) or not text or "\0" in text:
        raise BadInput(WHO, f"path={shown(path)} is not a usable path (empty, bytes or holding a NUL byte)")
    rank = integer("rank", rank, 0, MAX_WORLD_SIZE - 1)
    if world_size is not None:
        world_size = integer("world_size", world_size, 1, MAX_WORLD_SIZE)
        if rank >= world_size:
            raise BadInput(WHO, f"rank {rank} is not in 0 … world_size - 1 ({world_size - 1})")
    if step is not None:
        step = integer("step", step, 0, MAX_STEP - 1)
    p = Path(text)
    if p.suffix.lower() == ".npz":
        return StepTarget(p.parent, None, p.name), step, rank, world_size
    if step is None:
        raise BadInput(WHO, f"{p} is a folder: give step= so the file can be named step_S/rank_R.npz")
    return StepTarget(p, f"step_{step}", f"rank_{rank}.npz"), step, rank, world_size


def check_meta(header: dict) -> str:
    """The file's header as JSON, made here so that a meta JSON cannot hold (nested past the recursion limit, a
    cycle) is refused before anything is created."""
    try:
        text = json.dumps(header, sort_keys=True, default=str)
    except (RecursionError, ValueError, TypeError) as exc:
        raise BadInput(WHO, f"meta cannot be written as JSON ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})") from None
    if _depth(header) > META_MAX_DEPTH:  # a loop that raised its recursion limit writes what a reader cannot parse
        raise BadInput(WHO, f"meta nests more than {META_MAX_DEPTH} levels deep: a reader could not read it back")
    return text


def _depth(value: object) -> int:
    """How deep lists and dicts nest (iterative: no recursion of its own); stops counting past META_MAX_DEPTH."""
    deepest, level = 0, [(value, 0)]
    while level:
        item, d = level.pop()
        if isinstance(item, (list, tuple, dict)) and d <= META_MAX_DEPTH:
            deepest = max(deepest, d + 1)
            level.extend((x, d + 1) for x in (item.values() if isinstance(item, dict) else item))
    return deepest


def precheck(target: StepTarget) -> None:
    """What can be refused before the arrays are copied (and, in the background, at the call): a link or a file where
    the step folder goes, a folder where the file goes. `open_target` checks again at the write, race-free."""
    if target.folder:
        folder = target.root / target.folder
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise _not_ours(folder)
    if target.path.is_dir() and not target.path.is_symlink():
        raise BadInput(target.path, "is a folder: save_step writes a file there")


@contextlib.contextmanager
def open_target(target: StepTarget):
    """A descriptor on the folder the file goes into (the step folder created when missing, opened no-follow), for
    `canonical.write_npz_at`. An OSError of the disk is BadInput naming the file."""
    fds: list[int] = []
    try:
        target.root.mkdir(parents=True, exist_ok=True)  # the caller's folder, as named
        fds.append(os.open(target.root, os.O_RDONLY | DIRECTORY | getattr(os, "O_CLOEXEC", 0)))
        if target.folder:
            fds.append(_own_folder(fds[-1], target))
        yield fds[-1]
    except OSError as exc:
        raise BadInput(target.path, f"cannot be written: {exc.strerror or exc}") from None
    finally:
        for fd in fds:
            os.close(fd)


def _own_folder(root_fd: int, target: StepTarget) -> int:
    """The step folder, made if missing and opened without following a link: a symlink or a file there is refused."""
    name = str(target.folder)
    folder = target.root / name
    if not AT_FDS:  # no *at() calls: the check and the open are two steps
        folder.mkdir(exist_ok=True)
        if folder.is_symlink():
            raise _not_ours(folder)
        return os.open(folder, os.O_RDONLY)
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=root_fd)
    try:
        return os.open(name, os.O_RDONLY | DIRECTORY | NO_FOLLOW, dir_fd=root_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _not_ours(folder) from None
        raise


def _not_ours(folder: Path) -> BadInput:
    return BadInput(folder, "is a symbolic link or not a folder: save_step never writes through a link it did not "
                            "create (remove it, or save elsewhere)")

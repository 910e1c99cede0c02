"""Where each batch's analysis runs: in this process, in `--jobs N` worker processes, or as Ray tasks
(`--executor ray`, ray_executor.py).

Every executor runs the same function on the same inputs and returns its results in input order, so the
output is byte-identical whichever runs it. Workers die with their parent (a `kill -9` of the build
leaves no worker blocked behind it), and a worker that dies (killed, out of memory) is one line of
error, not a traceback. A worker's warnings (a file unpickled in full) are said by the parent, in input
order, so `--jobs` prints what a serial build prints.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from ..errors import BadInput

R = TypeVar("R")  # what a task returns: one step's index row and rendered files

Progress = Callable[[int, int], None]


EXECUTORS = ("local", "ray")


@contextlib.contextmanager
def session(executor: str, jobs: int = 1, ray_address: str | None = None) -> Iterator[None]:
    """What an executor keeps for a whole build: a local Ray, started once for all the chunks of a run."""
    if executor != "ray":
        yield
        return
    from .ray_executor import ray_session

    with ray_session(ray_address, jobs if jobs > 1 else None):
        yield


def analyze_all(task: Callable[[Any, str], R], inputs: list, ids: list[str], jobs: int = 1,
                progress: Progress | None = None, executor: str = "local", ray_address: str | None = None) -> list[R]:
    """`task(input, run_id)` for every input (a Source), serially, in `jobs` processes or as Ray tasks; results
    in input order.

    The first bad input raises its BadInput (the pending analyses are cancelled), so nothing is written.
    `progress(done, total)` is called after each input. With `executor="ray"`, `ray_address` None starts a
    local Ray of `jobs` CPUs (all of them when `jobs` is 1) for this call only.
    """
    if executor == "ray":
        from .ray_executor import analyze_on_ray

        return analyze_on_ray(task, inputs, ids, ray_address, jobs if jobs > 1 else None, progress)
    if executor != "local":
        raise BadInput("--executor", f"unknown executor '{executor}' (one of {', '.join(EXECUTORS)})")
    total = len(inputs)
    if jobs <= 1 or total <= 1:
        reports = []
        for i, (p, rid) in enumerate(zip(inputs, ids)):
            reports.append(task(p, rid))
            if progress:
                progress(i + 1, total)
        return reports
    pool = ProcessPoolExecutor(max_workers=min(jobs, total), initializer=_die_with_parent, initargs=(os.getpid(),))
    try:
        futures = [pool.submit(_warnings_kept, task, p, rid) for p, rid in zip(inputs, ids)]
        _wait(futures, total, progress)
        pool.shutdown(wait=True)
    except BaseException:  # an error, Ctrl-C or SIGTERM: stop the workers now rather than wait for them
        _stop(pool)
        raise
    return _results(futures, inputs)


def _wait(futures: list[Future], total: int, progress: Progress | None) -> None:
    for n, f in enumerate(as_completed(futures), 1):
        if f.exception() is not None:
            for g in futures:
                g.cancel()  # not yet started; the running ones finish before the pool closes
            return
        if progress:
            progress(n, total)


def _results(futures: list[Future], inputs: list) -> list[R]:
    # Inputs start in order, so every input before a cancelled one ran: the first failure in input
    # order is the one a serial build would have stopped at.
    for f, p in zip(futures, inputs):
        if f.cancelled():
            continue
        exc = f.exception()
        if isinstance(exc, BrokenProcessPool):
            raise BadInput(getattr(p, "origin", p),
                           "a worker process died while analysing it (killed, or out of memory); nothing was written")
        if exc is not None:
            raise exc
    reports = []
    for f in futures:
        report, said = f.result()
        for message, category in said:
            warnings.warn(message, category, stacklevel=1)  # said as the worker said it: no caller to point at
        reports.append(report)
    return reports


def _warnings_kept(task: Callable[[Any, str], R], src: Any, run_id: str) -> tuple[R, list]:
    """Run in a worker: the task, and the warnings it raised (message, category) for the parent to say."""
    with warnings.catch_warnings(record=True) as caught:
        report = task(src, run_id)
    return report, [(str(w.message), w.category) for w in caught]


def _stop(pool: ProcessPoolExecutor) -> None:
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in list(getattr(pool, "_processes", {}).values()):  # the executor has no public way to end its workers
        proc.terminate()


def _die_with_parent(parent: int) -> None:
    """Run in each worker: exit as soon as the build process is gone, whatever killed it."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the line above ran
        os._exit(1)

    def watch() -> None:  # elsewhere (and as a second guard): poll for the parent
        while os.getppid() == parent:
            threading.Event().wait(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()

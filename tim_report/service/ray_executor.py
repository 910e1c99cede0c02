"""`--executor ray`: each batch's analysis as a Ray task, on a local Ray or a cluster (docs/scale.md).

A task gets the Source (paths, not bytes: it reads the files where they live, so the paths must be
valid on the worker nodes) and returns that step's index row and rendered files (1-2 MB: the page, report.md, the
JSON). Results come back in
input order, through the same pickling as `--jobs`, so the output is byte-identical to a local build.
Ray is an optional extra, imported only here and only when asked; a local Ray started here is shut
down before the build goes on, whatever happens.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..errors import BadInput

R = TypeVar("R")  # what a task returns: one step's index row and rendered files

INSTALL_HINT = 'Ray is not installed: pip install -e ".[ray]" (or pip install "ray>=2.40")'
# A task whose worker or node is lost runs once more (a preempted node); an out-of-memory kill would only repeat.
MAX_RETRIES = 1


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[None]:
    """Ray for the whole build: `analyze_on_ray` calls inside it share one Ray (a local one is started once and
    shut down at the end, whatever happens)."""
    ray = _import_ray()
    started = not ray.is_initialized()
    if started:
        _init(ray, address, num_cpus)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BadInput("--executor ray", INSTALL_HINT) from None
    return ray


def analyze_on_ray(task: Callable[[Any, str], R], inputs: list, ids: list[str], address: str | None = None,
                   num_cpus: int | None = None, progress: Callable[[int, int], None] | None = None) -> list[R]:
    """`task(input, run_id)` for every input as Ray tasks; results in input order.

    `address` None starts a local Ray with `num_cpus` CPUs (None: all) and stops it afterwards; "auto" or
    "ray://host:10001" joins a running cluster. A Ray already initialised by the caller is used as it is.
    """
    ray = _import_ray()
    started = not ray.is_initialized()
    if started:
        _init(ray, address, num_cpus)
    refs: list = []
    try:
        remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_run)
        cwd = os.getcwd()
        refs = [remote.remote(task, src, rid, cwd) for src, rid in zip(inputs, ids)]
        return _collect(ray, refs, inputs, progress)
    except BaseException:  # a failure or Ctrl-C: on a cluster, stop what is queued or running for us
        if not (started and address is None):  # a local Ray's shutdown ends its workers itself
            _cancel(ray, refs)
        raise
    finally:
        if started:
            ray.shutdown()


def _cancel(ray: Any, refs: list) -> None:
    for ref in refs:  # not forced: a forced cancel of a finishing task can crash Ray's core worker
        try:
            ray.cancel(ref)
        except Exception:  # already finished, or the connection is gone: nothing to cancel
            pass


def _init(ray: Any, address: str | None, num_cpus: int | None) -> None:
    """ray.init, keeping this process's SIGTERM handler (Ray's would exit without unwinding the build)."""
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False, "configure_logging": True}
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        if address is None:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a local Ray reports nothing anywhere
            ray.init(num_cpus=num_cpus, include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        where = address or "a local Ray"
        raise BadInput("--ray-address" if address else "--executor ray",
                       f"cannot start or reach {where}: {_first_line(exc)}") from None
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(task: Callable[[Any, str], R], src: Any, rid: str, cwd: str) -> tuple[R, list[tuple[type, str]]]:
    """On a worker: run the task from the build's working folder (relative paths mean the same thing there),
    with its warnings collected to be shown by the build rather than lost in a worker's log."""
    if os.getcwd() != cwd:
        try:
            os.chdir(cwd)
        except OSError:
            if any(not os.path.isabs(p) for p in getattr(src, "paths", ())):
                raise BadInput(getattr(src, "origin", src), f"is a relative path and the build's folder {cwd} does "
                                                            "not exist on this Ray node: give absolute paths") from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = task(src, rid)
    return report, [(w.category, str(w.message)) for w in caught]


def _collect(ray: Any, refs: list, inputs: list, progress: Callable[[int, int], None] | None) -> list[R]:
    """Wait for every task, reporting progress; the first failure (in the order they finish) stops the build."""
    from ray.exceptions import RayError, RayTaskError

    index = {ref: i for i, ref in enumerate(refs)}
    results: list = [None] * len(refs)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        ref = done[0]
        try:
            results[index[ref]] = ray.get(ref)
        except RayTaskError as exc:
            cause = getattr(exc, "cause", None)  # the task's own exception, unwrapped (BadInput: one line, exit 2)
            raise (cause if isinstance(cause, BaseException) else exc) from None
        except RayError as exc:  # the worker or its node died (killed, out of memory, preempted)
            origin = getattr(inputs[index[ref]], "origin", inputs[index[ref]])
            raise BadInput(origin, f"the Ray task analysing it failed ({type(exc).__name__}: a worker or node died, "
                                   "killed or out of memory); nothing was written") from None
        if progress:
            progress(len(refs) - len(pending), len(refs))
    reports = []
    for report, messages in results:
        for category, message in messages:  # shown as this process shows its own (the CLI: one line each)
            warnings.warn(message, category, stacklevel=2)
        reports.append(report)
    return reports


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

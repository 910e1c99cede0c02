"""StepWriter: step files written on a thread of their own, so a training loop never waits on the disk.

`save_step(..., background=writer)` copies the tensors to the CPU and checks them in the caller, then queues the
batch; the thread compresses and writes it (atomically, fsync'ed). The queue is bounded
(`max_pending` steps), so memory stays bounded when the disk is slower than the loop: `save` then waits. A
failed write is raised by the next `save_step`, `flush` or `close`, never lost. `save_step(..., background=True)`
shares one writer per process, flushed when the interpreter exits.
"""

from __future__ import annotations

import atexit
import queue
import threading
from pathlib import Path

from ..model import StepBatch
from .canonical import save_batch

_STOP = None


def write(target: Path, batch: StepBatch) -> None:
    """The disk part of a save (the writer thread runs it): the step's folder, then the file, atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    save_batch(batch, target, compact=True)


class StepWriter:
    """A thread that writes the steps `save_step(..., background=writer)` hands it, in order."""

    def __init__(self, max_pending: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, max_pending))
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="tim-report-step-writer", daemon=True)
        self._thread.start()

    def put(self, target: Path, batch: StepBatch) -> None:
        """Queue a checked batch (waits while `max_pending` are queued)."""
        self._raise()
        if self._closed:
            raise RuntimeError("this StepWriter is closed")
        self._queue.put((target, batch))

    def flush(self) -> None:
        """Wait until every queued step is on disk; raise the first write that failed."""
        self._queue.join()
        self._raise()

    def close(self) -> None:
        """Flush, then stop the thread. Idempotent."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._thread.join()
        self._raise()

    def __enter__(self) -> StepWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                if self._error is None:  # after a failure, later steps are dropped: the error says why
                    write(*item)
            except BaseException as exc:
                self._error = exc
            finally:
                self._queue.task_done()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error


_shared: StepWriter | None = None
_lock = threading.Lock()


def shared_writer() -> StepWriter:
    """The process's writer for `save_step(..., background=True)`, closed (so flushed) at interpreter exit."""
    global _shared
    with _lock:
        if _shared is None or _shared._closed:
            _shared = StepWriter()
            atexit.register(_shared.close)
        return _shared


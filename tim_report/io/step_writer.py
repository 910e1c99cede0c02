"""StepWriter: step files written on a thread of their own, so a training loop never waits on the disk.

`save_step(..., background=writer)` copies the tensors to the CPU and checks them in the caller, then queues the
batch; the thread compresses and writes it (atomically, fsync'ed, under step_files' rules). The queue is bounded
(`max_pending` steps), so memory stays bounded when the disk is slower than the loop: `save` then waits. A failed
write is raised in the training loop, as one line of BadInput naming the file, by the next `save_step`, `flush` or
`close`, never lost; the steps queued behind it are not written, and the error says how many. A writer still open
when the interpreter exits is closed then; a write that fails there prints its one line and ends the process with
exit status 1 (`os._exit`: an exit handler's exception would only be printed, and a run whose last step was lost must
not look like a success). `save_step(..., background=True)` shares one writer per process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import sys
import threading

from ..errors import BadInput
from ..model import StepBatch
from .canonical import batch_arrays, write_npz_at
from .step_files import WHO, StepTarget, open_target

_STOP = None


def write(target: StepTarget, batch: StepBatch) -> None:
    """The disk part of a save (the writer thread runs it): the step's folder, then the file, atomically."""
    arrays = batch_arrays(batch, compact=True)
    with open_target(target) as folder_fd:
        write_npz_at(arrays, target.path.parent, folder_fd, target.name, 1)


class StepWriter:
    """A thread that writes the steps `save_step(..., background=writer)` hands it, in order."""

    def __init__(self, max_pending: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, max_pending))
        self._error: BaseException | None = None
        self._dropped = 0  # steps queued behind a failed write, not written
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="tim-report-step-writer", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    def put(self, target: StepTarget, batch: StepBatch) -> None:
        """Queue a checked batch (waits while `max_pending` are queued)."""
        self._raise()
        if self._closed:
            raise BadInput(WHO, "this StepWriter is closed: make a new one (or use background=True)")
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
            atexit.unregister(self._at_exit)
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
                if self._error is None:
                    write(*item)
                else:  # after a failure, later steps are dropped until the error is raised: it says how many
                    self._dropped += 1
            except BaseException as exc:
                self._error = exc
            finally:
                self._queue.task_done()

    def _raise(self) -> None:
        if self._error is not None:
            error, dropped, self._error, self._dropped = self._error, self._dropped, None, 0
            if isinstance(error, BadInput) and dropped:
                raise BadInput(error.source, f"{error.problem}; the {dropped} step{'s' if dropped != 1 else ''} queued "
                                             "after it were not written either")
            raise error

    def _at_exit(self) -> None:
        """Interpreter exit: write what is queued; a failure is one line on stderr and exit status 1."""
        try:
            self.close()
        except BaseException as exc:  # any failure must end the process non-zero, said in one line
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            with contextlib.suppress(Exception):  # stdout may be closed at exit
                sys.stdout.flush()
            with contextlib.suppress(Exception):  # stdout may be closed at exit
                sys.stderr.write(f"tim-report: error: {line} (a background save_step failed at exit)\n")
                sys.stderr.flush()
            os._exit(1)


_shared: StepWriter | None = None
_lock = threading.Lock()


def shared_writer() -> StepWriter:
    """The process's writer for `save_step(..., background=True)`, closed (so flushed) at interpreter exit."""
    global _shared
    with _lock:
        if _shared is None or _shared._closed:
            _shared = StepWriter()
        return _shared

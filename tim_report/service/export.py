"""`export`: a site's numbers where the team already looks. `--tensorboard DIR`: TensorBoard event files.

From the site's index.json (so a site built long ago, or by `watch` while the run goes on, exports as it is): one
scalar per step of each metric an index row carries among the logger's metrics (`catalogue.metrics.SCALARS`), named
`tim/<key>` as `Report.scalars()` names them, so a run logged live and a site exported later share their charts; each
change point as a text summary at its step (`tim/change_points`, the run view's sentence) and the run verdict at the
last step (`tim/run_verdict`). A row's x is its training step; a row without one gets its position in the index.
A metric a step has no finite value for is left out (a gap in the chart), as in `Report.scalars()`.

TensorBoard's own writer (through torch.utils.tensorboard, torch being a dependency already) writes the file;
TensorBoard itself is an optional extra: `pip install -e ".[tensorboard]"`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..catalogue.metrics import SCALARS
from ..errors import BadInput
from ..site.index_json import read_rows
from .loggers import row_scalars

INSTALL_HINT = 'TensorBoard is not installed: pip install -e ".[tensorboard]" (or pip install tensorboard)'
PREFIX = "tim/"
KEYS = SCALARS  # the logger's metrics: an index row carries every one (catalogue.metrics.ROW)


@dataclass
class Exported:
    steps: int
    scalars: int
    texts: int
    path: Path


def export_tensorboard(site: Path, logdir: Path) -> Exported:
    """Write the site's per-step metrics, change points and verdict as one TensorBoard event file under `logdir`."""
    doc, rows = read_rows(site, KEYS)
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise BadInput("--tensorboard", INSTALL_HINT) from None
    if logdir.exists() and not logdir.is_dir():
        raise BadInput(logdir, "exists and is not a folder")
    steps = [_x(r["step"], i) for i, r in enumerate(rows)]
    before = _event_files(logdir)
    with _writer_errors_held() as held:
        try:
            scalars, texts = _write(SummaryWriter, logdir, doc, rows, steps)
            if held:  # the thread failed on the last records: close() does not say so
                raise held[0]
        except OSError as exc:  # a full disk, a quota, a read-only folder: from the writer or its thread
            for made in _event_files(logdir) - before:  # nothing half-written left behind
                made.unlink(missing_ok=True)
            raise BadInput(logdir, f"cannot write the event file: {exc.strerror or exc}") from None
    return Exported(len(rows), scalars, texts, logdir)


def _write(summary_writer, logdir: Path, doc: dict, rows: list[dict], steps: list[int]) -> tuple[int, int]:
    """The scalars and texts, through TensorBoard's writer (closed, so flushed, before this returns)."""
    scalars = texts = 0
    writer = summary_writer(log_dir=str(logdir))
    try:
        for row, step in zip(rows, steps):
            for key, value in row_scalars(row).items():  # the row's metrics and its lags, as watch --log-to logs them
                writer.add_scalar(key, value, global_step=step)
                scalars += 1
        for cp in doc.get("change_steps") or []:  # checked by read_rows: objects, steps in range, strings
            if isinstance(cp.get("sentence"), str):
                writer.add_text(PREFIX + "change_points", cp["sentence"], global_step=_x(cp.get("step"), 0))
                texts += 1
        verdict = (doc.get("run") or {}).get("verdict")
        if isinstance(verdict, str):
            writer.add_text(PREFIX + "run_verdict", verdict, global_step=max(steps, default=0))
            texts += 1
    finally:
        writer.close()
    return scalars, texts


def _event_files(logdir: Path) -> set[Path]:
    return set(logdir.glob("events.out.tfevents.*")) if logdir.is_dir() else set()


@contextlib.contextmanager
def _writer_errors_held() -> Iterator[list]:
    """TensorBoard's writer thread re-raises its OSError after handing it to the caller, and Python prints that as a
    thread's traceback: held here (the caller says it in one line), any other thread's error printed as before."""
    held: list = []
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.exc_value, OSError) and "AsyncWriter" in type(args.thread).__name__:
            held.append(args.exc_value)
        else:
            previous(args)

    threading.excepthook = hook
    try:
        yield held
    finally:
        threading.excepthook = previous


def _x(step: object, position: int) -> int:
    """A TensorBoard step is an integer: the training step when it is one, else the row's position."""
    if isinstance(step, (int, float)) and not isinstance(step, bool) and float(step).is_integer():
        return int(step)
    return position

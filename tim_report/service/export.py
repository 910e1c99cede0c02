"""`export`: a site's numbers where the team already looks. `--tensorboard DIR`: TensorBoard event files.

From the site's index.json (so a site built long ago, or by `watch` while the run goes on, exports as it is): one
scalar per step of each metric an index row carries among the logger's metrics (`catalogue.metrics.SCALARS`), named
`tim/<key>` as `Report.scalars()` names them, so a run logged live and a site exported later share their charts; each
change point as a text summary at its step (`tim/change_points`, the run view's sentence) and the run verdict at the
last step (`tim/run_verdict`). A row's x is its training step; a row without one gets its position in the index.
A metric a step has no finite value for is left out (a gap in the chart), as in `Report.scalars()`.

TensorBoard's own writer (through torch.utils.tensorboard, torch being a dependency already) writes the file;
TensorBoard itself is an optional extra: `pip install "tim-report[tensorboard]"`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..catalogue.metrics import ROW, SCALARS
from ..errors import BadInput
from ..site.index_json import read_rows

INSTALL_HINT = 'TensorBoard is not installed: pip install "tim-report[tensorboard]" (or pip install tensorboard)'
PREFIX = "tim/"
KEYS = tuple(k for k in SCALARS if k in ROW)  # the logger's metrics an index row carries


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
    scalars = texts = 0
    try:
        writer = SummaryWriter(log_dir=str(logdir))
    except OSError as exc:
        raise BadInput(logdir, f"cannot write here: {exc.strerror or exc}") from None
    with writer:
        for row, step in zip(rows, steps):
            for key in KEYS:
                if row[key] is not None:
                    writer.add_scalar(PREFIX + key, float(row[key]), global_step=step)
                    scalars += 1
        for cp in doc.get("change_steps") or []:
            if isinstance(cp, dict) and isinstance(cp.get("sentence"), str):
                writer.add_text(PREFIX + "change_points", cp["sentence"], global_step=_x(cp.get("step"), 0))
                texts += 1
        verdict = (doc.get("run") or {}).get("verdict") if isinstance(doc.get("run"), dict) else None
        if isinstance(verdict, str):
            writer.add_text(PREFIX + "run_verdict", verdict, global_step=max(steps, default=0))
            texts += 1
    return Exported(len(rows), scalars, texts, logdir)


def _x(step: object, position: int) -> int:
    """A TensorBoard step is an integer: the training step when it is one, else the row's position."""
    if isinstance(step, (int, float)) and not isinstance(step, bool) and float(step).is_integer():
        return int(step)
    return position

"""`watch --log-to`: each new step's numbers and each alarm streamed to the team's experiment logger as the run goes.

One sink per logger, each writing through the logger's own client library, imported only when asked for:

- `tensorboard=DIR`: an event file under DIR (torch's SummaryWriter), the scalars `export --tensorboard` writes;
- `wandb[=PROJECT]`: a W&B run (project "tim-report" by default). Where it goes is W&B's own settings: `WANDB_MODE`
  (`offline` writes the run under `WANDB_DIR` for a later `wandb sync`), `WANDB_ENTITY`, `WANDB_API_KEY`;
- `mlflow[=EXPERIMENT]`: an MLflow run in the experiment (default "tim-report") of `MLFLOW_TRACKING_URI`.

A step's scalars are the logger metrics (`catalogue.metrics.SCALARS`, every one of which an index row carries), named
`tim/<key>` as `Report.scalars()` and `export --tensorboard` name them, at the step's training step, so a live log, a site exported
later and `report.scalars()` in the loop draw the same charts. An alarm is `tim/alarm` = 1 at its step and its line
as text (TensorBoard text, a W&B history string, an MLflow tag). One logger run per `watch`: a restarted watch starts
a new one and logs only the steps the site did not hold (the same rule as its alarms). A logger's own log lines
(MLflow's and its database migrations' INFO) are kept off the terminal unless `verbose`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..analysis.lag.history import lag_scalars
from ..catalogue.metrics import SCALARS
from ..errors import BadInput

PREFIX = "tim/"
KEYS = SCALARS  # the logger's metrics, as Report.scalars() names them; an index row carries each (catalogue ROW)
QUIET = ("mlflow", "alembic")  # the Python loggers of the logger clients that print INFO lines of their own
LOGGERS = {  # name → (what TARGET is, its default, the pip extra that brings the client)
    "tensorboard": ("a log folder", None, "tensorboard"),
    "wandb": ("the W&B project", "tim-report", "wandb"),
    "mlflow": ("the MLflow experiment", "tim-report", "mlflow"),
}


class Sink(Protocol):
    def log_step(self, step: int, scalars: dict[str, float]) -> None: ...
    def log_alarm(self, step: int, line: str) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class LogTarget:
    """One `--log-to NAME[=TARGET]`, parsed."""

    name: str
    target: str

    @classmethod
    def parse(cls, text: str) -> LogTarget:
        name, _, target = text.partition("=")
        name = name.strip().lower()
        if name not in LOGGERS:
            raise BadInput("--log-to", f"unknown logger {name!r}: use one of {', '.join(LOGGERS)} (NAME or NAME=TARGET)")
        what, default, _ = LOGGERS[name]
        chosen = target.strip() or default
        if chosen is None:
            raise BadInput("--log-to", f"{name} needs {what}: --log-to {name}=DIR")
        return cls(name, chosen)


def row_scalars(row: dict) -> dict[str, float]:
    """An index row's logger metrics as `{tim/key: value}`; a value that is not a finite number is left out (a gap)."""
    out = {}
    for key in KEYS:
        v = row.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[PREFIX + key] = float(v)
    return {**out, **lag_scalars(row.get("lag_kl_k3") or {}, row.get("staleness_share"), PREFIX)}


def row_step(row: dict, position: int) -> int:
    """A logger's step is an integer: the row's training step when it is one, else its position in the index."""
    step = row.get("step")
    if isinstance(step, (int, float)) and not isinstance(step, bool) and math.isfinite(step) and float(step).is_integer():
        return int(step)
    return position


def open_sinks(targets: list[LogTarget], site: Path, verbose: bool = False) -> list[Sink]:
    """Every sink asked for, opened before the first poll: a logger that is not installed or cannot start is one line.
    Not `verbose`: the clients' own INFO lines ("Creating initial MLflow database tables...") are not printed."""
    sinks: list[Sink] = []
    try:
        for t in targets:
            sinks.append(_OPEN[t.name](t.target, site, verbose))
    except BaseException:
        close_sinks(sinks)
        raise
    return sinks


def close_sinks(sinks: list[Sink]) -> list[str]:
    """Close every sink (flush its files); a sink that fails to close is a line, the others still close."""
    problems = []
    for s in sinks:
        try:
            s.close()
        except Exception as exc:  # a logger's own failure (disk full, server gone) must not hide the site's state
            problems.append(f"{type(s).__name__}: {exc}")
    return problems


def _missing(name: str) -> BadInput:
    return BadInput("--log-to", f'{name} is not installed: pip install -e ".[{LOGGERS[name][2]}]" in the tim-report checkout')


def _hush(verbose: bool) -> None:
    """The clients' own loggers to WARNING, after their import (MLflow sets its logger to INFO when imported)."""
    if not verbose:
        for name in QUIET:
            logging.getLogger(name).setLevel(logging.WARNING)


class TensorBoardSink:
    def __init__(self, logdir: str, site: Path, verbose: bool = False):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise _missing("tensorboard") from None
        path = Path(logdir)
        if path.exists() and not path.is_dir():
            raise BadInput(path, "exists and is not a folder")
        try:
            self.writer = SummaryWriter(log_dir=str(path))
        except OSError as exc:
            raise BadInput(path, f"cannot write here: {exc.strerror or exc}") from None

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def log_alarm(self, step: int, line: str) -> None:
        self.writer.add_scalar(PREFIX + "alarm", 1.0, global_step=step)
        self.writer.add_text(PREFIX + "alarms", line, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    def __init__(self, project: str, site: Path, verbose: bool = False):
        try:
            import wandb
        except ImportError:
            raise _missing("wandb") from None
        try:
            self.run = wandb.init(project=project, name=site.name or "tim-report", job_type="tim-report",
                                  config={"site": str(site)}, reinit="create_new")
        except Exception as exc:  # no key, no network, a bad setting: W&B's own words, one line
            raise BadInput("--log-to wandb", f"W&B did not start: {_first_line(exc)}") from None
        # Every tim/ metric is drawn against the training step, whatever order the steps arrive in.
        self.run.define_metric(PREFIX + "step")
        self.run.define_metric(PREFIX + "*", step_metric=PREFIX + "step")

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log({PREFIX + "step": step, **scalars})

    def log_alarm(self, step: int, line: str) -> None:
        self.run.log({PREFIX + "step": step, PREFIX + "alarm": 1.0, PREFIX + "alarm_text": line})

    def close(self) -> None:
        self.run.finish()


class MlflowSink:
    def __init__(self, experiment: str, site: Path, verbose: bool = False):
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise _missing("mlflow") from None
        _hush(verbose)
        try:
            self.client = MlflowClient()
            found = self.client.get_experiment_by_name(experiment)
            exp_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
            self.run_id = self.client.create_run(exp_id, run_name=site.name or "tim-report",
                                                 tags={"tim_report.site": str(site)}).info.run_id
        except Exception as exc:  # an unreachable server, a bad tracking URI: MLflow's own words, one line
            raise BadInput("--log-to mlflow", f"MLflow did not start: {_first_line(exc)}") from None
        self.alarms = 0

    def log_step(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = _millis()
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in scalars.items()])

    def log_alarm(self, step: int, line: str) -> None:
        self.alarms += 1
        self.client.log_metric(self.run_id, PREFIX + "alarm", 1.0, step=step)
        self.client.set_tag(self.run_id, f"{PREFIX}alarm/{self.alarms}", f"step {step}: {line}"[:5000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _millis() -> int:
    import time

    return int(time.time() * 1000)


_OPEN: dict[str, type[TensorBoardSink] | type[WandbSink] | type[MlflowSink]] = {
    "tensorboard": TensorBoardSink, "wandb": WandbSink, "mlflow": MlflowSink}


def log_round(sinks: list[Sink], new_rows: list[dict], all_rows: list[dict], alarms: list) -> None:
    """One watch round into every sink: each new step's scalars, then each alarm at its step."""
    position = {id(r): i for i, r in enumerate(all_rows)}
    for row in new_rows:
        step = row_step(row, position.get(id(row), 0))
        for sink in sinks:
            sink.log_step(step, row_scalars(row))
    for alarm in alarms:
        step = row_step({"step": alarm.step}, 0)
        for sink in sinks:
            sink.log_alarm(step, alarm.line)

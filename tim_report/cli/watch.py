"""`tim-report watch RUN_DIR -o SITE`: follow a live run; one line per new step, band break and change point.

    step_12: numerical noise; 18432 tokens, 64 sequences, median |δ| 0.0041 nats, KL k3 0.00041, ESS 0.9987
    alarm: step_13: systematic: off-by-one (…) (error), side undetermined, every position; outside the run's band: kl_k3 = …
    alarm: step_13: systematic: …; change point: From step 13, KL k3 is 5.4× higher (0.00023 → 0.00124) … (the run view's sentence)

One alarm per event: a change point at a step already alarmed (by its band or an earlier change point) is not
alarmed again as more metrics join it. A RUN_DIR that does not exist (with --once, or still after --wait-for-run
seconds) is one line and exit 2; while it is waited for, a line says so at once.

Ctrl-C or SIGTERM stops it after the build in progress (a second one stops at once, removing the staging folder):
the site is always a complete one, the publish being all or nothing. Exit 0 when stopped (while RUN_DIR is still
awaited too), 2 on bad input. The last line says how many steps the published index lists.
"""

from __future__ import annotations

import shlex
import signal
import threading
import time
from pathlib import Path

import click

from ..catalogue.formats import FORMATS
from ..catalogue.frameworks import run_folders
from ..config import RUN_APPEAR_WAIT
from ..errors import BadInput
from .options import fail_cleanly, load_options, output_path, ppo_eps_option
from .text import safe, summary_line

INTERVAL_MIN, INTERVAL_MAX = 0.05, 86400.0  # seconds between polls: a busy loop below, a day above


def _check_interval(value: float) -> None:
    """Finite and positive, one line otherwise: `inf` overflowed the wait, `nan` was taken and spun a core."""
    if not INTERVAL_MIN <= value <= INTERVAL_MAX:  # False for nan too
        raise BadInput("--interval", f"{value!r} is not a number of seconds in {INTERVAL_MIN:g} … {INTERVAL_MAX:g}")


@click.command("watch", help=f"""Follow a run folder while it is written: rebuild the site in OUTPUT each time a step is complete.

    RUN_DIR is a run folder `build` reads ({run_folders()}, a folder of step files); it may be empty, and may
    appear up to --wait-for-run seconds late.
    """)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output folder (the site), rewritten as steps arrive.")
@click.option("--interval", type=float, default=5.0, show_default=True, metavar="SECONDS",
              help="Seconds between polls (0.05 to 86400). A step is taken once its files are unchanged over two polls.")
@click.option("--ranks", type=click.IntRange(min=1), default=None, metavar="N",
              help="Files (ranks) every step has: a step waits for all N (default: as many as the earlier steps had).")
@click.option("--on-alarm", "on_alarm", metavar="COMMAND",
              help="Run COMMAND on each alarm (a step outside the run's band, a new change point), split like a shell "
                   "line but run without a shell; the alarm is in its environment: TIM_REPORT_ALARM, TIM_REPORT_STEP, "
                   "TIM_REPORT_RUN_ID, TIM_REPORT_METRIC(S), TIM_REPORT_VALUE, TIM_REPORT_MESSAGE, TIM_REPORT_SITE, "
                   "TIM_REPORT_REGIME, TIM_REPORT_FINDING, TIM_REPORT_SIDE, TIM_REPORT_GLANCE, TIM_REPORT_PAGE.")
@click.option("--log-to", "log_to", multiple=True, metavar="LOGGER[=TARGET]",
              help="Stream each new step's numbers and each alarm to an experiment logger (repeatable): tensorboard=DIR, "
                   "wandb[=PROJECT] (W&B's own settings: WANDB_MODE, WANDB_DIR, ...), mlflow[=EXPERIMENT] (at "
                   "MLFLOW_TRACKING_URI). docs/watch.md.")
@click.option("--wait-for-run", type=click.FloatRange(min=0), default=RUN_APPEAR_WAIT, show_default=True, metavar="SECONDS",
              help="How long a RUN_DIR that does not exist yet may take to appear (a run started in the same breath); "
                   "then, or at once with --once, it is one line and exit 2 (a mistyped folder).")
@click.option("--once", is_flag=True, help="Poll twice, an interval apart, build what is complete, and exit.")
@click.option("--format", "formats", multiple=True, type=click.Choice(list(FORMATS)),
              help="Write only these formats (repeatable; default all). index.json is always written.")
@click.option("--verbose", is_flag=True, help="Show the --log-to loggers' own log lines (MLflow's INFO) here.")
@ppo_eps_option
@fail_cleanly
@load_options
def watch_command(run_dir, out, interval, ranks, on_alarm, wait_for_run, log_to, once, formats, verbose, thresholds,
                  load) -> None:
    from ..service.build import BuildOptions
    from ..service.loggers import LogTarget, close_sinks, open_sinks
    from ..service.watch import Watch, WatchOptions, follow

    _check_interval(interval)
    out = output_path(out)
    argv = _alarm_command(on_alarm)
    targets = [LogTarget.parse(t) for t in log_to]  # the command line's own mistakes first
    if not run_dir.exists() and once:  # a mistyped folder used to print "holds 0 steps" and exit 0
        raise BadInput(run_dir, "no such run folder")
    stop = threading.Event()
    previous = {s: signal.signal(s, _stopper(stop)) for s in (signal.SIGINT, signal.SIGTERM)}
    sinks: list = []
    try:
        if not run_dir.exists():
            click.echo(f"waiting up to {wait_for_run:g} s for {safe(run_dir)} to appear (Ctrl-C stops)")
            if not _appears(run_dir, wait_for_run, interval, stop):
                if stop.is_set():  # Ctrl-C while waiting: nothing was staged, nothing is wrong; exit 0 as documented
                    click.echo(f"stopped while waiting for {safe(run_dir)} to appear; nothing was built")
                    return
                raise BadInput(run_dir, f"no such run folder (none appeared within {wait_for_run:g} s)")
        opts = WatchOptions(build=BuildOptions(load=load, thresholds=thresholds, formats=tuple(
            f for f in FORMATS if f in formats) if formats else tuple(FORMATS)), interval=interval, ranks=ranks)
        watch = Watch(run_dir, out, opts, say=lambda line: click.echo(safe(line), err=True))
        sinks = open_sinks(targets, out, verbose)
        click.echo(f"watching {safe(run_dir)} every {interval:g} s into {safe(out)}/ (Ctrl-C stops)")
        follow(watch, lambda rnd: _report(rnd, argv, out, sinks), stop.wait, once)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for problem in close_sinks(sinks):
            click.echo(f"tim-report: warning: --log-to: {safe(problem)}", err=True)
    n = watch.held  # what the published index lists (not every step this watch has seen: a run folder remade smaller)
    click.echo(f"stopped: {safe(out)}/ holds {n} step{'s' if n != 1 else ''}")


def _appears(path: Path, seconds: float, interval: float, stop: threading.Event) -> bool:
    """Whether `path` exists within `seconds` (polled every `interval`): a run started beside the watch creates it.
    False at once when `stop` is set (Ctrl-C, SIGTERM)."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        left = deadline - time.monotonic()
        if left <= 0 or stop.wait(min(interval, left)):
            return path.exists() and not stop.is_set()
    return True


def _alarm_command(text: str | None) -> list[str] | None:
    if text is None:
        return None
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise BadInput("--on-alarm", f"cannot split the command: {exc}") from None
    if not argv:
        raise BadInput("--on-alarm", "is empty: name a command")
    return argv


def _stopper(stop: threading.Event):
    """The first Ctrl-C / SIGTERM asks the loop to stop after the build in progress; a second one stops at once."""
    def handler(signum, frame) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    return handler


def _report(rnd, argv: list[str] | None, out: Path, sinks: list) -> None:
    from ..service.loggers import log_round
    from ..service.watch import run_alarm

    for note in rnd.notes:
        click.echo(safe(note), err=True)
    for row in rnd.new_rows:
        click.echo(summary_line(row))
    for alarm in rnd.alarms:
        click.echo(f"alarm: {safe(alarm.line)}")
        failed = run_alarm(argv, alarm, out) if argv else None
        if failed:
            click.echo(f"tim-report: warning: {safe(failed)}", err=True)
    if sinks and (rnd.new_rows or rnd.alarms):
        log_round(sinks, rnd.new_rows, rnd.result.rows if rnd.result is not None else [], rnd.alarms)
    if rnd.result is not None and rnd.result.run:
        click.echo(f"site: {len(rnd.result.rows)} steps ({rnd.result.analysed} analysed); run verdict: {safe(rnd.result.run['verdict'])}")

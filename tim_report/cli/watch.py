"""`tim-report watch RUN_DIR -o SITE`: follow a live run; one line per new step, band break and change point.

    step_12: 18432 tokens, 64 sequences, median |δ| 0.0041 nats, KL k3 0.00041, ESS 0.9987
    alarm: step_13: outside the run's band: kl_k3 = 0.0123 > 0.00456, above the run's band (median …)
    alarm: change point: From step 13, KL k3 is 5.4× higher (0.00023 → 0.00124) … (the run view's sentence)

Ctrl-C or SIGTERM stops it after the build in progress (a second one stops at once, removing the staging folder):
the site is always a complete one, the publish being all or nothing. Exit 0 when stopped, 2 on bad input.
"""

from __future__ import annotations

import shlex
import signal
import threading
from pathlib import Path

import click

from ..catalogue.formats import FORMATS
from ..errors import BadInput
from .options import fail_cleanly, load_options, output_path, ppo_eps_option
from .text import safe, summary_line


@click.command("watch")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output folder (the site), rewritten as steps arrive.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=5.0, show_default=True, metavar="SECONDS",
              help="Seconds between polls. A step is taken once its files are unchanged over two polls.")
@click.option("--ranks", type=click.IntRange(min=1), default=None, metavar="N",
              help="Files (ranks) every step has: a step waits for all N (default: as many as the earlier steps had).")
@click.option("--on-alarm", "on_alarm", metavar="COMMAND",
              help="Run COMMAND on each alarm (a step outside the run's band, a new change point), split like a shell "
                   "line but run without a shell; the alarm is in its environment: TIM_REPORT_ALARM, TIM_REPORT_STEP, "
                   "TIM_REPORT_RUN_ID, TIM_REPORT_METRIC(S), TIM_REPORT_VALUE, TIM_REPORT_MESSAGE, TIM_REPORT_SITE.")
@click.option("--log-to", "log_to", multiple=True, metavar="LOGGER[=TARGET]",
              help="Stream each new step's numbers and each alarm to an experiment logger (repeatable): tensorboard=DIR, "
                   "wandb[=PROJECT] (W&B's own settings: WANDB_MODE, WANDB_DIR, ...), mlflow[=EXPERIMENT] (at "
                   "MLFLOW_TRACKING_URI). docs/watch.md.")
@click.option("--once", is_flag=True, help="Poll twice, an interval apart, build what is complete, and exit.")
@click.option("--format", "formats", multiple=True, type=click.Choice(list(FORMATS)),
              help="Write only these formats (repeatable; default all). index.json is always written.")
@ppo_eps_option
@fail_cleanly
@load_options
def watch_command(run_dir, out, interval, ranks, on_alarm, log_to, once, formats, ppo_eps, load):
    """Follow a run folder while it is written: rebuild the site in OUTPUT each time a step is complete.

    RUN_DIR is a run folder `build` reads (prime-rl token_exports/, a folder of step files, a NeMo-RL log dir, a
    slime/miles dump dir, a SkyRL export); it may not exist yet.
    """
    from ..config import Thresholds
    from ..service.build import BuildOptions
    from ..service.loggers import LogTarget, close_sinks, open_sinks
    from ..service.watch import Watch, WatchOptions, follow

    out = output_path(out)
    argv = _alarm_command(on_alarm)
    opts = WatchOptions(build=BuildOptions(load=load, thresholds=Thresholds(ppo_eps_low=ppo_eps[0], ppo_eps_high=ppo_eps[1]),
                                           formats=tuple(f for f in FORMATS if f in formats) if formats else tuple(FORMATS)),
                        interval=interval, ranks=ranks)
    targets = [LogTarget.parse(t) for t in log_to]
    watch = Watch(run_dir, out, opts)
    sinks = open_sinks(targets, out)
    stop = threading.Event()
    previous = {s: signal.signal(s, _stopper(stop)) for s in (signal.SIGINT, signal.SIGTERM)}
    click.echo(f"watching {safe(run_dir)} every {interval:g} s into {safe(out)}/ (Ctrl-C stops)")
    try:
        follow(watch, lambda rnd: _report(rnd, argv, out, sinks), stop.wait, once)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for problem in close_sinks(sinks):
            click.echo(f"tim-report: warning: --log-to: {safe(problem)}", err=True)
    n = len(watch.known_ids)
    click.echo(f"stopped: {safe(out)}/ holds {n} step{'s' if n != 1 else ''}")


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
    def handler(signum, frame):
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

"""Progress bars on stderr (rich), shown only where a person is watching; they never enter output files."""

from __future__ import annotations

import contextlib
import sys

import click


@contextlib.contextmanager
def build_progress(total: int):
    """A rich progress bar over the steps to analyse, when stderr is a terminal (a CI log gets the summary line only)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn("analysing steps"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("analyse", total=total)
        yield lambda done, total_now: bar.update(task, completed=done, total=total_now)  # folders expand to steps


@contextlib.contextmanager
def step_progress(label: str, total: int):
    """A rich progress bar for one capture stage (`total` sequences; 0: a stage without a count, such as loading an
    engine). Without a terminal, one line as the stage starts, flushed: a log or a pipe shows what the capture is doing
    while it does it, and a capture killed mid-stage has said which stage."""
    if not sys.stderr.isatty():
        click.echo(f"{label}: {total} sequences" if total else label, err=True)  # click.echo flushes
        yield lambda n=1: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    if not total:
        Console(stderr=True).print(label, markup=False, highlight=False)
        yield lambda n=1: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(task, n)

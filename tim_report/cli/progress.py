"""Progress bars on stderr (rich), shown only where a person is watching; they never enter output files."""

from __future__ import annotations

import contextlib
import sys

import click

PROGRESS_MIN_FILES = 8  # a build of this many files shows a progress bar even when stderr is not a terminal


@contextlib.contextmanager
def build_progress(total: int):
    """A rich progress bar for several files (when stderr is a terminal) or many; else None."""
    if total < 2 or (total < PROGRESS_MIN_FILES and not sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("analysing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=sys.stderr.isatty()) as bar:
        task = bar.add_task("analyse", total=total)
        yield lambda done, total_now: bar.update(task, completed=done, total=total_now)  # folders expand to steps


@contextlib.contextmanager
def step_progress(label: str, total: int):
    """A rich progress bar for one capture step; without a terminal, one line when it is done."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(task, n)
    if not sys.stderr.isatty():
        click.echo(f"{label}: {total} sequences", err=True)

"""`tim-report build FILES -o DIR`: one report per batch plus the index.

Exit 0 when every batch was built; 2 on bad input, nothing written; 3 when a run folder's step could not be read:
everything else was built and the index says why that step is missing, with one line per such step on stderr:

    tim-report: error: RUN/token_exports/step_7: rank_0.jsonl: not valid JSON lines (...) (step_7 left out; the rest was built)
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from ..catalogue.formats import FORMATS
from ..catalogue.frameworks import run_folders
from ..catalogue.numbers import fixed, fmt
from ..config import NOTES_MAX_BYTES
from ..errors import BadInput, regular_file
from .options import (
    StdoutRefused,
    executor_option,
    fail_cleanly,
    flush_stdout,
    input_files,
    load_options,
    output_path,
    ppo_eps_option,
    ray_address_option,
    self_contained_option,
    timestamp_now,
    timestamp_option,
)
from .progress import build_progress
from .text import safe, summary_line

RUN_LINES_MAX = 20  # a longer run prints its summary line only: the index lists every step
EXIT_UNREADABLE_STEP = 3  # the site was written, but a step of a run folder could not be read
CHANGE_LINES_MAX = 10


@click.command("build", help=f"""Analyse step batches and write the report site into OUTPUT.

    FILES are step batch files, one step's folder, or run folders ({run_folders()}, a folder of step files): one
    report per step.
    """)
@input_files
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output folder (the site).")
@click.option("--run-id", "run_ids", multiple=True,
              help="Run folder name, once per input (default: the file's stem, or step_N); a run folder's steps get it as a prefix.")
@ppo_eps_option
@click.option("--notes", "notes", type=click.Path(path_type=Path, dir_okay=False),
              help="Markdown file with your narrative, shown after the headline (raw HTML is escaped).")
@timestamp_option
@self_contained_option
@click.option("--format", "formats", multiple=True, type=click.Choice(list(FORMATS)),
              help="Write only these formats (repeatable; default all): "
                   + "; ".join(f"{f.name}: {f.help}" for f in FORMATS.values()) + ". index.json is always written.")
@click.option("--base-url", metavar="URL",
              help="Make the markdown's links absolute under URL (e.g. the GitHub Pages site), for a PR comment.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Analyse this many batches at once, in separate processes (same output as --jobs 1); with "
                   "--executor ray and no --ray-address, the CPUs of the local Ray.")
@executor_option
@ray_address_option
@fail_cleanly
@load_options
def build_command(files, out, run_ids, load, thresholds, notes, timestamp, self_contained, formats, base_url, jobs, executor,
                  ray_address) -> None:
    from ..render import RenderOptions
    from ..service.build import BuildOptions, build

    out = output_path(out)
    if ray_address is not None and executor != "ray":
        raise BadInput("--ray-address", "applies to --executor ray only")
    if self_contained and formats and not any(FORMATS[f].assets for f in formats):  # it was accepted and did nothing
        paged = ", ".join(name for name, f in FORMATS.items() if f.assets)
        raise BadInput("--self-contained", f"applies to pages ({paged}): --format {' '.join(formats)} writes none")
    notes_md = read_notes(notes) if notes is not None else None
    opts = BuildOptions(load=load, thresholds=thresholds,
                        formats=tuple(f for f in FORMATS if f in formats) if formats else tuple(FORMATS),
                        render=RenderOptions(notes_md=notes_md, base_url=base_url or None,
                                             timestamp=timestamp_now() if timestamp else None,
                                             self_contained=self_contained),
                        jobs=jobs, executor=executor, ray_address=ray_address)
    with build_progress(len(files)) as progress:
        result = build(list(files), out, opts, list(run_ids) or None, progress=progress,
                       before_publish=functools.partial(_summary, out))
    for u in result.unreadable:
        click.echo(f"tim-report: error: {safe(u['file'])}: {safe(u['reason'])} ({safe(u['id'])} left out; the rest was "
                   "built)", err=True)
    if result.unreadable:
        sys.exit(EXIT_UNREADABLE_STEP)


def _summary(out: Path, result) -> None:
    """The build's lines on stdout, flushed before the site is published: a standard output that takes nothing
    (`> /dev/full`) fails the build before anything moves into OUTPUT."""
    try:
        _say(out, result)
    except OSError as exc:  # click.echo flushes each line
        raise StdoutRefused(exc) from None
    flush_stdout()


def _say(out: Path, result) -> None:
    if len(result.rows) <= RUN_LINES_MAX:
        for row in result.rows:
            click.echo(summary_line(row))
    cps = result.change_steps
    for cp in cps[:CHANGE_LINES_MAX]:
        click.echo(f"change point: {safe(cp['sentence'])}")
    if len(cps) > CHANGE_LINES_MAX:
        click.echo(f"... and {len(cps) - CHANGE_LINES_MAX} more change points (index.html, index.json)")
    n = len(result.rows)
    click.echo(f"{n} batch{'es' if n != 1 else ''}: {result.analysed} analysed, {result.reused} reused from the cache, "
               f"in {fixed(result.seconds, 1)} s; wrote {safe(out)}/")
    if result.run:  # last, where a reader of a CI log looks first
        click.echo(f"run verdict: {safe(result.run['verdict'])}")


def read_notes(path: Path) -> str:
    """--notes: a regular file (a FIFO would block, /dev/zero never end) of at most NOTES_MAX_BYTES, UTF-8."""
    regular_file(path, "markdown file")
    try:
        with open(path, "rb") as fh:
            data = fh.read(NOTES_MAX_BYTES + 1)
        if len(data) > NOTES_MAX_BYTES:
            raise BadInput(path, f"notes are larger than {fmt(NOTES_MAX_BYTES)} bytes, more than a page should carry")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(path, f"cannot read notes: {exc}") from None

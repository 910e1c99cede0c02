"""`tim-report build FILES -o DIR`: one report per batch plus the index."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import BadInput
from .options import (executor_option, fail_cleanly, format_hint_option, input_files, key_option, max_tokens_option,
                      meta_option, output_path, parse_keys, parse_meta, pickle_option, ppo_eps_option, ray_address_option,
                      timestamp_now, timestamp_option, tokenizer_option)
from .progress import build_progress
from .text import safe, summary_line


RUN_LINES_MAX = 20  # a longer run prints its summary line only: the index lists every step
CHANGE_LINES_MAX = 10


@click.command("build")
@input_files
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output folder (the site).")
@click.option("--run-id", "run_ids", multiple=True,
              help="Run folder name, once per input (default: the file's stem, or step_N); a run folder's steps get it as a prefix.")
@key_option
@meta_option
@format_hint_option
@max_tokens_option
@pickle_option
@tokenizer_option
@ppo_eps_option
@click.option("--notes", "notes", type=click.Path(path_type=Path, dir_okay=False),
              help="Markdown file with your narrative, shown after the headline (raw HTML is escaped).")
@timestamp_option
@click.option("--format", "formats", multiple=True, type=click.Choice(["html", "md", "json"]),
              help="Write only these formats (repeatable; default all three): html pages, report.md files, summary/samples JSON.")
@click.option("--base-url", metavar="URL", help="Make the markdown's links absolute under URL (e.g. the GitHub Pages site), for a PR comment.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Analyse this many batches at once, in separate processes (same output as --jobs 1); with "
                   "--executor ray and no --ray-address, the CPUs of the local Ray.")
@executor_option
@ray_address_option
@fail_cleanly
def build_command(files, out, run_ids, keys, meta, format_hint, max_tokens, allow_pickle, tokenizer, ppo_eps, notes, timestamp, formats,
                  base_url, jobs, executor, ray_address):
    """Analyse step batches and write the report site into OUTPUT.

    FILES are step batch files, one step's folder (prime-rl step_S/), or run folders (prime-rl token_exports/,
    a NeMo-RL log dir, a slime/miles --dump-details dir, a SkyRL export, a folder of step files): one report per step.
    """
    from ..build import FORMATS, BuildOptions, build
    from ..config import Thresholds
    from ..io import meta_overrides

    out = output_path(out)
    if ray_address is not None and executor != "ray":
        raise BadInput("--ray-address", "applies to --executor ray only")
    opts = BuildOptions(keys=parse_keys(keys), meta=meta_overrides(parse_meta(meta)), allow_pickle=allow_pickle, tokenizer=tokenizer,
                        thresholds=Thresholds(ppo_eps_low=ppo_eps[0], ppo_eps_high=ppo_eps[1]),
                        formats=tuple(f for f in FORMATS if f in formats) if formats else FORMATS,
                        base_url=base_url or None, jobs=jobs, timestamp=timestamp_now() if timestamp else None,
                        format_hint=format_hint, max_tokens=max_tokens, executor=executor, ray_address=ray_address)
    if notes is not None:
        try:
            opts.notes_md = notes.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(notes, f"cannot read notes: {exc}") from None
    with build_progress(len(files)) as progress:
        result = build(list(files), out, opts, list(run_ids) or None, progress=progress)
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
               f"in {result.seconds:.1f} s; wrote {safe(out)}/")

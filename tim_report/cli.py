"""Command-line interface: Click wiring only. Bad input → one line on stderr, exit 2."""

from __future__ import annotations

import contextlib
import functools
import json
import sys
import warnings
from pathlib import Path

import click

from .errors import BadInput


def _fail_cleanly(fn):
    """Turn BadInput into `tim-report: error: FILE: problem` and exit 2, without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BadInput as exc:
            click.echo(f"tim-report: error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


def _show_warning(message, category, filename, lineno, file=None, line=None):
    click.echo(f"tim-report: warning: {message}", err=True)


def _parse_keys(values: tuple[str, ...]) -> dict[str, str]:
    keys = {}
    for v in values:
        role, sep, name = v.partition("=")
        if not sep or not role or not name:
            raise BadInput("--key", f"'{v}' is not ROLE=NAME")
        keys[role.strip()] = name.strip()
    return keys


input_files = click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
key_option = click.option("--key", "keys", multiple=True, metavar="ROLE=NAME",
                          help="Use key NAME for ROLE (rollout, trainer, mask, tokens, text, group, reward, advantage, shadow, prompt).")
pickle_option = click.option("--allow-pickle", is_flag=True,
                             help="Allow full unpickling (e.g. verl DataProto). Runs code from the file: trusted files only.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tim-report")
def main() -> None:
    """tim-report: how far your rollout engine and your trainer disagree, and why."""
    warnings.showwarning = _show_warning


@main.command()
@input_files
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="Output folder (the site).")
@click.option("--run-id", "run_ids", multiple=True, help="Run folder name, once per input (default: the file's stem).")
@key_option
@pickle_option
@click.option("--tokenizer", type=click.Path(), help="Local tokenizer folder to decode token ids (offline).")
@click.option("--ppo-eps", nargs=2, type=float, default=(0.2, 0.28), show_default=True, metavar="LOW HIGH",
              help="PPO clip ε for phantom clipping and routing.")
@click.option("--notes", "notes", type=click.Path(path_type=Path, dir_okay=False),
              help="Markdown file with your narrative, shown after the headline (raw HTML is escaped).")
@click.option("--timestamp", is_flag=True, help="Stamp the build time into the pages (off: same input, same bytes).")
@click.option("--format", "formats", multiple=True, type=click.Choice(["html", "md", "json"]),
              help="Write only these formats (repeatable; default all three): html pages, report.md files, summary/samples JSON.")
@click.option("--base-url", metavar="URL", help="Make the markdown's links absolute under URL (e.g. the GitHub Pages site), for a PR comment.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Analyse this many batches at once, in separate processes (same output as --jobs 1).")
@_fail_cleanly
def build(files, out, run_ids, keys, allow_pickle, tokenizer, ppo_eps, notes, timestamp, formats, base_url, jobs):
    """Analyse step batches and write the report site into OUTPUT."""
    from .analysis import Thresholds
    from .site import FORMATS, BuildOptions, build as build_site

    opts = BuildOptions(keys=_parse_keys(keys), allow_pickle=allow_pickle, tokenizer=tokenizer,
                        thresholds=Thresholds(ppo_eps_low=ppo_eps[0], ppo_eps_high=ppo_eps[1]),
                        formats=tuple(f for f in FORMATS if f in formats) if formats else FORMATS,
                        base_url=base_url or None, jobs=jobs)
    if notes is not None:
        try:
            opts.notes_md = notes.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(notes, f"cannot read notes: {exc}") from None
    if timestamp:
        from datetime import datetime, timezone

        opts.timestamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with _progress(len(files)) as progress:
        reports = build_site(list(files), out, opts, list(run_ids) or None, progress=progress)
    for r in reports:
        m = r.metrics
        click.echo(f"{r.run['id']}: {m['tokens']} tokens, {m['sequences']} sequences, "
                   f"median |δ| {m['abs_delta_median']:.3g} nats, KL k3 {m['kl_k3']:.3g}, ESS {m['ess']:.4f}")
    click.echo(f"wrote {out}/")


PROGRESS_MIN_FILES = 8  # a build of this many files shows a progress bar even when stderr is not a terminal


@contextlib.contextmanager
def _progress(total: int):
    """A rich progress bar on stderr, only for several files (when stderr is a terminal) or many; else None."""
    if total < 2 or (total < PROGRESS_MIN_FILES and not sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("analysing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=sys.stderr.isatty()) as bar:
        task = bar.add_task("analyse", total=total)
        yield lambda done, _total: bar.update(task, completed=done)


@main.command()
@click.argument("file", type=click.Path(path_type=Path))
@key_option
@pickle_option
@click.option("--json", "as_json", is_flag=True, help="Print the mapping as JSON.")
@_fail_cleanly
def inspect(file, keys, allow_pickle, as_json):
    """Show the keys, shapes and dtypes of FILE and which were taken for which role, and why."""
    from .loader import describe

    info = describe(file, keys=_parse_keys(keys), allow_pickle=allow_pickle)
    if as_json:
        click.echo(json.dumps(info, indent=1, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    keys_table = Table(title=f"{info['file']}: {len(info['keys'])} keys", title_justify="left")
    for col in ("key", "shape", "dtype", "role"):
        keys_table.add_column(col)
    for e in info["keys"]:
        keys_table.add_row(e["key"], str(e["shape"]), e["dtype"], e["role"] or "")
    console.print(keys_table)
    roles_table = Table(title="roles", title_justify="left")
    for col in ("role", "key", "why"):
        roles_table.add_column(col)
    for role, c in info["roles"].items():
        roles_table.add_row(role, c["key"] or "-", c["reason"])
    console.print(roles_table)
    console.print(f"layout: {info['layout']}; {info['sequences']} sequences, {info['tokens']} tokens, "
                  f"{info['masked_tokens']} masked in")
    console.print(f"alignment: {info['alignment']}")
    for note in info["notes"]:
        console.print(f"note: {note}")


from .check import check as _check_command  # noqa: E402  (after the shared options it reuses)

main.add_command(_check_command)
from .commands.compare import compare_command as _compare_command  # noqa: E402

main.add_command(_compare_command)
from .commands.capture import capture_command as _capture_command  # noqa: E402

main.add_command(_capture_command)

if __name__ == "__main__":  # pragma: no cover
    main()

"""`tim-report inspect PATH`: which framework and layout a dump is, which keys fill which role, what was excluded and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .options import fail_cleanly, load_options
from .text import safe


@click.command("inspect")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the mapping as JSON.")
@fail_cleanly
@load_options
def inspect_command(file, as_json, load) -> None:
    """Show the framework and layout of FILE (a file or a step folder), its keys, which were taken for which role
    and why, and what was excluded from the metrics and why. A run folder lists its steps."""
    from ..io import describe

    info = describe(file, load)
    if as_json:
        click.echo(json.dumps(info, indent=1, default=str))  # JSON escapes every control character itself
        return
    from rich.console import Console

    console = Console(highlight=False)
    if "sources" in info:
        _print_steps(console, info)
        return
    _print_file(console, info)


def t(value: Any) -> Any:
    """A file-supplied string for rich: escaped for the terminal (tim_report.cli.text.safe), never read as markup."""
    from rich.text import Text

    return Text(safe("" if value is None else value))


def _table(title: Any, columns: Any, rows: Any) -> Any:
    from rich.table import Table

    table = Table(title=t(title), title_justify="left")
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*[t(v) for v in row])
    return table


def _print_steps(console, info: dict) -> None:
    console.print(_table(f"{info['file']}: {len(info['sources'])} steps", ("run id", "step", "framework", "found as", "files"),
                         [(s["run_id"], s["step"], s["framework"], s["found_as"], len(s["paths"])) for s in info["sources"]]))
    console.print(t("inspect one step (its file or folder) to see its keys, roles and exclusions"))


def _print_file(console, info: dict) -> None:
    console.print(t(f"framework: {info['framework']} ({info['found_as']}); step {info['step']}"))
    cols = [c for c in ("key", "shape", "dtype", "type", "role") if any(c in e for e in info["keys"])]
    console.print(_table(f"{info['file']}: {len(info['keys'])} keys", cols, [[e.get(c) for c in cols] for e in info["keys"]]))
    console.print(_table("roles", ("role", "key", "why"), [(role, c["key"] or "-", c["reason"]) for role, c in info["roles"].items()]))
    console.print(t(f"layout: {info['layout']}; {info['sequences']} sequences, {info['tokens']} tokens, "
                    f"{info['masked_tokens']} masked in"))
    console.print(t(f"alignment: {info['alignment']}"))
    if info["exclusions"]:
        console.print(_table("excluded from the metrics", ("what", "tokens", "why"),
                             [(e["what"], e["tokens"], e["why"]) for e in info["exclusions"]]))
    for note in info["notes"]:
        console.print(t(f"note: {note}"))

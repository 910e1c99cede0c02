"""`tim-report inspect PATH`: which framework and layout a dump is, which keys fill which role, what was excluded and why."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .options import fail_cleanly, format_hint_option, key_option, parse_keys, pickle_option


@click.command("inspect")
@click.argument("file", type=click.Path(path_type=Path))
@key_option
@format_hint_option
@pickle_option
@click.option("--json", "as_json", is_flag=True, help="Print the mapping as JSON.")
@fail_cleanly
def inspect_command(file, keys, format_hint, allow_pickle, as_json):
    """Show the framework and layout of FILE (a file or a step folder), its keys, which were taken for which role
    and why, and what was excluded from the metrics and why. A run folder lists its steps."""
    from ..io import describe

    info = describe(file, keys=parse_keys(keys), allow_pickle=allow_pickle, format_hint=format_hint)
    if as_json:
        click.echo(json.dumps(info, indent=1, default=str))
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    if "sources" in info:
        _print_steps(console, info, escape)
        return
    _print_file(console, info, escape)


def _print_steps(console, info: dict, escape) -> None:
    from rich.table import Table

    table = Table(title=f"{escape(info['file'])}: {len(info['sources'])} steps", title_justify="left")
    for col in ("run id", "step", "framework", "found as", "files"):
        table.add_column(col)
    for s in info["sources"]:
        table.add_row(escape(s["run_id"]), str(s["step"]), s["framework"], escape(s["found_as"]), str(len(s["paths"])))
    console.print(table)
    console.print("inspect one step (its file or folder) to see its keys, roles and exclusions")


def _print_file(console, info: dict, escape) -> None:
    from rich.table import Table

    console.print(f"framework: {escape(str(info['framework']))} ({escape(info['found_as'])}); step {info['step']}")
    keys_table = Table(title=f"{escape(info['file'])}: {len(info['keys'])} keys", title_justify="left")
    cols = [c for c in ("key", "shape", "dtype", "type", "role") if any(c in e for e in info["keys"])]
    for col in cols:
        keys_table.add_column(col)
    for e in info["keys"]:
        keys_table.add_row(*[escape(str(e.get(c) if e.get(c) is not None else "")) for c in cols])
    console.print(keys_table)
    roles_table = Table(title="roles", title_justify="left")
    for col in ("role", "key", "why"):
        roles_table.add_column(col)
    for role, c in info["roles"].items():
        roles_table.add_row(role, escape(c["key"] or "-"), escape(c["reason"]))
    console.print(roles_table)
    console.print(f"layout: {escape(info['layout'])}; {info['sequences']} sequences, {info['tokens']} tokens, "
                  f"{info['masked_tokens']} masked in")
    console.print(f"alignment: {escape(info['alignment'])}")
    if info["exclusions"]:
        ex = Table(title="excluded from the metrics", title_justify="left")
        for col in ("what", "tokens", "why"):
            ex.add_column(col)
        for e in info["exclusions"]:
            ex.add_row(escape(e["what"]), str(e["tokens"]), escape(e["why"]))
        console.print(ex)
    for note in info["notes"]:
        console.print(f"note: {escape(note)}")

"""`tim-report inspect FILE`: the keys, shapes and dtypes of a file and which were taken for which role, and why."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .options import fail_cleanly, key_option, parse_keys, pickle_option
from .text import safe


@click.command("inspect")
@click.argument("file", type=click.Path(path_type=Path))
@key_option
@pickle_option
@click.option("--json", "as_json", is_flag=True, help="Print the mapping as JSON.")
@fail_cleanly
def inspect_command(file, keys, allow_pickle, as_json):
    """Show the keys, shapes and dtypes of FILE and which were taken for which role, and why."""
    from ..io import describe

    info = describe(file, keys=parse_keys(keys), allow_pickle=allow_pickle)
    if as_json:
        click.echo(json.dumps(info, indent=1, default=str))  # JSON escapes every control character itself
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def t(value) -> Text:  # file-supplied strings: escaped for the terminal, never read as rich markup
        return Text(safe(value))

    console = Console(highlight=False)
    keys_table = Table(title=t(f"{info['file']}: {len(info['keys'])} keys"), title_justify="left")
    for col in ("key", "shape", "dtype", "role"):
        keys_table.add_column(col)
    for e in info["keys"]:
        keys_table.add_row(t(e["key"]), t(e["shape"]), t(e["dtype"]), t(e["role"] or ""))
    console.print(keys_table)
    roles_table = Table(title="roles", title_justify="left")
    for col in ("role", "key", "why"):
        roles_table.add_column(col)
    for role, c in info["roles"].items():
        roles_table.add_row(t(role), t(c["key"] or "-"), t(c["reason"]))
    console.print(roles_table)
    for line in (f"layout: {info['layout']}; {info['sequences']} sequences, {info['tokens']} tokens, "
                 f"{info['masked_tokens']} masked in", f"alignment: {info['alignment']}", *(f"note: {n}" for n in info["notes"])):
        console.print(t(line))

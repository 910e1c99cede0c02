"""What every command shares: clean failure on bad input, the shared options, NAME=VALUE parsing.

A leaf module: it imports no command, so commands can use plain decorators from it.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from ..config import PPO_EPS_HIGH, PPO_EPS_LOW
from ..errors import BadInput


def fail_cleanly(fn):
    """Turn BadInput into `tim-report: error: FILE: problem` and exit 2, without a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BadInput as exc:
            click.echo(f"tim-report: error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


def show_warning(message, category, filename, lineno, file=None, line=None):
    """warnings.showwarning for the CLI: one line, no source location."""
    click.echo(f"tim-report: warning: {message}", err=True)


def parse_pairs(values: tuple[str, ...], option: str, what: str) -> dict[str, str]:
    """`NAME=VALUE` strings (repeatable option) as a dict; a malformed one is bad input."""
    out = {}
    for v in values:
        name, sep, value = v.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise BadInput(option, f"'{v}' is not {what}")
        out[name.strip()] = value.strip()
    return out


def parse_keys(values: tuple[str, ...]) -> dict[str, str]:
    return parse_pairs(values, "--key", "ROLE=NAME")


def timestamp_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


input_files = click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
key_option = click.option("--key", "keys", multiple=True, metavar="ROLE=NAME",
                          help="Use key NAME for ROLE (rollout, trainer, mask, tokens, text, group, reward, advantage, shadow, prompt).")
pickle_option = click.option("--allow-pickle", is_flag=True,
                             help="Allow full unpickling (e.g. verl DataProto). Runs code from the file: trusted files only.")
format_hint_option = click.option(
    "--format-hint", metavar="FRAMEWORK", default=None,
    help="Read the input as this framework's dump instead of detecting it from the content: prime-rl, slime, miles, "
         "nemo-rl, skyrl, verl, or dict (a plain dict of arrays).")
tokenizer_option = click.option("--tokenizer", type=click.Path(), help="Local tokenizer folder to decode token ids (offline).")
ppo_eps_option = click.option("--ppo-eps", nargs=2, type=float, default=(PPO_EPS_LOW, PPO_EPS_HIGH), show_default=True,
                              metavar="LOW HIGH", help="PPO clip ε for phantom clipping, routing and the precision gap.")
timestamp_option = click.option("--timestamp", is_flag=True, help="Stamp the build time into the pages (off: same input, same bytes).")

"""Command-line interface: Click wiring only, one module per command. Bad input → one line on stderr, exit 2."""

from __future__ import annotations

import io
import sys
import warnings

import click

from .bisect import bisect_command
from .build import build_command
from .capture import capture_command
from .check import check_command
from .compare import compare_command
from .export import export_command
from .inspect import inspect_command
from .options import start_warnings
from .rescore import rescore_command
from .watch import watch_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tim-report")
def main() -> None:
    """tim-report: how far your rollout engine and your trainer disagree, and why."""
    start_warnings()
    # A terminal or CI log that cannot show a character (PYTHONIOENCODING=ascii, a C locale) gets it as a \u escape,
    # not a UnicodeEncodeError traceback: file-supplied key names, tokens and models hold any character.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    # numpy's floating-point warnings (overflow in exp of a broken batch, ...) are not the user's to act on,
    # and a second stderr line would break the one-line promise; what the data holds is in the report.
    warnings.filterwarnings("ignore", category=RuntimeWarning)


for _command in (build_command, inspect_command, check_command, compare_command, capture_command, watch_command,
                 export_command, bisect_command, rescore_command):
    main.add_command(_command)

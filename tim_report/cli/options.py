"""What every command shares: clean failure on bad input, the shared options, NAME=VALUE parsing.

A leaf module: it imports no command, so commands can use plain decorators from it.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import warnings
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import click

from ..catalogue.frameworks import hint_help
from ..catalogue.numbers import fmt
from ..config import MAX_TOKENS, PPO_EPS_HIGH, PPO_EPS_LOW, Thresholds
from ..errors import BadInput, UnpicklingWarning
from .text import safe


def fail_cleanly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn BadInput into `tim-report: error: FILE: problem` and exit 2, without a traceback.

    SIGTERM is handled like Ctrl-C, so a killed build still unwinds: its staging folder is removed and
    its workers are stopped."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return fn(*args, **kwargs)
        except BadInput as exc:
            click.echo(f"tim-report: error: {safe(exc)}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("tim-report: interrupted; the staging folder was removed", err=True)
            sys.exit(130)
        except StdoutRefused as exc:  # said before the output was published (build's summary)
            _stdout_broken()
            click.echo(f"tim-report: error: cannot write to standard output ({exc.reason})", err=True)
            sys.exit(2)
        except OSError as exc:
            if not _stdout_broken():
                raise
            click.echo(f"tim-report: error: cannot write to standard output ({exc.strerror or exc})", err=True)
            sys.exit(2)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return wrapper


class StdoutRefused(Exception):
    """Standard output refused the command's lines (`> /dev/full`, a closed pipe): not an OSError, so that the staging
    of a build lets it through untouched (nothing published) and fail_cleanly says it as one line, exit 2."""

    def __init__(self, exc: OSError):
        super().__init__(exc.strerror or str(exc))
        self.reason = exc.strerror or str(exc)


def flush_stdout() -> None:
    """Flush what the command printed; StdoutRefused when standard output takes nothing."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        raise StdoutRefused(exc) from None


def _stdout_broken() -> bool:
    """True when standard output refuses writes (`>/dev/full`: even an empty write fails); it is then pointed at
    /dev/null, so that Python's own flush at exit does not print a second error."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (a test runner's buffer): it cannot be full
        return False
    try:
        os.write(fd, b"")
        return False
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
        return True


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


_SAID: set[str] = set()  # the warning lines this command has printed


def start_warnings() -> None:
    """A command's warnings: one line each, no source location, each distinct line once per command. Every
    UnpicklingWarning reaches show_warning (Python's registry would drop a repeat depending on what ran before),
    so a command names each file it unpickles exactly once, in `build`, `inspect`, `check` and `compare` alike."""
    _SAID.clear()
    warnings.showwarning = show_warning
    warnings.filterwarnings("always", category=UnpicklingWarning)


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """warnings.showwarning for the CLI: one line, no source location, never the same line twice."""
    text = f"tim-report: warning: {safe(message)}"
    if text not in _SAID:
        _SAID.add(text)
        click.echo(text, err=True)


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


def output_path(value: str) -> Path:
    """`-o` as a Path; an empty string would silently mean the current folder, so it is bad input."""
    if not value.strip():
        raise BadInput("-o", "is empty: name the output folder")
    return Path(value)


def timestamp_now() -> str:
    from datetime import datetime

    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


input_files = click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))


def load_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The six options that say how to read a batch (--key, --meta, --format-hint, --max-tokens, --allow-pickle,
    --tokenizer), handed to the command as one `io.LoadOptions` named `load`. Put it under `fail_cleanly`, so a
    malformed value is one line of error."""

    @functools.wraps(fn)
    def wrapper(*args: Any, keys: tuple[str, ...], meta: tuple[str, ...], format_hint: str | None, max_tokens: int,
                allow_pickle: bool, tokenizer: str | None, **kwargs: Any) -> Any:
        from ..io import LoadOptions, meta_overrides

        load = LoadOptions(keys=parse_keys(keys), meta=meta_overrides(parse_meta(meta)), allow_pickle=allow_pickle,
                           tokenizer=tokenizer, format_hint=format_hint, max_tokens=max_tokens)
        return fn(*args, load=load, **kwargs)

    for option in (tokenizer_option, pickle_option, max_tokens_option, format_hint_option, meta_option, key_option):
        wrapper = option(wrapper)
    return wrapper


key_option = click.option("--key", "keys", multiple=True, metavar="ROLE=NAME",
                          help="Use key NAME for ROLE (rollout, trainer, mask, tokens, text, group, reward, advantage, shadow, "
                               "floor, recompute, train, prompt, tool, turn).")
pickle_option = click.option("--allow-pickle", is_flag=True,
                             help="Allow full unpickling (e.g. verl DataProto). Runs code from the file: trusted files only.")
format_hint_option = click.option("--format-hint", metavar="FRAMEWORK", default=None, help=hint_help())
tokenizer_option = click.option("--tokenizer", type=click.Path(), help="Local tokenizer folder to decode token ids (offline).")
def _thresholds(_ctx: click.Context, _param: click.Parameter, value: tuple[float, float]) -> Thresholds:
    return Thresholds(ppo_eps_low=value[0], ppo_eps_high=value[1])


# --ppo-eps, handed to the command as the `config.Thresholds` it sets (one place builds them for every command)
ppo_eps_option = click.option("--ppo-eps", "thresholds", nargs=2, type=float, default=(PPO_EPS_LOW, PPO_EPS_HIGH),
                              show_default=True, metavar="LOW HIGH", callback=_thresholds,
                              help="PPO clip ε for phantom clipping, routing and the precision gap.")
meta_option = click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE",
                           help="Name what the file does not say (repeatable): model, rollout_engine, rollout_dtype, "
                                "trainer_engine, trainer_dtype, device, step. Overrides the file's own meta.")


def parse_meta(values: tuple[str, ...]) -> dict[str, str]:
    return parse_pairs(values, "--meta", "KEY=VALUE")


max_tokens_option = click.option("--max-tokens", type=click.IntRange(min=1), default=None, metavar="N",
                                 help=f"Refuse a batch of more than N token positions, before reading it (default {fmt(MAX_TOKENS)}: "
                                      "about 4 GB of analysis memory).")
timestamp_option = click.option("--timestamp", is_flag=True, help="Stamp the build time into the pages (off: same input, same bytes).")
self_contained_option = click.option(
    "--self-contained", is_flag=True,
    help="Every page carries its own chart runtime and stylesheet (about 0.9 MB a page), to attach one page anywhere; "
         "by default the pages share one copy in the output's assets/ folder.")
executor_option = click.option(
    "--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
    help="Where each step is analysed: here (and in --jobs processes), or as Ray tasks (pip install -e \".[ray]\"; "
         "same output; docs/scale.md).")
ray_address_option = click.option(
    "--ray-address", metavar="ADDRESS", default=None,
    help="With --executor ray: the cluster to join (auto, or ray://HOST:10001); default a local Ray started for this "
         "build. Input paths must be valid on the worker nodes.")

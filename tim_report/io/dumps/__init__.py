"""Framework dumps: one module per framework, each defining `DUMP`, listed in `catalogue/frameworks.py`.

A `Dump` says all tim-report knows of a framework's files: how its content is recognised (the keys of a JSON-lines
record, the names a pickle mentions), the shapes its run folder takes (the file of each step, or the step folder of
rank files, the folder an output dir keeps them in, the marker written once a step is complete), its layout notes,
and its reader. `io/detect.py`, `io/discover.py`, `io.load`, `inspect` and `watch` ask the registry (`dumps()`,
`dump(name)`), never a framework by name. Names of files are written with placeholders (`rank_{R}.jsonl`): each
`{...}` stands for a number, the first one the step (or the rank), and the same text is what messages and the
docs show.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ...catalogue import frameworks


@dataclass(frozen=True)
class Dump:
    name: str  # its name in catalogue/frameworks.py
    layout: str  # what its files hold and how they line up, in a sentence or two (docs/formats.md)
    # Recognised from the content (never the name alone):
    record_keys: frozenset[str] = frozenset()  # a JSON-lines dump: keys its first record always has
    pickled: Callable[[set[str]], bool] | None = None  # a pickle (.pt zip or raw): from the names its opcodes mention
    pickled_words: str = ""  # that rule in words, for docs/formats.md
    # Its run folder:
    folder: str | None = None  # the folder an output dir keeps its dumps in (token_exports, dumped_data, ...)
    step_files: tuple[str, ...] = ()  # a step's file, one pattern per kind; inside `folder` only, when it has one
    rank_files: str | None = None  # a step is a `step_S/` folder of these (prime-rl's rank_{R}.jsonl)
    marker: str | None = None  # written into a step folder once the step is complete: `watch` waits for it
    # Its reader (a framework read as a plain dict of arrays has `values` instead, and maybe `annotate`):
    read: Callable[..., tuple[Any, list[dict]]] | None = None  # (Source, allow_pickle) → (StepBatch, inspect's fields)
    values: Callable[..., dict] | None = None  # (path, allow_pickle) → its values, matched to roles like any dict
    annotate: Callable[..., None] | None = None  # (StepBatch, values): what the dict reading does not know
    source: Callable[..., Any] | None = None  # a file of it → its step's Source when a step is several files, or None
    patterns: tuple[re.Pattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(pattern(p) for p in self.step_files))

    @property
    def rank_pattern(self) -> re.Pattern | None:
        return pattern(self.rank_files) if self.rank_files else None


def glob(name: str) -> str:
    """`rank_{R}.jsonl` → `rank_*.jsonl`, to list such files (and to name them in a message)."""
    return re.sub(r"\{[^{}]*\}", "*", name)


@cache
def pattern(name: str) -> re.Pattern:
    """`train_data_step{N}.jsonl` → a regex for such names (to `fullmatch`), each `{...}` a group of digits."""
    return re.compile(r"(\d+)".join(re.escape(part) for part in re.split(r"\{[^{}]*\}", name)))


def dumps() -> tuple[Dump, ...]:
    """Every registered framework's dump, in the catalogue's order (the order detection tries them)."""
    return tuple(_load(f.name, f.module) for f in frameworks.FRAMEWORKS.values() if f.module)


def dump(name: str | None) -> Dump | None:
    """The dump of the framework `name` (None for a plain dict, or a name not registered)."""
    f = frameworks.FRAMEWORKS.get(name or "")
    return _load(f.name, f.module) if f is not None and f.module else None


@cache
def _load(name: str, module: str) -> Dump:
    found = getattr(importlib.import_module(f"{__name__}.{module}"), "DUMP", None)
    if not isinstance(found, Dump) or found.name != name:
        raise TypeError(f"{__name__}.{module} must define DUMP = Dump(name={name!r}, ...)")
    return found

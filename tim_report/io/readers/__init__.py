"""The file formats: a suffix → the module that reads such a file into plain values (arrays, lists, strings, dicts).

One list, read by discovery (which files of a folder are inputs), detection (how to look inside one without reading
it: the first record of JSON lines, the names a pickle mentions) and `io/files.read_file`. A new file format is a
module here defining `read(path, allow_pickle)` and one entry below. Framework dumps are not file formats: they
are in `io/dumps/`, and read their files with these readers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FileFormat:
    suffixes: tuple[str, ...]  # lower case, with the dot
    module: str  # tim_report.io.readers.<module> defines read(path, allow_pickle)
    peek: str | None  # how detection looks inside: "records" (a JSON-lines record's keys), "pickle" (its names), None


FILE_FORMATS = (
    FileFormat((".pt", ".pth"), "pt", "pickle"),
    FileFormat((".npz",), "npz", None),
    FileFormat((".jsonl",), "jsonl", "records"),
    FileFormat((".pkl",), "pkl", "pickle"),
)
SUFFIXES: dict[str, FileFormat] = {s: f for f in FILE_FORMATS for s in f.suffixes}


def reader(suffix: str) -> Callable[..., Any]:
    """The `read(path, allow_pickle)` of the format with this suffix (KeyError if none has it)."""
    return importlib.import_module(f"{__name__}.{SUFFIXES[suffix].module}").read


def named() -> str:
    """The suffixes as messages list them: `.pt, .pth, .npz, .jsonl or .pkl`."""
    suffixes = list(SUFFIXES)
    return ", ".join(suffixes[:-1]) + " or " + suffixes[-1]

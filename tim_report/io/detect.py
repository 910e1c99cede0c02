"""Which framework wrote a file, from its content: never from its name alone, and never by unpickling.

A file format says how to look inside (`io/readers`' `peek`); each framework's dump says what it looks for
(`io/dumps`: `record_keys`, `pickled`), tried in the registry's order. JSON lines are told apart by the keys of
their first record; pickles (a torch `.pt` zip's `data.pkl`, or a raw `.pkl`) by the class names and dict keys
their opcodes mention, read with `pickletools` without running anything. `--format-hint` skips this.
"""

from __future__ import annotations

import json
import pickletools
import re
import zipfile
from pathlib import Path

from ..catalogue import frameworks
from ..errors import BadInput
from .dumps import dumps
from .readers import SUFFIXES
from .text import first_line

PEEK_BYTES = 1 << 20  # structural keys and class names sit at the start of a pickle


def check_hint(hint: str | None) -> str | None:
    if hint is not None and hint not in frameworks.FRAMEWORKS:
        raise BadInput("--format-hint", f"unknown framework '{hint}' (one of: {', '.join(frameworks.FRAMEWORKS)})")
    return hint


def detect_file(path: Path) -> str:
    """The framework that wrote this file, from what it holds; "dict" for a plain dict of arrays."""
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is not None and fmt.peek == "records":
        return jsonl_framework(first_record(path))
    if fmt is not None and fmt.peek == "pickle":
        return pickle_framework(pickle_words(path))
    return "dict"


def first_record(path: Path) -> dict:
    """The first JSON object of a JSON-lines file (an empty file has none). Only its first PEEK_BYTES are read: a
    longer first line (a sample's per-token lists) gives its top-level keys, and the integers among its values, from
    that prefix, so detection costs the same for a 2 GiB line as for a short one."""
    try:
        with open(path, "rb") as fh:
            while raw := fh.readline(PEEK_BYTES):
                if not raw.strip():
                    continue
                if len(raw) == PEEK_BYTES and not raw.endswith(b"\n"):
                    return _top_level(raw.decode("utf-8", "ignore"))  # a cut multi-byte character is dropped
                rec = json.loads(raw.decode("utf-8"))
                return rec if isinstance(rec, dict) else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(path, f"not valid JSON lines ({first_line(exc)})") from exc
    return {}


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"\s*:?|[\[\]{}]')
_INT_VALUE = re.compile(r"\s*(-?\d{1,18})\s*[,}]")


def _top_level(prefix: str) -> dict:
    """The top-level keys of the JSON object that `prefix` starts (None for each value, or the value when it is a
    plain integer), without parsing its values: strings and brackets are matched, numbers skipped."""
    if not prefix.lstrip().startswith("{"):
        return {}
    out: dict = {}
    depth = 0
    for m in _TOKEN.finditer(prefix):
        token = m.group(0)
        if token in "[{":
            depth += 1
        elif token in "]}":
            depth -= 1
        elif depth == 1 and token.endswith(":"):
            try:
                key = json.loads(token[:-1].rstrip())
            except ValueError:
                continue
            value = _INT_VALUE.match(prefix, m.end())
            out[key] = int(value.group(1)) if value else None
    return out


def jsonl_framework(record: dict) -> str:
    """The first framework whose dump's records always have these keys."""
    keys = set(record)
    return next((d.name for d in dumps() if d.record_keys and d.record_keys <= keys), "dict")


def is_zip(path: Path) -> bool:
    """A torch.save zip starts with a local file header (`zipfile.is_zipfile` also says yes for a raw
    pickle that merely holds torch.save bytes, as some frameworks' raw pickles do)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def pickle_words(path: Path) -> set[str]:
    """Class names (`module.Name`) and short strings a pickle mentions, without unpickling it."""
    try:
        if is_zip(path):
            with zipfile.ZipFile(path) as zf:
                name = next((n for n in zf.namelist() if n.endswith("data.pkl")), None)
                if name is None:
                    return set()
                with zf.open(name) as fh:
                    data = fh.read(PEEK_BYTES)
        else:
            with open(path, "rb") as fh:
                data = fh.read(PEEK_BYTES)
    except Exception:
        return set()
    return _words(data)


def _words(data: bytes) -> set[str]:
    words: set[str] = set()
    recent: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("GLOBAL", "INST") and isinstance(arg, str):
                words.add(arg.replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(recent) >= 2:
                words.add(f"{recent[-2]}.{recent[-1]}")
            elif isinstance(arg, str) and len(arg) <= 64:
                words.add(arg)
                recent = (recent + [arg])[-2:]
    except Exception:
        pass
    return words


def pickle_framework(words: set[str]) -> str:
    """The first framework whose dump's rule accepts the names this pickle mentions."""
    return next((d.name for d in dumps() if d.pickled is not None and d.pickled(words)), "dict")

"""A file on disk → `RawFile`: its values by key, the meta it carries, and whether it is canonical."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadInput, parser_limit, regular_file
from .canonical import CANONICAL_FORMAT
from .readers import SUFFIXES, named, reader
from .readers.npz import NpzMembers


@dataclass
class RawFile:
    """A file's contents as plain values (numpy arrays, lists, strings, dicts), keyed by name."""

    path: Path
    values: Mapping[str, Any]  # a dict, or NpzMembers (read on first use)
    meta: dict[str, Any] = field(default_factory=dict)
    canonical: bool = False


def read_file(path: str | Path, *, allow_pickle: bool = False) -> RawFile:
    path = Path(path)
    if not path.exists():
        raise BadInput(path, "no such file")
    if path.is_dir():
        raise BadInput(path, f"is a directory, expected a {named()} file")
    regular_file(path)
    if path.stat().st_size == 0:
        raise BadInput(path, "file is empty")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise BadInput(path, f"unknown file type '{suffix or '(none)'}': expected {named()}")
    return raw_file(path, reader(suffix)(path, allow_pickle))


def raw_file(path: Path, values: Any) -> RawFile:
    """Values read by any reader → RawFile: nesting flattened one level, meta pulled out."""
    if isinstance(values, NpzMembers):  # flat by construction, and read lazily: never iterate its values
        meta = _extract_meta(path, values)
        return RawFile(path, values, meta, meta.pop("__canonical__", False))
    if not isinstance(values, dict):
        raise BadInput(path, f"holds a {type(values).__name__}, expected a dict of arrays")
    values = _flatten(values)
    meta = _extract_meta(path, values)
    canonical = meta.pop("__canonical__", False)
    return RawFile(path, values, meta, canonical)


def _flatten(values: dict[str, Any]) -> dict[str, Any]:
    """Promote one level of nesting ({'batch': {...}}) so aliases match inner names too."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if isinstance(v, dict) and k not in ("meta", "meta_info"):
            for ik, iv in v.items():
                out.setdefault(ik, iv)
                out[f"{k}.{ik}"] = iv
        else:
            out[k] = v
    return out


def _extract_meta(path: Path, values: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key in ("meta_info", "meta"):
        raw = values.pop(key, None)
        if raw is None:
            continue
        if isinstance(raw, np.ndarray) and raw.ndim == 0:
            raw = raw.item()
        if isinstance(raw, (bytes, str)):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise BadInput(path, f"'{key}' is not valid JSON") from exc
            except (RecursionError, ValueError) as exc:  # nested too deep, an integer of too many digits
                bad = parser_limit(path, exc)
                if bad is None:
                    raise
                raise BadInput(path, f"'{key}' {bad.problem}") from None
        if isinstance(raw, dict):
            if raw.get("format") == CANONICAL_FORMAT:
                meta["__canonical__"] = True
                raw = raw.get("meta", {})
            meta.update({str(k): v for k, v in raw.items() if _jsonable(v)})
    return meta


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False

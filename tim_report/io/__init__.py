"""Everything about files: the readers of every input format, the canonical format, atomic output.

    load(path)       a step batch file → StepBatch (BadInput with a one-line reason otherwise)
    describe(path)   what `tim-report inspect` prints: keys, shapes, dtypes, the role mapping and why
    save_batch(b, p) the canonical `.npz`

Nothing outside this package knows a file format or a framework's key names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadInput
from ..model import META_KEYS, StepBatch
from .assemble import build_batch
from .canonical import save_batch
from .files import RawFile, read_file
from .roles import ROLE_ALIASES, USER_ROLES, choose_roles
from .tokenizer import load_decoder

__all__ = ["ROLE_ALIASES", "USER_ROLES", "RawFile", "describe", "load", "read_file", "save_batch"]


def load(path: str | Path, *, keys: dict[str, str] | None = None, allow_pickle: bool = False,
         tokenizer: str | None = None, meta: dict[str, str] | None = None) -> StepBatch:
    """Read a step batch file into a StepBatch (raises BadInput with a one-line reason).

    `meta` (from `--meta KEY=VALUE`) names what the file does not: it overrides the file's own meta."""
    raw = read_file(path, allow_pickle=allow_pickle)
    batch = build_batch(raw, choose_roles(raw, keys))
    if tokenizer:
        batch.decoder = load_decoder(tokenizer)
    batch.meta.update(meta_overrides(meta or {}))
    return batch


def meta_overrides(pairs: dict[str, str]) -> dict:
    """`--meta` values checked against META_KEYS (a typo is bad input, not a silent no-op); step as an integer."""
    out: dict = {}
    for key, value in pairs.items():
        if key not in META_KEYS:
            raise BadInput("--meta", f"unknown key '{key}' (keys: {', '.join(META_KEYS)})")
        if key == "step":
            try:
                out[key] = int(value)
            except ValueError:
                raise BadInput("--meta", f"step={value}: not an integer") from None
        else:
            out[key] = value
    return out


def describe(path: str | Path, *, keys: dict[str, str] | None = None, allow_pickle: bool = False) -> dict[str, Any]:
    """What `tim-report inspect` prints: every key's shape/dtype and the role mapping, with reasons."""
    raw = read_file(path, allow_pickle=allow_pickle)
    roles = choose_roles(raw, keys)
    entries = []
    for k, v in sorted(raw.values.items()):
        if isinstance(v, np.ndarray):
            shape, dtype = list(v.shape), str(v.dtype)
        elif isinstance(v, list):
            shape, dtype = [len(v)], "list" + (f" of {type(v[0]).__name__}" if v else "")
        else:
            shape, dtype = [], type(v).__name__
        role = next((r for r, c in roles.items() if c.key == k), None)
        entries.append({"key": k, "shape": shape, "dtype": dtype, "role": role})
    batch = build_batch(raw, roles)
    return {
        "file": str(raw.path),
        "keys": entries,
        "roles": {r: {"key": c.key, "reason": c.reason} for r, c in roles.items()},
        "layout": batch.meta["layout"],
        "sequences": batch.n_seqs,
        "tokens": batch.n_tokens,
        "masked_tokens": int(batch.mask.sum()),
        "alignment": batch.meta["alignment"],
        "notes": batch.notes,
        "meta": dict(raw.meta),
    }

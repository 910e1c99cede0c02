"""`.pkl`: a raw pickle (`pickle.dump` of a dict of tensors or arrays), only with `--allow-pickle`.

Unpickling runs code from the file, so without the flag a `.pkl` is refused with a sentence saying so; with it the
file is unpickled once (a warning names it, as for every file unpickled), tensors become numpy arrays and a verl
DataProto is unwrapped, as for `.pt`. Framework dumps that are raw pickles are read by their own
dump module, which recognises them first.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from ...errors import BadInput
from .pt import to_plain, unpickling_failed, unwrap_dataproto, warn_unpickling

REFUSAL = ("a .pkl file is a pickle, and unpickling can run arbitrary code from the file: re-run with --allow-pickle "
           "if you trust it")


def read(path: Path, allow_pickle: bool) -> Any:
    return to_plain(unwrap_dataproto(unpickle(path, allow_pickle)), path)


def unpickle(path: Path, allow_pickle: bool, refusal: str = REFUSAL) -> Any:
    """The pickled object, only with --allow-pickle (else `refusal`, one line); a failure to unpickle is one line."""
    if not allow_pickle:
        raise BadInput(path, refusal)
    try:
        with open(path, "rb") as fh:
            obj = pickle.load(fh)
    except Exception as exc:
        raise unpickling_failed(path, exc) from exc
    warn_unpickling(path)
    return obj

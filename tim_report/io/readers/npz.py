"""`.npz`: np.load(allow_pickle=False) unless the user allows pickles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BadInput
from ..text import first_line


def read_npz(path: Path, allow_pickle: bool) -> Any:
    try:
        with np.load(path, allow_pickle=allow_pickle) as npz:
            return {k: npz[k] for k in npz.files}
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise BadInput(path, "holds object arrays (pickled Python objects); store numeric or string arrays, "
                                 "or re-run with --allow-pickle if you trust this file") from exc
        raise BadInput(path, f"not a readable .npz file ({first_line(exc)})") from exc
    except Exception as exc:  # noqa: BLE001
        raise BadInput(path, f"not a readable .npz file ({first_line(exc)})") from exc

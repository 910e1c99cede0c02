"""A built site's index.json read back as the run's history, for `check --history`.

Only the "runs" rows are read (other top-level keys belong to the run view). The file is untrusted:
its size is capped before it is parsed, and anything that is not rows of numbers is one line of
BadInput naming the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..config import HISTORY_MAX_BYTES, HISTORY_METRICS
from ..errors import BadInput


def read_history(path: str | Path, max_bytes: int = HISTORY_MAX_BYTES) -> list[dict]:
    """The rows of `path` (a site folder, or its index.json): each with id, step (or None) and the headline metrics."""
    path = Path(path)
    if not path.exists():
        raise BadInput(path, "no such folder (--history names a site built with `tim-report build`)")
    index = path / "index.json" if path.is_dir() else path
    if not index.is_file():
        raise BadInput(index, "no such file: build the run first (`tim-report build RUN -o SITE`, json format on)")
    try:
        with open(index, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise BadInput(index, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise BadInput(index, f"is larger than {max_bytes:,} bytes, the most a history may be")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInput(index, f"is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("tool") != "tim-report" or not isinstance(doc.get("runs"), list):
        raise BadInput(index, "is not a tim-report index.json (expected {\"tool\": \"tim-report\", \"runs\": [...]})")
    return [_row(index, i, r) for i, r in enumerate(doc["runs"])]


def _row(index: Path, i: int, r: object) -> dict:
    if not isinstance(r, dict):
        raise BadInput(index, f"runs[{i}] is not an object")
    rid = r.get("id")
    row = {"id": str(rid) if isinstance(rid, (str, int)) and not isinstance(rid, bool) else f"runs[{i}]",
           "step": _number(index, i, r, "step")}
    for key in HISTORY_METRICS:
        row[key] = _number(index, i, r, key)
    return row


def _number(index: Path, i: int, r: dict, key: str) -> float | int | None:
    """A finite number, or None when absent, null or not finite; any other type is a corrupt history."""
    v = r.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadInput(index, f"runs[{i}].{key} is not a number")
    return v if math.isfinite(v) else None

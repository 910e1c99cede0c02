"""`.jsonl`: one JSON object per line; per-token lists become ragged columns.

Read line by line, never the whole file at once: a line longer than the limits allow (`Limits.max_line_bytes`: what
parses within the byte limit every format has), or more
per-token values in all than `--max-tokens` permits, is refused as soon as it is seen; per-token
lists of numbers become numpy arrays as each line is parsed, so memory follows the data's size
in numpy, not in Python objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...catalogue.numbers import fmt
from ...errors import BadInput, parser_limit
from ..limits import current
from ..text import first_line


def read(path: Path, allow_pickle: bool) -> Any:
    rows = [{k: _compact(v) for k, v in row.items()} for _, row in read_records(path)]
    keys = sorted({k for r in rows for k in r})
    return {k: [r.get(k) for r in rows] for k in keys}


def _compact(value: Any) -> Any:
    """A list of plain numbers as a numpy array (8 bytes a number instead of ~32 as Python objects)."""
    if isinstance(value, list) and value and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        try:
            return np.asarray(value, dtype=np.float64 if any(isinstance(x, float) for x in value) else np.int64)
        except OverflowError:
            return value
    return value


def read_records(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-empty line; a line cut mid-record is named as such."""
    limits = current()
    seen = values = 0
    try:
        with open(path, "rb") as fh:
            n = 0
            while True:
                raw = fh.readline(limits.max_line_bytes + 1)
                if not raw:
                    break
                n += 1
                if len(raw) > limits.max_line_bytes:
                    raise BadInput(path, f"line {n} is longer than {fmt(limits.max_line_bytes)} bytes (from --max-tokens)")
                if not raw.strip():
                    continue
                row = _parse(path, n, raw)
                values += max((len(v) for v in row.values() if isinstance(v, list)), default=0)
                if values > limits.max_elements:
                    raise BadInput(path, f"holds more than {fmt(limits.max_elements)} per-token values by line {n}, more than "
                                         f"this run reads (from --max-tokens {fmt(limits.max_tokens)})")
                seen += 1
                yield n, row
    except OSError as exc:
        raise BadInput(path, f"cannot read ({first_line(exc)})") from exc
    if not seen:
        raise BadInput(path, "no JSON records")


def _parse(path: Path, n: int, raw: bytes) -> dict:
    try:
        row = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BadInput(path, f"line {n} is not valid UTF-8 ({first_line(exc)})") from exc
    except json.JSONDecodeError as exc:
        if not raw.endswith(b"\n"):  # the last line, with no newline after it: the writer stopped mid-record
            raise BadInput(path, f"line {n} is cut mid-record (the file ends without a newline): "
                                 "still being written, or truncated") from exc
        raise BadInput(path, f"line {n} is not valid JSON ({first_line(exc)})") from exc
    except (RecursionError, ValueError) as exc:  # nested too deep, an integer of too many digits
        bad = parser_limit(path, exc)
        if bad is None:
            raise
        raise BadInput(path, f"line {n} {bad.problem}") from None
    except MemoryError:  # the line is within the byte limit but this machine (or its ulimit) has less room
        raise BadInput(path, f"line {n} ({fmt(len(raw))} bytes) does not fit in the memory available to parse it") from None
    if not isinstance(row, dict):
        raise BadInput(path, f"line {n} is not a JSON object")
    return row

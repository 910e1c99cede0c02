"""`.jsonl`: one JSON object per line (prime-rl style); per-token lists become ragged columns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...errors import BadInput
from ..text import first_line


def read_jsonl(path: Path, allow_pickle: bool) -> Any:
    rows = [row for _, row in read_records(path)]
    keys = sorted({k for r in rows for k in r})
    return {k: [r.get(k) for r in rows] for k in keys}


def read_records(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for every non-empty line; a line cut mid-record is named as such."""
    rows: list[tuple[int, dict]] = []
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(path, f"not valid JSON lines ({first_line(exc)})") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == len(lines):  # no newline after it: the writer stopped mid-record
                raise BadInput(path, f"line {n} is cut mid-record (the file ends without a newline): "
                                     "still being written, or truncated") from exc
            raise BadInput(path, f"line {n} is not valid JSON ({first_line(exc)})") from exc
        if not isinstance(row, dict):
            raise BadInput(path, f"line {n} is not a JSON object")
        rows.append((n, row))
    if not rows:
        raise BadInput(path, "no JSON records")
    return rows

"""`.jsonl`: one JSON object per line (prime-rl style); per-token lists become ragged columns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...errors import BadInput
from ..text import first_line


def read_jsonl(path: Path, allow_pickle: bool) -> Any:
    rows: list[dict] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise BadInput(path, f"line {n} is not a JSON object")
                    rows.append(row)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(path, f"not valid JSON lines ({first_line(exc)})") from exc
    if not rows:
        raise BadInput(path, "no JSON records")
    keys = sorted({k for r in rows for k in r})
    return {k: [r.get(k) for r in rows] for k in keys}

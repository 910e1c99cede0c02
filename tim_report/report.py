"""Report: the analysis result as plain, JSON-able data. summary.json and samples.json are its serialisation."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class Report:
    run: dict
    metrics: dict
    breakdowns: dict
    routing: dict
    what_if: list
    verl: dict
    data_problems: dict
    distributions: dict
    diagnosis: dict | None = None
    samples: list = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def summary_dict(self) -> dict:
        d = asdict(self)
        d.pop("samples")
        return {"schema_version": d.pop("schema_version"), **d}

    def samples_dict(self) -> dict:
        return {"schema_version": self.schema_version, "run_id": self.run.get("id"), "samples": self.samples}

    def to_dict(self) -> dict:
        return {**self.summary_dict(), "samples": self.samples}

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**fields)


def clean(obj: Any) -> Any:
    """NaN / inf become null so the JSON is valid everywhere (browsers, jq, GitHub)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


def dumps(obj: Any, compact: bool = False) -> str:
    """Deterministic JSON: sorted keys, trailing newline; `compact` for bulky per-token data."""
    layout = {"separators": (",", ":")} if compact else {"indent": 1}
    return json.dumps(clean(obj), sort_keys=True, ensure_ascii=False, allow_nan=False, **layout) + "\n"

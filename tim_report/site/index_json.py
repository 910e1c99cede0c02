"""index.json, the site's machine-readable index: its one schema, written and read back here.

    {"tool": "tim-report", "schema_version": 1,
     "runs": [run row, ...],              one per run folder (analysis.run_index.run_row; docs/index-json.md)
     "steps": N, "run": {...} or null,    the run's verdict over its steps (analysis.run_verdict)
     "change_points": [...], "change_steps": [...],   the run view (analysis.trend)
     "unreadable": [{"id", "step", "path", "reason"}, ...]}   a run folder's steps that could not be read

Every build writes it, whatever the formats: the per-step cache, `check --history` and `watch` read it
back. Read back, the file is untrusted: its size is capped before it is parsed, and anything that is not
rows of numbers is one line of BadInput naming the file. A file without `schema_version` (tim-report
before the schema was versioned) reads as version 1.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..catalogue import metrics as catalogue
from ..catalogue.numbers import fmt
from ..config import HISTORY_MAX_BYTES, KL_K3_MAX, MAX_STEP
from ..errors import BadInput, regular_file
from ..model import dumps, lags_problem
from .layout import INDEX_JSON

SCHEMA_VERSION = 1


def document(index: dict) -> dict:
    """index.json from the index summary (analysis.run_index.index_from_rows)."""
    tr = index["trend"] or {}
    return {"tool": "tim-report", "schema_version": SCHEMA_VERSION, "runs": index["runs"], "steps": tr.get("steps", 0),
            "run": index.get("run"), "change_points": tr.get("change_points", []), "change_steps": tr.get("change_steps", []),
            "unreadable": index.get("unreadable", [])}


def text(index: dict) -> str:
    return dumps(document(index))


def read_history(path: str | Path, max_bytes: int = HISTORY_MAX_BYTES) -> list[dict]:
    """The rows of `path` (a site folder, or its index.json): each with id, step (or None) and the headline metrics."""
    index, doc = read_document(path, max_bytes)
    return [_row(index, i, r) for i, r in enumerate(doc["runs"])]


def read_rows(path: str | Path, keys: tuple[str, ...], max_bytes: int = HISTORY_MAX_BYTES) -> tuple[dict, list[dict]]:
    """The document of `path` and its rows, each with id, step and the metrics `keys` (None where absent or not
    finite): what `export` reads back."""
    index, doc = read_document(path, max_bytes)
    return doc, [_row(index, i, r, keys) for i, r in enumerate(doc["runs"])]


def read_document(path: str | Path, max_bytes: int = HISTORY_MAX_BYTES) -> tuple[Path, dict]:
    """(the index.json file, its document) of a site folder or index.json; BadInput, one line, when it is not one."""
    path = Path(path)
    if not path.exists():
        raise BadInput(path, "no such folder (expected a site built with `tim-report build`)")
    index = path / INDEX_JSON if path.is_dir() else path
    regular_file(index)  # a FIFO would block the read, /dev/zero never end
    if not index.is_file():
        raise BadInput(index, "no such file: build the run first (`tim-report build RUN -o SITE`, json format on)")
    try:
        with open(index, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise BadInput(index, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise BadInput(index, f"is larger than {fmt(max_bytes)} bytes, the most a history may be")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInput(index, f"is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("tool") != "tim-report" or not isinstance(doc.get("runs"), list):
        raise BadInput(index, "is not a tim-report index.json (expected {\"tool\": \"tim-report\", \"runs\": [...]})")
    version = doc.get("schema_version", 1)
    if version != SCHEMA_VERSION:
        raise BadInput(index, f"has schema_version {str(version)[:20]}; this tim-report reads {SCHEMA_VERSION} (rebuild the site)")
    _check_run_view(index, doc)
    return index, doc


def _check_run_view(index: Path, doc: dict) -> None:
    """The parts beside the rows that `watch` and `export` read back (change steps, the run's verdict, the unreadable
    steps): each of the type and range tim-report writes, or one line naming the field. A file tim-report did not
    just write is untrusted, whoever wrote it."""
    for key in ("change_steps", "change_points", "unreadable"):
        if not isinstance(doc.get(key, []), list):
            raise BadInput(index, f"{key} is {type(doc[key]).__name__}, not a list")
        for i, item in enumerate(doc.get(key, [])):
            if not isinstance(item, dict):
                raise BadInput(index, f"{key}[{i}] is not an object")
    for i, cp in enumerate(doc.get("change_steps", [])):
        where = f"change_steps[{i}]"
        if cp.get("step") is not None:
            _step(index, where, cp["step"])
        if not isinstance(cp.get("metrics", []), list) or not all(isinstance(m, str) for m in cp.get("metrics", [])):
            raise BadInput(index, f"{where}.metrics is not a list of metric names")
        for key in ("sentence", "run"):
            if cp.get(key) is not None and not isinstance(cp[key], str):
                raise BadInput(index, f"{where}.{key} is not a string")
    run = doc.get("run")
    if run is not None and not (isinstance(run, dict) and isinstance(run.get("verdict", ""), str)):
        raise BadInput(index, "run is not an object with a verdict string")


def _step(index: Path, where: str, value: object) -> float | int | None:
    """A training step: a finite number within ±2⁵³ (what io reads, and what a float, the trend and TensorBoard hold)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(index, f"{where}.step is not a number")
    if not (isinstance(value, int) or math.isfinite(value)) or not abs(value) < MAX_STEP:
        raise BadInput(index, f"{where}.step is beyond ±2⁵³ or not finite: not a training step")
    return value


def _row(index: Path, i: int, r: object, keys: tuple[str, ...] = catalogue.HISTORY) -> dict:
    if not isinstance(r, dict):
        raise BadInput(index, f"runs[{i}] is not an object")
    rid = r.get("id")
    row: dict = {"id": str(rid) if isinstance(rid, (str, int)) and not isinstance(rid, bool) else f"runs[{i}]",
           "step": None if r.get("step") is None else _step(index, f"runs[{i}]", r["step"])}
    for key in keys:
        row[key] = number(index, i, r, key)
    for key in ("staleness_share", "floor_kl_k3_se", "tokens", "lr", "trainer_version"):
        row[key] = number(index, i, r, key)
    for key in ("lag_kl_k3", "lag_kl_k3_se", "lag_mix"):  # what a step's lag is read against (analysis/lag/history.py)
        row[key] = lag_numbers(index, i, r.get(key), key)
    return row


def lag_numbers(index: Path, i: int, value: object, key: str = "lag_kl_k3") -> dict[str, float]:
    """A row's `lag_kl_k3` (or `lag_kl_k3_se`, `lag_mix`): model.lags_problem's rule (at most MAX_LAGS lags, each
    named by an integer or "unknown", each a number from 0 to KL_K3_MAX, a share to 1), a value that is not finite
    left out; absent or null is {}; anything else is a corrupt index."""
    if value is None:
        return {}
    finite = ({k: v for k, v in value.items() if not (isinstance(v, float) and not math.isfinite(v))}
              if isinstance(value, dict) else value)  # JSON's NaN and Infinity are left out, as everywhere in a row
    problem = lags_problem(finite, 1.0 if key == "lag_mix" else KL_K3_MAX)
    if problem is not None or not isinstance(finite, dict):
        raise BadInput(index, f"runs[{i}].{key} {problem}")
    return {k: float(v) for k, v in finite.items() if v is not None}


def number(index: Path, i: int, r: dict, key: str) -> float | int | None:
    """A finite number, or None when absent, null or not finite; any other type is a corrupt history."""
    v = r.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadInput(index, f"runs[{i}].{key} is not a number")
    try:
        return v if math.isfinite(v) else None
    except OverflowError:  # an integer beyond a float's range
        raise BadInput(index, f"runs[{i}].{key} is beyond the range of a float") from None

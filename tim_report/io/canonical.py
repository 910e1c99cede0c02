"""The canonical step-batch file: what `tim-report capture` writes and every reader can read back.

An `.npz` (no pickled objects) holding the StepBatch's flat arrays and a JSON header
`{"format": "tim-report/step-batch", "version": 1, "meta": {...}}` under the key `meta`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..model import StepBatch

CANONICAL_FORMAT = "tim-report/step-batch"
CANONICAL_VERSION = 1
# The optional [T, k] arrays of both sides' k most likely tokens (StepBatch fields of the same names).
TOPK_FIELDS = {"rollout_topk_ids": np.int32, "rollout_topk_logp": np.float32,
               "trainer_topk_ids": np.int32, "trainer_topk_logp": np.float32}


def save_batch(batch: StepBatch, path: str | Path) -> None:
    """Write the canonical `.npz` (no pickled objects; meta as JSON), atomically: a temporary file, then a rename."""
    arrays: dict[str, Any] = {
        "rollout_logp": batch.rollout_logp.astype(np.float64),
        "trainer_logp": batch.trainer_logp.astype(np.float64),
        "offsets": batch.offsets.astype(np.int64),
        "mask": batch.mask.astype(bool),
    }
    if batch.token_ids is not None:
        arrays["token_ids"] = np.asarray(batch.token_ids, dtype=np.int64)
    if batch.token_text is not None:
        arrays["token_text"] = np.asarray([str(t) for t in batch.token_text[: batch.n_tokens]], dtype=str)
    if batch.prompt_ids is not None:
        arrays["prompt_ids"] = (np.concatenate([np.asarray(p, dtype=np.int64) for p in batch.prompt_ids])
                                if batch.prompt_ids else np.zeros(0, np.int64))
        arrays["prompt_offsets"] = np.concatenate([[0], np.cumsum([len(p) for p in batch.prompt_ids])]).astype(np.int64)
    if batch.prompt_text is not None:
        arrays["prompt_text"] = np.asarray(batch.prompt_text, dtype=str)
    for name in ("group", "reward", "advantage", "shadow_logp", "floor_logp", "weight_version", "env"):
        value = getattr(batch, name)
        if value is not None:
            arrays[name] = np.asarray(value, dtype=str) if name in ("group", "weight_version", "env") else np.asarray(value)
    if batch.turn is not None:
        arrays["turn"] = np.asarray(batch.turn, dtype=np.int32)
    for name, dtype in TOPK_FIELDS.items():
        value = getattr(batch, name)
        if value is not None:
            arrays[name] = np.asarray(value, dtype=dtype)
    header = {"format": CANONICAL_FORMAT, "version": CANONICAL_VERSION, "meta": batch.meta}
    arrays["meta"] = np.asarray(json.dumps(header, sort_keys=True, default=str))
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    tmp.replace(path)

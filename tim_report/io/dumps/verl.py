"""verl `DataProto` (0.10 dev): `DataProto.save_to_disk` (a raw pickle) or `torch.save(data_proto)`.

Needs verl installed to unpickle (the object rebuilds its TensorDict), and --allow-pickle. The batch
holds `responses` [B, R] right-padded, `response_mask` (0 on tool tokens and padding),
`rollout_log_probs` (0.0 there too), `old_log_probs`, `attention_mask` [B, P+R] whose last R columns
say which response positions are real tokens, and non-tensor `uid` (group), `__num_turns__` and
`min_global_steps` / `max_global_steps` (the policy versions that generated each sample). The padded
arrays go through the same assembly as any dict (`assemble.py`); this module adds what is verl's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BadInput
from ..detect import is_zip
from ..readers.pkl import unpickle
from ..readers.pt import (
    to_plain,
    torch_load,
    unwrap_dataproto,
)
from . import Dump

REFUSAL = ("a verl DataProto is a pickle, and unpickling can run arbitrary code from the file: re-run with "
           "--allow-pickle if you trust it")
ALIGNMENT = ("response only, right-padded [B, R]: rollout_log_probs[b, j] and old_log_probs[b, j] score responses[b, j]; "
             "real tokens from attention_mask's last R columns, trained ones from response_mask; nothing shifted")


def read_values(path: Path, allow_pickle: bool) -> dict:
    """The DataProto's tensors and non-tensor arrays as one flat dict of plain values (meta_info under 'meta_info')."""
    if is_zip(path):
        obj = torch_load(path, allow_pickle, refusal=REFUSAL)
    else:
        obj = unpickle(path, allow_pickle, refusal=REFUSAL)
    values = to_plain(unwrap_dataproto(obj), path)
    if not isinstance(values, dict):
        raise BadInput(path, f"holds a {type(obj).__name__}, not a verl DataProto")
    return values


def annotate(batch, values: Mapping[str, Any]) -> None:
    """What the generic assembly does not know: versions, routed experts, and that this is verl (turns: assemble.py)."""
    batch.meta.update(framework="verl", alignment=ALIGNMENT)
    if batch.meta.get("step") is None and isinstance(batch.meta.get("global_steps"), int):
        batch.meta["step"] = batch.meta["global_steps"]  # meta_info's training step
    batch.meta["layout"] = "response only, right-padded [B, R] (DataProto)"
    versions = _versions(values, batch.n_seqs)
    if versions is not None:
        batch.weight_version = versions
    if values.get("routed_experts") is not None:
        batch.meta["routed_experts"] = "routed_experts present (kept for later, not analysed)"
    num_turns = values.get("__num_turns__")
    if isinstance(num_turns, np.ndarray) and num_turns.shape == (batch.n_seqs,):
        batch.meta["num_turns"] = f"{int(num_turns.min())}–{int(num_turns.max())}"


def _versions(values: Mapping[str, Any], n: int) -> np.ndarray | None:
    lo, hi = values.get("min_global_steps"), values.get("max_global_steps")
    if lo is None and hi is None:
        return None
    lo = np.asarray(lo if lo is not None else hi).reshape(-1)
    hi = np.asarray(hi if hi is not None else lo).reshape(-1)
    if lo.shape != (n,) or hi.shape != (n,):
        return None
    return np.asarray([str(a) if a == b else f"{a},{b}" for a, b in zip(lo.tolist(), hi.tolist())], dtype=str)


def fields(values: dict) -> list[dict[str, Any]]:
    return [{"key": k, "type": f"{v.dtype} {list(v.shape)}" if isinstance(v, np.ndarray) else type(v).__name__}
            for k, v in sorted(values.items())]


DUMP = Dump(
    name="verl",
    layout="a pickled DataProto: response only, right-padded [B, R], read as a dict of arrays",
    pickled=lambda words: any(w.startswith("verl.") and w.endswith("DataProto") for w in words),
    pickled_words="verl's `DataProto` class",
    values=read_values, annotate=annotate,
)

"""SkyRL (0.3) `dumped_data/global_step_{N}_training_input.pkl` (`trainer.dump_data_batch=true`).

A pickled `TrainingInputBatch`: a dict of [B, ·] tensors plus `metadata`. Only with --allow-pickle.
The batch classes are stood in for while unpickling (their state is a dict of serialised tensors,
numpy bytes or torch.save bytes, in every SkyRL version we read), so SkyRL need not be installed;
any other SkyRL class in the file needs the real package, and the message says so.

Response tensors `[B, R]` (`response_mask`, `loss_mask`, `rollout_logprobs`, `action_log_probs`,
`advantages`, `rewards`) are right-aligned (leading zeros, recent SkyRL) or right-padded (older):
`response_mask` says which, row by row. `sequences[:, -R:]` lines up with them in both. Rows SkyRL
added to fill the batch (`metadata["pad_size"]`, at the end, loss mask 0) are dropped.

SkyRL's trainers pop `rewards` and `metadata["uids"]` before `dump_data` (skyrl/train/trainer.py,
`RayPPOTrainer.train`), so a real dump has neither; the groups come from
`metadata["policy_prompt_boundaries"]` (`compute_prompt_boundaries(uids)`: one (start, end) row range
per prompt, over the rows before the filler), where the SkyRL version writes it.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BadInput
from .. import kept
from ..readers.pt import to_plain, unpickling_failed, warn_unpickling
from ..sequences import Exclusions, Seq, assemble_seqs, floats
from . import Dump

REFUSAL = ("a SkyRL dump is a pickle, and unpickling can run arbitrary code from the file: re-run with "
           "--allow-pickle if you trust it")
BATCH_CLASSES = ("TensorBatch", "TrainingInputBatch", "TrainingOutputBatch")
ALIGNMENT = ("response only, {how}: rollout_logprobs[b, j] and action_log_probs[b, j] score sequences[b, S − R + j] "
             "where response_mask is 1; nothing shifted")


def read(src, allow_pickle: bool = False):
    """A SkyRL training-input dump → StepBatch, plus the fields for `inspect`."""
    path = src.paths[0]
    if not allow_pickle:
        raise BadInput(path, REFUSAL)
    values, metadata = _unpickle(path)
    for key in ("response_mask", "rollout_logprobs", "action_log_probs"):
        if _arr(values, key) is None:
            raise BadInput(path, f"no '{key}' in this SkyRL batch (keys: {', '.join(sorted(values)) or 'none'}); "
                                 "rollout_logprobs is there only when the generator returned log-probs")
    ex, notes = Exclusions(), list[str]()
    rows = _rows(path, values, metadata, ex)
    how = _alignment(path, _need(values, "response_mask")[rows])
    groups, group_key = _groups(metadata, len(rows), notes)
    _check_support(path, values)
    seqs = [_row(path, values, b, groups, ex) for b in rows]
    keys = {"rollout": "rollout_logprobs", "trainer": "action_log_probs",
            "mask": "loss_mask" if _arr(values, "loss_mask") is not None else "response_mask", "tokens": "sequences",
            "advantage": "advantages", "reward": "rewards", "group": group_key, "kept": "sample_support_ids"}
    meta = {"framework": "skyrl", "layout": f"response tensors [B, R], {how}", "alignment": ALIGNMENT.format(how=how),
            "step": metadata.get("global_step"),
            "keys": {role: key for role, key in keys.items() if key is not None and (key in values or "." in key)}}
    if _arr(values, "rollout_expert_indices") is not None:
        meta["routed_experts"] = "rollout_expert_indices present (kept for later, not analysed)"
    batch = assemble_seqs(path, [s for s in seqs if s is not None], meta, ex, notes)
    fields = [{"key": k, "type": f"{v.dtype} {list(v.shape)}" if isinstance(v, np.ndarray) else type(v).__name__}
              for k, v in sorted(values.items())]
    return batch, fields + [{"key": f"metadata.{k}", "type": type(v).__name__} for k, v in sorted(metadata.items())]


class _Batch(dict):
    """Stands in for SkyRL's TensorBatch classes: the state's serialised tensors become arrays."""

    metadata: dict | None = None

    def __setstate__(self, state: dict) -> None:
        for key, value in (state.get("batch_dict") or {}).items():
            self[key] = _decode(value)
        self.metadata = state.get("metadata")


def _rebuild(cls: type, state: dict) -> _Batch:
    obj = _Batch()
    obj.__setstate__(state)
    return obj


def _decode(value: Any) -> Any:
    """One serialised field: {"format": "numpy" | "torch" | "tensor_list", ...} or the older {"type": ..., "data": ...}."""
    if not isinstance(value, dict):
        return value
    kind = value.get("format") or value.get("type")
    if kind == "numpy" or (kind is None and "dtype" in value):
        return np.frombuffer(value["data"], dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
    if kind in ("torch", "tensor"):
        import torch

        return torch.load(io.BytesIO(value["data"]), map_location="cpu", weights_only=True)
    if kind == "tensor_list":
        return [_decode(v) for v in value.get("items", [])]
    if kind == "list":
        return [_decode(v) if isinstance(v, dict) else v for v in value.get("data", [])]
    return value.get("data") if kind in ("none", "other") else value


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if module.split(".")[0] in ("skyrl", "skyrl_train"):
            if name in BATCH_CLASSES:
                return _Batch
            if name == "_rebuild_tensor_batch":
                return _rebuild
        return super().find_class(module, name)


def _unpickle(path: Path) -> tuple[dict, dict]:
    try:
        with open(path, "rb") as fh:
            obj = _Unpickler(fh).load()
    except Exception as exc:
        raise unpickling_failed(path, exc) from exc
    warn_unpickling(path)
    if not isinstance(obj, dict):
        raise BadInput(path, f"holds a {type(obj).__name__}, not a SkyRL TrainingInputBatch")
    values = to_plain(dict(obj), path)
    return values, dict(getattr(obj, "metadata", None) or {})


def _arr(values: dict, key: str) -> np.ndarray | None:
    v = values.get(key)
    return v if isinstance(v, np.ndarray) else None


def _need(values: dict, key: str) -> np.ndarray:
    """A field `read` has already checked is there."""
    v = values[key]
    assert isinstance(v, np.ndarray), key
    return v


def _rows(path: Path, values: dict, metadata: dict, ex: Exclusions) -> list[int]:
    """The real rows: SkyRL's filler rows (`pad_size`, at the end) dropped."""
    n = _need(values, "response_mask").shape[0]
    pad = int(metadata.get("pad_size") or 0)
    if not 0 <= pad < n:
        raise BadInput(path, f"metadata pad_size {pad} leaves no row of the {n}")
    width = _need(values, "response_mask").shape[1]
    ex.add("filler rows (metadata pad_size)", pad * width, "rows SkyRL copied to fill the batch, loss-masked: not samples")
    return list(range(n - pad))


def _alignment(path: Path, resp_mask: np.ndarray) -> str:
    """right-aligned (leading zeros) or right-padded (trailing zeros), from response_mask."""
    m = resp_mask > 0
    leading = bool((~m[:, 0] & m.any(axis=1)).any())
    trailing = bool((~m[:, -1] & m.any(axis=1)).any())
    if leading and trailing:
        raise BadInput(path, "response_mask has rows padded on the left and rows padded on the right")
    return "right-aligned (leading zeros)" if leading or not trailing else "right-padded"


def _check_support(path: Path, values: dict) -> None:
    """`sample_support_ids` (SkyRL #2237: each token's kept set, [B, ·, K] padded with -1): its rows line up with the
    response tensors from the right, as `sequences` does."""
    support = _arr(values, "sample_support_ids")
    if support is None:
        return
    width = _need(values, "response_mask").shape
    if support.ndim != 3 or support.shape[0] != width[0] or support.shape[1] < width[1]:
        raise BadInput(path, f"'sample_support_ids' is {list(support.shape)}: expected [{width[0]}, >= {width[1]}, K] "
                             "(each token's kept set, padded with -1)")


def _groups(metadata: dict, n: int, notes: list[str]) -> tuple[list[str] | None, str | None]:
    """One group per prompt: `policy_prompt_boundaries` (what SkyRL dumps), else `uids` (kept by a custom trainer)."""
    bounds = metadata.get("policy_prompt_boundaries")
    if isinstance(bounds, (list, tuple)) and bounds:
        try:
            spans = [(int(a), int(b)) for a, b in bounds]
        except (TypeError, ValueError):
            spans = []
        if spans and spans[0][0] == 0 and spans[-1][1] == n and all(a < b for a, b in spans) and \
                all(spans[k][1] == spans[k + 1][0] for k in range(len(spans) - 1)):
            return [str(k) for k, (a, b) in enumerate(spans) for _ in range(b - a)], "metadata.policy_prompt_boundaries"
        notes.append(f"metadata['policy_prompt_boundaries'] does not tile the {n} rows: no groups")
        return None, None
    uids = metadata.get("uids")
    if isinstance(uids, list) and len(uids) >= n:
        return [str(u) for u in uids[:n]], "metadata.uids"
    notes.append("no metadata['policy_prompt_boundaries'] (SkyRL before prompt_mean) and no 'uids' (popped before "
                 "dumping): no groups")
    return None, None


def _row(path: Path, values: dict, b: int, groups: list[str] | None, ex: Exclusions) -> Seq | None:
    resp = _need(values, "response_mask")[b] > 0
    width = resp.shape[0]
    ex.add("response padding (response_mask 0)", int((~resp).sum()), "padding of the [B, R] response tensors")
    loss = _arr(values, "loss_mask")
    mask = (loss[b] > 0) if loss is not None else resp
    if not (mask & resp).any():
        ex.add("samples with no loss-mask token", int(resp.sum()), "nothing of the sample is trained")
        return None
    seqs, attn = _arr(values, "sequences"), _arr(values, "attention_mask")
    tokens = seqs[b, -width:][resp].astype(np.int64) if seqs is not None and seqs.shape[1] >= width else None
    prompt = None
    if seqs is not None and attn is not None:
        real = seqs[b][attn[b] > 0]
        prompt = real[: max(len(real) - int(resp.sum()), 0)].astype(np.int64)
    adv, rew = _arr(values, "advantages"), _arr(values, "rewards")
    support = _arr(values, "sample_support_ids")
    return Seq(rollout=floats(_need(values, "rollout_logprobs")[b][resp]), trainer=floats(_need(values, "action_log_probs")[b][resp]),
               mask=mask[resp], token_ids=tokens, prompt_ids=prompt,
               advantage=floats(adv[b][resp]) if adv is not None and adv.ndim == 2 else None,
               reward=float(rew[b][resp].sum()) if rew is not None and rew.ndim == 2 else None,
               group=groups[b] if groups is not None else None,
               kept=kept.from_dense(path, support[b, -width:][resp], "sample_support_ids") if support is not None else None)


DUMP = Dump(
    name="skyrl",
    layout="a pickled TrainingInputBatch: response tensors [B, R], right-aligned (or right-padded in older versions)",
    pickled=lambda words: any(w.startswith("skyrl") for w in words), pickled_words="a class of the `skyrl` package",
    folder="dumped_data", step_files=("global_step_{N}_training_input.pkl",),
    read=read,
)

"""NeMo-RL `train_data_step{N}.jsonl` (GRPO / PPO, on by default): one line per sample.

Whole-sequence layout, right-padded to the batch's longest sequence: `token_ids`, `token_loss_mask`,
`generation_logprobs` (rollout) and `prev_logprobs` (trainer) at token positions, cut to
`input_lengths`. Every field is written wrapped in a length-1 list; the reader unwraps one level
where it finds it and reads unwrapped fields too (read from the writer, never seen in a real file).
`prev_logprobs[0]` is 0 (no token precedes it) and lies in the prompt; `generation_logprobs` is 0.0 on
prompt, tool and padding tokens. A line whose per-token fields differ in length is bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BadInput
from ..readers.jsonl import read_records
from ..sequences import (
    PROMPT_WHY,
    Exclusions,
    Seq,
    assemble_seqs,
    check_token_lists,
    floats,
    split_at_first_trained,
)
from . import Dump

TOKEN_KEYS = ("token_ids", "token_loss_mask", "generation_logprobs", "prev_logprobs")
SCALAR_KEYS = ("input_lengths", "rewards", "sample_loss_mask")
ALIGNMENT = ("whole sequence, token positions: generation_logprobs[i] and prev_logprobs[i] both score token_ids[i]; "
             "padding beyond input_lengths dropped; the response starts at the first token_loss_mask token; "
             "prev_logprobs[0] = 0 (filler) is never in the response; nothing shifted")
FILLER_WHY = "prev_logprobs[0] = 0 scores no token (nothing precedes it); it lies in the prompt, so no metric sees it"
PADDING_WHY = "right padding beyond input_lengths (token_ids padded to the batch's longest sequence)"


def read(src, allow_pickle: bool = False):
    """One `train_data_stepN.jsonl` → StepBatch, plus the fields for `inspect`."""
    path = src.paths[0]
    ex, notes, seqs, fields = Exclusions(), [], [], {}
    wrapped = False
    for n, rec in read_records(path):
        values = {k: _unwrap(k, v) for k, v in rec.items()}
        wrapped |= any(values[k] is not rec[k] for k in rec)
        fields.update({k: type(v).__name__ for k, v in values.items()})
        seq = _sample(path, n, values, ex)
        if seq is not None:
            seqs.append(seq)
    if seqs and all(not np.any(s.trainer[s.mask]) for s in seqs):
        raise BadInput(path, "prev_logprobs are 0.0 on every trained token (NeMo-RL's force_on_policy_ratio): the dump "
                             "holds no trainer log-probs to compare")
    notes.append("fields were wrapped in length-1 lists and unwrapped" if wrapped else "fields were not wrapped in lists")
    if any(s.prompt_text is not None for s in seqs):
        notes.append("'content' (the text of every message) is shown as each sample's prompt text")
    meta = {"framework": "nemo-rl", "layout": "whole sequence, right-padded (one sample per line)", "alignment": ALIGNMENT,
            "keys": {"rollout": "generation_logprobs", "trainer": "prev_logprobs", "mask": "token_loss_mask",
                     "tokens": "token_ids", "advantage": "advantages", "reward": "rewards", "prompt_text": "content"}}
    batch = assemble_seqs(src.origin, seqs, meta, ex, notes)
    return batch, [{"key": k, "type": t} for k, t in sorted(fields.items())]


def _unwrap(key: str, value: Any) -> Any:
    """[[...]] → [...] for list fields and [x] → x for per-sample numbers: the writer wraps every field once."""
    if isinstance(value, list) and len(value) == 1 and (isinstance(value[0], list) or key in SCALAR_KEYS):
        return value[0]
    return value


def _sample(path: Path, n: int, rec: dict, ex: Exclusions) -> Seq | None:
    cols = _columns(path, n, rec)
    length = _input_length(path, n, rec, len(cols["tokens"]))
    ex.add("padding beyond input_lengths", len(cols["tokens"]) - length, PADDING_WHY)
    cols = {k: (v[:length] if v is not None else None) for k, v in cols.items()}
    mask = cols["mask"]
    if _number(rec.get("sample_loss_mask"), 1.0) == 0.0:
        ex.add("samples with sample_loss_mask 0", length, "NeMo-RL's per-sample multiplier is 0: the sample is not trained")
        return None
    ex.add("prev_logprobs[0] filler", 1, FILLER_WHY)
    if length and mask[0]:
        mask[0] = False
        ex.add("token_loss_mask true on the first token", 1, "the first token cannot be a sampled token: set to false")
    first = split_at_first_trained(mask)
    if first is None:
        ex.add("samples with no token_loss_mask token", length, "nothing of the sample is trained")
        return None
    ex.add("prompt tokens", first, PROMPT_WHY)
    r = slice(first, length)
    return Seq(rollout=cols["rollout"][r], trainer=cols["trainer"][r], mask=mask[r], token_ids=cols["tokens"][r],
               prompt_ids=cols["tokens"][:first], advantage=None if cols["advantage"] is None else cols["advantage"][r],
               reward=_number(rec.get("rewards"), None), prompt_text=_content(rec.get("content")))


def _columns(path: Path, n: int, rec: dict) -> dict:
    check_token_lists(path, n, rec, TOKEN_KEYS, ("advantages",), "a NeMo-RL train_data line")
    return {"tokens": np.asarray(rec["token_ids"], dtype=np.int64), "mask": np.asarray(rec["token_loss_mask"]) > 0,
            "rollout": floats(rec["generation_logprobs"]), "trainer": floats(rec["prev_logprobs"]),
            "advantage": floats(rec["advantages"]) if isinstance(rec.get("advantages"), list) else None}


def _input_length(path: Path, n: int, rec: dict, width: int) -> int:
    value = rec.get("input_lengths")
    if value is None:
        return width
    if not isinstance(value, (int, float)) or not 0 <= int(value) <= width:
        raise BadInput(path, f"line {n}: input_lengths {value!r} is not between 0 and the {width} tokens of the line")
    return int(value)


def _number(value: Any, default):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _content(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "\n\n".join(value)
    return None


DUMP = Dump(
    name="nemo-rl",
    layout="whole sequence per line, right-padded, every field wrapped in a length-1 list; index i scoring token i",
    record_keys=frozenset({"generation_logprobs", "prev_logprobs", "token_loss_mask", "token_ids"}),
    step_files=("train_data_step{N}.jsonl",),
    read=read,
)

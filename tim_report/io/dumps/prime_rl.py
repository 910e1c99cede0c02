"""prime-rl token export: `token_exports/step_S/rank_R.jsonl`, one sample per line (schema 1).

Whole-sequence layout: `token_ids`, `loss_mask`, `inference_logprobs` and `trainer_logprobs` cover prompt
and completion, index i scoring token i. prime-rl's writer splits packed micro-batches by `sequence_lengths`,
so a line is one sample; a line whose `position_ids` restart at 0 part-way is still cut there. Each
sample's response starts at its first loss-mask token. `trainer_logprobs[0]` is a filler (log 1/V) and
`inference_logprobs` is 0.0 on every token that was not sampled: neither enters a metric, and nothing is
shifted to "fix" them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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

TOKEN_KEYS = ("token_ids", "loss_mask", "inference_logprobs", "trainer_logprobs")
OPTIONAL_TOKEN_KEYS = ("position_ids", "advantages")
ALIGNMENT = ("whole sequence, token positions: inference_logprobs[i] and trainer_logprobs[i] both score token_ids[i] "
             "given the tokens before it; the response starts at each sample's first loss_mask token; "
             "trainer_logprobs[0] (filler, log 1/V) is never in the response; nothing shifted")
FILLER_WHY = ("trainer_logprobs[0] scores no token (nothing precedes it): prime-rl writes log(1/V) there; "
              "it lies in the prompt, so no metric sees it")
MASKED_FILLER_WHY = "loss_mask was true on a sample's first token, which cannot be a sampled token: set to false"
EMPTY_WHY = "no loss_mask token in the sample: nothing of it is trained"


def read(src, allow_pickle: bool = False):
    """All rank files of one step → StepBatch, plus the fields for `inspect`."""
    ex, notes, seqs = Exclusions(), list[str](), []
    ranks, steps, fields = [], set(), {}
    for path in src.paths:
        for n, rec in read_records(path):
            check_token_lists(path, n, rec, TOKEN_KEYS, OPTIONAL_TOKEN_KEYS, "a prime-rl token export line")
            fields.update({k: type(v).__name__ for k, v in rec.items()})
            seqs += _samples(rec, ex)
            ranks.append(rec.get("rank"))
            if isinstance(rec.get("step"), int):
                steps.add(rec["step"])
    meta: dict[str, Any] = {"framework": "prime-rl", "layout": "whole sequence (prompt + completion per line)", "alignment": ALIGNMENT,
            "keys": {"rollout": "inference_logprobs", "trainer": "trainer_logprobs", "mask": "loss_mask",
                     "tokens": "token_ids", "advantage": "advantages", "env": "env_name"},
            "ranks": ", ".join(str(r) for r in sorted({r for r in ranks if r is not None})) or None}
    meta["step"] = _recorded_step(steps, notes)
    batch = assemble_seqs(src.origin, seqs, meta, ex, notes)
    return batch, [{"key": k, "type": t} for k, t in sorted(fields.items())]


def _samples(rec: dict, ex: Exclusions) -> list[Seq]:
    """The samples packed in one line, cut where position_ids restart at 0."""
    n = len(rec["token_ids"])
    if n == 0:
        return []
    pos = rec.get("position_ids")
    starts = [0] + ([i for i in range(1, n) if pos[i] == 0] if isinstance(pos, list) else [])
    bounds = list(zip(starts, starts[1:] + [n]))
    ex.add("trainer_logprobs[0] filler", 1, FILLER_WHY)
    cols = {
        "tokens": np.asarray(rec["token_ids"], dtype=np.int64),
        "mask": np.array([bool(m) for m in rec["loss_mask"]], dtype=bool),
        "rollout": floats(rec["inference_logprobs"]),
        "trainer": floats(rec["trainer_logprobs"]),
        "advantage": floats(rec["advantages"]) if isinstance(rec.get("advantages"), list) else None,
    }
    return [s for a, b in bounds if (s := _sample(cols, a, b, rec.get("env_name"), ex)) is not None]


def _sample(cols: dict, a: int, b: int, env, ex: Exclusions) -> Seq | None:
    mask = cols["mask"][a:b].copy()
    if mask[0]:
        mask[0] = False
        ex.add("loss_mask true on a sample's first token", 1, MASKED_FILLER_WHY)
    first = split_at_first_trained(mask)
    if first is None:
        ex.add("samples with no loss_mask token", b - a, EMPTY_WHY)
        return None
    r = slice(a + first, b)
    ex.add("prompt tokens", first, PROMPT_WHY)
    adv = cols["advantage"]
    return Seq(rollout=cols["rollout"][r], trainer=cols["trainer"][r], mask=mask[first:], token_ids=cols["tokens"][r],
               prompt_ids=cols["tokens"][a:a + first], advantage=None if adv is None else adv[r],
               env=env if isinstance(env, str) else None)


def _recorded_step(steps: set[int], notes: list[str]) -> int | None:
    """The step the records name (the path's, when it has one, wins: io.discover.settle_step)."""
    if len(steps) > 1:
        notes.append(f"the records name several steps ({', '.join(map(str, sorted(steps)))}); the step folder's is used")
        return None
    return next(iter(steps), None)


DUMP = Dump(
    name="prime-rl",
    layout="whole sequence per line (prompt and completion), index i scoring token i; a step is the union of its ranks",
    record_keys=frozenset({"inference_logprobs", "trainer_logprobs", "loss_mask", "token_ids"}),
    folder="token_exports", rank_files="rank_{R}.jsonl", marker="STABLE",
    read=read,
)

"""The rank files of one step (`save_step`'s `step_S/rank_R.npz`) → one StepBatch: sequences concatenated in rank order.

Each rank file is read as the canonical file it is; here they are put end to end, as prime-rl's rank files of a
step are. Group ids are compared across ranks, so the samples of one prompt on two ranks stay one group (verl's
`uid` is global; the TRL and OpenRLHF helpers write global ids). An array that only some ranks hold is left out
with a note; ranks that disagree on the step are bad input; a rank set short of the `world_size` the files
record is read, with a note saying which ranks are missing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import BadInput
from ..model import StepBatch

TOKEN_FIELDS = ("token_ids", "shadow_logp", "floor_logp", "advantage", "turn", "rollout_topk_ids", "rollout_topk_logp",
                "trainer_topk_ids", "trainer_topk_logp")
SEQ_FIELDS = ("group", "reward", "weight_version", "env")
LIST_FIELDS = ("prompt_ids", "prompt_text")


def merge_ranks(origin: Path, batches: list[StepBatch]) -> StepBatch:
    """Concatenate the ranks' batches (already in rank order)."""
    first = batches[0]
    steps = sorted({b.meta.get("step") for b in batches}, key=str)
    if len(steps) > 1:
        raise BadInput(origin, f"its rank files record different steps ({', '.join(map(str, steps))}): one folder per step")
    lengths = [b.n_tokens for b in batches]
    starts = np.cumsum([0, *lengths[:-1]])
    out = StepBatch(
        rollout_logp=np.concatenate([b.rollout_logp for b in batches]),
        trainer_logp=np.concatenate([b.trainer_logp for b in batches]),
        offsets=np.concatenate([[0]] + [b.offsets[1:] + s for b, s in zip(batches, starts)]).astype(np.int64),
        mask=np.concatenate([b.mask for b in batches]),
        meta={k: v for k, v in first.meta.items() if k not in ("rank", "source", "file")},
        notes=list(dict.fromkeys(n for b in batches for n in b.notes)),
        problems={k: sum(b.problems.get(k, 0) for b in batches) for b in batches for k in b.problems},
    )
    ranks = [b.meta.get("rank") for b in batches]
    out.meta["ranks"] = ", ".join(str(r) for r in ranks if r is not None) or None
    for name in (*TOKEN_FIELDS, *SEQ_FIELDS):
        values = [getattr(b, name) for b in batches]
        if all(v is not None for v in values):
            setattr(out, name, np.concatenate([np.asarray(v) for v in values]))
        elif any(v is not None for v in values):
            out.notes.append(_partial(name, ranks, values))
    for name in dict.fromkeys(n for b in batches for n in b.sides):  # the chain's named sides, as the token fields
        sides = [b.sides.get(name) for b in batches]
        if all(v is not None for v in sides):
            out.sides[name] = np.concatenate([np.asarray(v) for v in sides])
        else:
            out.notes.append(_partial(f"side_{name}", ranks, sides))
    for name in LIST_FIELDS:
        lists = [getattr(b, name) for b in batches]
        if all(v is not None for v in lists):
            setattr(out, name, [x for v in lists for x in v])
        elif any(v is not None for v in lists):
            out.notes.append(_partial(name, ranks, lists))
    if first.token_text is not None and all(b.token_text is not None for b in batches):
        out.token_text = np.concatenate([np.asarray(b.token_text, dtype=str) for b in batches])
    _missing_ranks(out, ranks, [b.meta.get("world_size") for b in batches])
    return out


def _partial(name: str, ranks: list, values: list) -> str:
    have = [str(r) for r, v in zip(ranks, values) if v is not None]
    return f"'{name}' is in the files of rank {', '.join(have)} only: left out of the merged step"


def _missing_ranks(out: StepBatch, ranks: list, sizes: list) -> None:
    size = max((s for s in sizes if isinstance(s, int)), default=None)
    if size is None:
        return
    missing = sorted(set(range(size)) - {r for r in ranks if isinstance(r, int)})
    if missing:
        out.notes.append(f"{len(missing)} of {size} ranks have no file here (rank {', '.join(map(str, missing))}): "
                         "the step holds the other ranks' sequences only")

"""The rank files of one step (`save_step`'s `step_S/rank_R.npz`) → one StepBatch: sequences concatenated in rank order.

Each rank file is read as the canonical file it is; here they are put end to end, as prime-rl's rank files of a
step are. Group ids are compared across ranks, so the samples of one prompt on two ranks stay one group (verl's
`uid` is global; the TRL and OpenRLHF helpers write global ids). An array that only some ranks hold is left out
with a note. A step that cannot be read whole is bad input (in a run folder: the unreadable step, its red row and
exit 3), never a silent partial step: ranks that disagree on the step or the world size, a world size that is not
one (not an integer in 1 … `config.MAX_WORLD_SIZE`), a rank outside its world, a file whose name and content
disagree on its rank, and a rank of the world (or, without a recorded world size, a rank below the highest) that
has no file. The work is bounded by the files present, whatever world size a file records.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..config import MAX_WORLD_SIZE
from ..errors import BadInput
from ..model import StepBatch
from . import kept

TOKEN_FIELDS = ("token_ids", "shadow_logp", "floor_logp", "advantage", "turn", "token_version", "rollout_topk_ids", "rollout_topk_logp",
                "trainer_topk_ids", "trainer_topk_logp", "kept_log_mass")
SEQ_FIELDS = ("group", "reward", "weight_version", "env", "cached_tokens")
LIST_FIELDS = ("prompt_ids", "prompt_text")


def merge_ranks(origin: Path, batches: list[StepBatch], named: list[int] | None = None) -> StepBatch:
    """Concatenate the ranks' batches (already in rank order); `named`: each file's rank as its name says."""
    first = batches[0]
    steps = sorted({str(b.meta.get("step"))[:40] for b in batches})
    if len(steps) > 1:
        raise BadInput(origin, f"its rank files record different steps ({', '.join(steps[:5])}): one folder per step")
    _check_world(origin, batches, named)
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
    out.meta.update(_digests(batches))
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
    _merge_kept(out, batches, ranks)
    for name in LIST_FIELDS:
        lists = [getattr(b, name) for b in batches]
        if all(v is not None for v in lists):
            setattr(out, name, [x for v in lists for x in v])
        elif any(v is not None for v in lists):
            out.notes.append(_partial(name, ranks, lists))
    if first.token_text is not None and all(b.token_text is not None for b in batches):
        out.token_text = np.concatenate([np.asarray(b.token_text, dtype=str) for b in batches])
    return out


def _merge_kept(out: StepBatch, batches: list[StepBatch], ranks: list) -> None:
    """The ranks' kept sets end to end, when every rank has them."""
    sets = [(b.kept_ids, b.kept_offsets) for b in batches]
    if all(ids is not None and off is not None for ids, off in sets):
        out.kept_ids, out.kept_offsets = kept.concat(sets)  # type: ignore[arg-type]
    elif any(ids is not None for ids, _ in sets):
        out.notes.append(_partial("kept_ids", ranks, [ids for ids, _ in sets]))


def _digests(batches: list[StepBatch]) -> dict:
    """Each rank's weight digests (one per engine replica, say), all of them once: a replica that missed a sync
    shows as a second digest of its version (docs/sync.md)."""
    out = {}
    for key in ("engine_digest", "trainer_digest"):
        given = [v for b in batches if (v := b.meta.get(key)) is not None]
        if given:
            items = [x for v in given for x in (v if isinstance(v, list) else [v])]
            out[key] = list({json.dumps(x, sort_keys=True, default=str): x for x in items}.values())
    return out


def _partial(name: str, ranks: list, values: list) -> str:
    have = [str(r) for r, v in zip(ranks, values) if v is not None]
    return f"'{name}' is in the files of rank {', '.join(have)} only: left out of the merged step"


def _check_world(origin: Path, batches: list[StepBatch], named: list[int] | None) -> None:
    """Every rank of the world has its file, each inside the world, each file's name and content agreeing: else the
    step cannot be read whole (BadInput, one line). Work and message bounded by the files, not the world size."""
    sizes = {repr(b.meta.get("world_size"))[:40]: b.meta.get("world_size") for b in batches}
    if len(sizes) > 1:
        raise BadInput(origin, f"its rank files record different world sizes ({', '.join(list(sizes)[:5])})")
    size = next(iter(sizes.values()))
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_WORLD_SIZE):
        raise BadInput(origin, f"records world_size {next(iter(sizes))}, not a world size (an integer in 1 … {MAX_WORLD_SIZE})")
    ranks = []
    for i, b in enumerate(batches):
        rank = b.meta.get("rank")
        name = named[i] if named else None
        if rank is None:
            rank = name
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0 or (size is not None and rank >= size):
            world = f"its world of {size}" if size is not None else "0 … ∞"
            raise BadInput(origin, f"a rank file records rank {repr(rank)[:40]}, outside {world}: the step cannot be read whole")
        if name is not None and name != rank:
            raise BadInput(origin, f"rank_{name}.npz records rank {rank}: a file renamed or copied from another rank")
        ranks.append(rank)
    if len(set(ranks)) != len(ranks):
        raise BadInput(origin, "two rank files record the same rank")
    expected = size if size is not None else max(ranks) + 1
    if len(ranks) < expected:
        have = set(ranks)
        missing = []
        for r in range(expected):  # stops at the sixth missing rank: bounded by the files, not the world
            if r not in have:
                missing.append(r)
                if len(missing) > 5:
                    break
        listed = ", ".join(map(str, missing[:5])) + (", …" if len(missing) > 5 else "")
        raise BadInput(origin, f"{expected - len(ranks)} of {expected} ranks have no file here (rank {listed}): the step "
                               "cannot be read whole (a rank not yet written, or lost)")

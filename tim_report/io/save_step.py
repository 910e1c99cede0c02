"""`save_step`: one training step's tensors → the canonical `.npz`, from inside a training loop.

Takes torch tensors (any device, any float dtype: bf16 and fp16 are widened with `.float()`, exactly) or numpy
arrays, in either layout the frameworks use:

    padded   [B, T] arrays; the real tokens are `attention_mask`'s (its last T columns when wider, as verl's
             [B, prompt + response] mask is) or, without one, every position up to each row's last trained token
    flat     [T] arrays plus `offsets` [N + 1] (sequence i is tokens offsets[i]:offsets[i + 1])

and writes what `tim-report build` reads back token for token. The file goes to `path` when it ends in `.npz`,
else to `path/step_{step}/rank_{rank}.npz`, the layout `build` merges per step (io/discover.py). Torch is
never imported: a tensor is recognised by its `detach` and `cpu` methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config.bounds import MAX_SEQUENCE_VERSIONS
from ..errors import BadInput
from ..model import SIDE_NAME_CHARS, SIDE_NAME_MAX, VERSION_DIGITS, StepBatch, digest_records
from . import kept
from .assemble import as_versions
from .canonical import SIDE_PREFIX, TOPK_FIELDS
from .sequences import cached_counts
from .step_files import WHO, check_meta, precheck, step_target
from .step_writer import StepWriter, shared_writer, write

NARROW_FLOATS = ("float16", "bfloat16", "float32")  # widened to float32 exactly; float64 stays float64


def step_path(path: str | Path, step: int | None, rank: int) -> Path:
    """Where a step's rank file goes: `path` itself when it names an `.npz`, else `path/step_{step}/rank_{rank}.npz`
    (step and rank checked as save_step checks them)."""
    return step_target(path, step, rank, None)[0].path


@dataclass
class Converted:
    """The arrays on the CPU as numpy, with the dtype each log-prob tensor had (said in the file's meta)."""

    arrays: dict[str, np.ndarray]
    logp_dtypes: dict[str, str]


def to_numpy(name: str, value: Any) -> np.ndarray:
    """A tensor (any device; bf16/fp16 widened to float32) or array-like → a numpy array of its own, which the
    training loop may overwrite its buffers after (a CPU tensor's `.numpy()` shares memory: copied)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        t = value.detach()
        widened = t.is_floating_point() and str(t.dtype).removeprefix("torch.") in ("bfloat16", "float16")
        if widened:
            t = t.float()
        arr = t.cpu().numpy()  # from an accelerator: a fresh host copy (blocking)
        return arr.copy() if value.device.type == "cpu" and not widened else arr
    try:
        return np.array(value, copy=True)
    except (ValueError, TypeError) as exc:
        raise BadInput(WHO, f"'{name}' is not an array ({type(value).__name__}: {exc})") from None


def convert(arrays: dict[str, Any]) -> Converted:
    """Every given array onto the CPU as numpy: the part of a save the training loop waits for."""
    out, dtypes = {}, {}
    for name, value in arrays.items():
        if value is None:
            continue
        out[name] = to_numpy(name, value)
        if name in ("rollout_logp", "trainer_logp") or name.endswith("topk_logp"):
            dtypes[name] = str(value.dtype if hasattr(value, "dtype") else out[name].dtype).removeprefix("torch.")
    return Converted(out, dtypes)


def build_step(c: Converted, meta: dict[str, Any]) -> StepBatch:
    """The converted arrays → a StepBatch in the canonical layout, every shape checked (BadInput naming the array)."""
    a = c.arrays
    for name in ("rollout_logp", "trainer_logp"):
        if name not in a:
            raise BadInput(WHO, f"'{name}' is required")
        if a[name].dtype.kind != "f":
            raise BadInput(WHO, f"'{name}' holds {a[name].dtype}, expected floats (log-probabilities)")
    rollout, trainer = a["rollout_logp"], a["trainer_logp"]
    if rollout.shape != trainer.shape:
        raise BadInput(WHO, f"'trainer_logp' is {list(trainer.shape)} but 'rollout_logp' is {list(rollout.shape)}")
    narrow = all(c.logp_dtypes[n] in NARROW_FLOATS for n in ("rollout_logp", "trainer_logp"))
    logp_dtype = np.float32 if narrow else np.float64
    take: _Padded | _Flat
    if rollout.ndim == 2:
        if "offsets" in a:
            raise BadInput(WHO, "'offsets' goes with flat [T] log-probs; these are padded [B, T]")
        keep, mask = _padded_keep(a, rollout.shape)
        take = _Padded(keep)
    elif rollout.ndim == 1:
        if "offsets" not in a:
            raise BadInput(WHO, f"'rollout_logp' is flat {list(rollout.shape)}: give 'offsets' [N + 1], or pass padded [B, T] arrays")
        offsets = _offsets(a["offsets"], rollout.shape[0])
        take = _Flat(offsets)
        mask = _bool("mask", take(a, "mask", rollout.shape)) if "mask" in a else np.ones(rollout.shape, bool)
    else:
        raise BadInput(WHO, f"'rollout_logp' has shape {list(rollout.shape)}: expected [B, T] or flat [T] with offsets")
    batch = StepBatch(rollout_logp=take(a, "rollout_logp", rollout.shape).astype(logp_dtype, copy=False),
                      trainer_logp=take(a, "trainer_logp", rollout.shape).astype(logp_dtype, copy=False),
                      offsets=take.offsets, mask=mask, meta=dict(meta))
    if "tool_mask" in a:  # tool results: in the sequence, never sampled by the policy, never trained
        tool = ~_bool("tool_mask", take(a, "tool_mask", rollout.shape))
        batch.meta["tool_tokens"] = int(tool.sum())
        batch.mask = batch.mask & ~tool
    if not batch.mask.any():
        raise BadInput(WHO, "the mask selects no tokens: nothing in this step is trained")
    _optional(a, take, rollout.shape, batch)
    batch.meta["logp_dtypes"] = {k.removesuffix("_logp"): v for k, v in c.logp_dtypes.items()}
    return batch


def save_step(path: str | Path, rollout_logp: Any, trainer_logp: Any, *, mask: Any = None, attention_mask: Any = None,
              offsets: Any = None, token_ids: Any = None, prompt_ids: Any = None, prompt_mask: Any = None,
              group: Any = None, reward: Any = None, advantage: Any = None, turn: Any = None, tool_mask: Any = None,
              rollout_topk_ids: Any = None, rollout_topk_logp: Any = None, trainer_topk_ids: Any = None,
              trainer_topk_logp: Any = None, sides: dict[str, Any] | None = None, weight_version: Any = None,
              token_version: Any = None, trainer_version: int | None = None, cached_tokens: Any = None,
              engine_digest: Any = None, trainer_digest: Any = None, kept_ids: Any = None, kept_offsets: Any = None,
              kept_counts: Any = None, kept_log_mass: Any = None, step: int | None = None,
              rank: int = 0, world_size: int | None = None,
              model: str | None = None, rollout_engine: str | None = None, rollout_dtype: str | None = None,
              trainer_engine: str | None = None, trainer_dtype: str | None = None, meta: dict | None = None,
              background: bool | StepWriter = False) -> Path:
    """Save one step's rollout and trainer log-probs (and what else is given) as the canonical `.npz`; returns its path.

    `mask` is the loss mask (1 = trained); `tool_mask` (0 = a tool's output) is folded into it. `prompt_ids` is
    [B, P] with `prompt_mask` (left padding) or a list of 1-D arrays; `group` and `reward` are per sequence (a
    [B, T] reward is summed per sequence); `advantage` per sequence or per token. Everything is checked here
    (BadInput naming the array). `background=True` (or a StepWriter) returns once the arrays are on the CPU and
    checked, and leaves compressing and writing to a writer thread (flushed at exit). `step`, `rank` and `world_size`
    are integers (a float, even 2.0, is refused), the rank inside the world, and nothing below `path` is followed
    through a link save_step did not create (io/step_files.py): a refusal is one line of BadInput, nothing made.
    `sides` adds the chain's further log-probs by name, in the layout of the two: `recompute` (the rollout engine
    re-scoring the sampled tokens), `train` (the training forward), `shadow`, `floor`, or a name of your own
    (docs/chain.md). `weight_version` is per sequence the weight version that generated it (an integer, or for a
    sequence several versions generated, their list oldest to newest), `token_version` per token where you know it,
    and `trainer_version` the version the trainer holds (else the step is read as it): the staleness split
    (docs/staleness.md). `cached_tokens` is per sequence the prompt tokens the engine served from its prefix cache
    (vLLM's `RequestOutput.num_cached_tokens`): the mismatch split by cache hit and miss. `engine_digest` and
    `trainer_digest` are the sync's round trip (docs/sync.md): each a `weight_digest(...)` (or its record or text, or a
    list of them, one per version), the engine's weights as it held them when it sampled and the trainer's cast to the
    engine's dtype; a digest made without `version=` belongs to the batch's one generation version (the engine's) or
    to the trainer's version (the trainer's). `kept_ids` are the sampler's kept sets (the ids top-k / top-p / min-p
    left), with `kept_offsets` [T + 1] or `kept_counts` [T] (prime-rl's SamplingMask) for flat log-probs, `kept_counts`
    [B, T] (0 on padding) for padded ones, ids in position order; `kept_log_mass` the trainer's log-probability mass on
    each set, in the layout of the log-probs (docs/integrations.md)."""
    arrays = dict(rollout_logp=rollout_logp, trainer_logp=trainer_logp, mask=mask, attention_mask=attention_mask,
                  offsets=offsets, token_ids=token_ids, group=group, reward=reward, advantage=advantage, turn=turn,
                  tool_mask=tool_mask, rollout_topk_ids=rollout_topk_ids, rollout_topk_logp=rollout_topk_logp,
                  trainer_topk_ids=trainer_topk_ids, trainer_topk_logp=trainer_topk_logp, prompt_mask=prompt_mask,
                  token_version=token_version, kept_ids=kept_ids, kept_offsets=kept_offsets, kept_counts=kept_counts,
                  kept_log_mass=kept_log_mass, **_side_arrays(sides))
    info = dict(model=model, rollout_engine=rollout_engine, rollout_dtype=rollout_dtype, trainer_engine=trainer_engine,
                trainer_dtype=trainer_dtype)
    target, step, rank, world_size = step_target(path, step, rank, world_size)  # checked before anything is made
    if meta is not None and not isinstance(meta, dict):
        raise BadInput(WHO, f"meta is {type(meta).__name__}, expected a dict")
    header = {**(meta or {}), **{k: v for k, v in info.items() if v is not None}, "rank": rank}
    if step is not None:
        header["step"] = step
    if world_size is not None:
        header["world_size"] = world_size
    if trainer_version is not None:
        header["trainer_version"] = _trainer_version(trainer_version)
    header.update(digest_meta(engine_digest, trainer_digest, header.get("trainer_version", step), weight_version))
    check_meta({"meta": header})
    if not isinstance(background, (bool, StepWriter)):
        raise BadInput(WHO, f"background={type(background).__name__}: expected True, False or a StepWriter")
    precheck(target)
    converted = convert(arrays)
    prompts = _prompts(prompt_ids, converted.arrays.pop("prompt_mask", None))
    batch = build_step(converted, header)
    if prompts is not None:
        if len(prompts) != batch.n_seqs:
            raise BadInput(WHO, f"'prompt_ids' has {len(prompts)} prompts for {batch.n_seqs} sequences")
        batch.prompt_ids = prompts
    if weight_version is not None:
        batch.weight_version = sequence_versions(weight_version, batch.n_seqs)
    if cached_tokens is not None:
        batch.cached_tokens = cached_counts(WHO, to_numpy("cached_tokens", cached_tokens), batch.n_seqs)
    if background is not False:
        writer = background if isinstance(background, StepWriter) else shared_writer()
        writer.put(target, batch)
    else:
        write(target, batch)
    return target.path


def digest_meta(engine: Any, trainer: Any, trainer_version: int | None, weight_version: Any) -> dict[str, list[dict]]:
    """The digests given for each side → meta's `engine_digest` and `trainer_digest` (docs/sync.md)."""
    return {f"{side}_digest": _side_digests(side, given, trainer_version, weight_version)
            for side, given in (("engine", engine), ("trainer", trainer)) if given is not None}


def _side_digests(side: str, given: Any, trainer: int | None, weight_version: Any) -> list[dict]:
    """One side's digests → the records meta carries (model.digest_records checks them; BadInput names what is
    wrong). A WeightDigest without a version belongs to the trainer's version (the trainer's side) or to the one
    version every sequence was generated with (the engine's)."""
    items = given if isinstance(given, list) else [given]
    out: list[dict] = []
    for item in items:
        if hasattr(item, "record") and callable(item.record):
            item = item.record()
            if item["version"] is None:
                item["version"] = trainer if side == "trainer" else _one_version(weight_version)
                if item["version"] is None:
                    raise BadInput(WHO, f"{side}_digest has no version and the step names no single one: make it with "
                                        "weight_digest(..., version=V)")
        records, problem = digest_records(item)
        if problem:
            raise BadInput(WHO, f"{side}_digest {problem}")
        out += records
    _, problem = digest_records(out)  # the count, all together
    if problem:
        raise BadInput(WHO, f"{side}_digest {problem}")
    return out


def _one_version(weight_version: Any) -> int | None:
    """The one integer version every sequence names, else None."""
    if weight_version is None or hasattr(weight_version, "detach"):
        values = [] if weight_version is None else to_numpy("weight_version", weight_version).tolist()
    else:
        values = list(weight_version)
    ints = [v for v in values if isinstance(v, (int, np.integer)) and not isinstance(v, bool)]  # a list is no version
    return int(ints[0]) if ints and len(ints) == len(values) and len(set(ints)) == 1 else None


def _side_arrays(sides: dict[str, Any] | None) -> dict[str, Any]:
    """`sides` by the names the arrays travel under (`side_NAME`), each name checked."""
    out = {}
    for name, value in (sides or {}).items():
        if (not (isinstance(name, str) and name and set(name) <= set(SIDE_NAME_CHARS) and len(name) <= SIDE_NAME_MAX)
                or name in ("rollout", "trainer")):
            raise BadInput(WHO, f"side name {_short(name)}: a side beyond rollout and trainer is named in at most "
                                f"{SIDE_NAME_MAX} lower-case letters, digits and _ (recompute, train, shadow, floor, or "
                                "your own)")
        out[SIDE_PREFIX + name] = value
    return out


class _Padded:
    """Takes [B, T] arrays' real positions row by row (a copy: the caller's buffers may change after the call)."""

    def __init__(self, keep: np.ndarray):
        self.keep = keep
        self.offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
        self.n_seqs = keep.shape[0]

    def __call__(self, a: dict, name: str, shape: tuple) -> np.ndarray:
        arr = a[name]
        if arr.shape[:2] != shape:
            raise BadInput(WHO, f"'{name}' is {list(arr.shape)} but the log-probs are {list(shape)}")
        return arr[self.keep]


class _Flat:
    """Flat [T] arrays are already in the canonical layout; each is checked to have T rows."""

    def __init__(self, offsets: np.ndarray):
        self.offsets = offsets
        self.n_seqs = offsets.shape[0] - 1

    def __call__(self, a: dict, name: str, shape: tuple) -> np.ndarray:
        arr = a[name]
        if arr.shape[:1] != shape:
            raise BadInput(WHO, f"'{name}' is {list(arr.shape)} but the log-probs are {list(shape)}")
        return arr


def _padded_keep(a: dict, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """[B, T] real positions and the flat trained mask over them."""
    mask2d = _bool("mask", a["mask"]) if "mask" in a else None
    if mask2d is not None and mask2d.shape != shape:
        raise BadInput(WHO, f"'mask' is {list(mask2d.shape)} but the log-probs are {list(shape)}")
    if "attention_mask" in a:
        att = a["attention_mask"]
        if att.ndim != 2 or att.shape[0] != shape[0] or att.shape[1] < shape[1]:
            raise BadInput(WHO, f"'attention_mask' is {list(att.shape)}: expected [{shape[0]}, >= {shape[1]}] "
                                "(its last T columns cover the response)")
        keep = _bool("attention_mask", att[:, att.shape[1] - shape[1]:])
        if mask2d is not None and (mask2d & ~keep).any():
            raise BadInput(WHO, "'mask' marks positions outside 'attention_mask' as trained")
    elif mask2d is not None:  # right padding: a row's tokens end at its last trained one
        last = np.where(mask2d.any(axis=1), shape[1] - 1 - np.argmax(mask2d[:, ::-1], axis=1), -1)
        keep = np.arange(shape[1])[None, :] <= last[:, None]
    else:
        keep = np.ones(shape, bool)
    mask = mask2d[keep] if mask2d is not None else np.ones(int(keep.sum()), bool)
    return keep, mask


def _int_fields(a: dict, take: _Padded | _Flat, shape: tuple, batch: StepBatch) -> None:
    for name, kind in (("token_ids", np.int64), ("turn", np.int32)):
        if name in a:
            setattr(batch, name, _ints(name, take(a, name, shape)).astype(kind, copy=False))
    if "token_version" in a:  # a uint64 beyond int64 is unknown, not wrapped
        batch.token_version = as_versions(_ints("token_version", take(a, "token_version", shape)))


def _kept(a: dict, take: _Padded | _Flat, shape: tuple, batch: StepBatch) -> None:
    """The kept sets in the layout of the log-probs (flat: offsets or counts; padded: counts per position), and the
    trainer's mass on them."""
    if "kept_ids" not in a:
        if "kept_offsets" in a or "kept_counts" in a:
            raise BadInput(WHO, "'kept_offsets' / 'kept_counts' go with 'kept_ids' (the kept sets' vocabulary ids)")
    elif isinstance(take, _Flat):
        if "kept_offsets" in a:
            found = kept.csr(WHO, a["kept_ids"], a["kept_offsets"], batch.n_tokens, "'kept_ids'")
        elif "kept_counts" in a:
            found = kept.from_counts(WHO, a["kept_ids"], take(a, "kept_counts", shape), "'kept_ids'")
        else:
            raise BadInput(WHO, "'kept_ids' needs 'kept_offsets' [T + 1] or 'kept_counts' [T] to say whose set is whose")
        kept.attach(batch, WHO, found)
    else:
        if "kept_counts" not in a or a["kept_counts"].shape != shape:
            raise BadInput(WHO, f"padded log-probs {list(shape)} take their kept sets as 'kept_counts' {list(shape)} (0 on "
                                "padding) with 'kept_ids' in position order")
        ids, off = kept.from_counts(WHO, a["kept_ids"], a["kept_counts"].reshape(-1), "'kept_ids'")
        kept.attach(batch, WHO, kept.take(ids, off, np.flatnonzero(take.keep.reshape(-1))))
    if "kept_log_mass" in a:
        kept.attach(batch, WHO, None, take(a, "kept_log_mass", shape))


def _optional(a: dict, take: _Padded | _Flat, shape: tuple, batch: StepBatch) -> None:
    _int_fields(a, take, shape, batch)
    _kept(a, take, shape, batch)
    if "advantage" in a:
        adv = a["advantage"]
        batch.advantage = (np.repeat(_floats("advantage", adv), np.diff(batch.offsets)) if adv.shape == (take.n_seqs,)
                           else _floats("advantage", take(a, "advantage", shape)))
    if "reward" in a:
        batch.reward = _reward(a["reward"], take, shape, batch)
    if "group" in a:
        g = a["group"]
        if g.shape != (take.n_seqs,):
            raise BadInput(WHO, f"'group' is {list(g.shape)}: expected one id per sequence ({take.n_seqs})")
        batch.group = g.astype(str)
    present = [n for n in TOPK_FIELDS if n in a]
    if present and len(present) != len(TOPK_FIELDS):
        raise BadInput(WHO, "top-k arrays come as all four (rollout_topk_ids, rollout_topk_logp, trainer_topk_ids, "
                            f"trainer_topk_logp); got {', '.join(present)}")
    for key in (k for k in a if k.startswith(SIDE_PREFIX)):
        raw = take(a, key, shape)  # float32 stays float32 (bf16 and fp16 were widened to it exactly)
        value = raw if raw.dtype == np.float32 else _floats(key, raw)
        name = key.removeprefix(SIDE_PREFIX)
        if name in ("shadow", "floor"):
            setattr(batch, f"{name}_logp", value)
        else:
            batch.sides[name] = value
    for name, dtype in TOPK_FIELDS.items() if present else ():
        value = take(a, name, shape)
        if value.ndim != 2:
            raise BadInput(WHO, f"'{name}' is {list(a[name].shape)}: expected [B, T, k] or flat [T, k]")
        setattr(batch, name, value.astype(dtype, copy=False))


def _reward(value: np.ndarray, take: _Padded | _Flat, shape: tuple, batch: StepBatch) -> np.ndarray:
    """Per sequence; token-level rewards (verl's token_level_rewards) summed over each sequence's tokens."""
    r = _floats("reward", value)
    if r.shape == (take.n_seqs,):
        return r
    per_token = take({"reward": r}, "reward", shape)
    return np.bincount(batch.seq_index(), weights=per_token, minlength=batch.n_seqs)


def sequence_versions(value: Any, n_seqs: int) -> np.ndarray:
    """One version string per sequence (the canonical `weight_version`): an integer as "3", a list of integers as
    "2,3" (distinct, in order), None as "" (unknown); anything else (a list inside a list, an integer of more than
    VERSION_DIGITS digits, more than MAX_SEQUENCE_VERSIONS distinct versions) is refused, so what is written reads back."""
    try:
        items = list(value) if not hasattr(value, "detach") else to_numpy("weight_version", value).tolist()
    except TypeError:
        raise BadInput(WHO, f"'weight_version' is {type(value).__name__}: expected one entry per sequence") from None
    if len(items) != n_seqs:
        raise BadInput(WHO, f"'weight_version' has {len(items)} entries for {n_seqs} sequences")

    def one(v: Any) -> str:
        if v is None:
            return ""
        if not isinstance(v, (list, tuple, np.ndarray)):
            return _version(v)
        seen = dict.fromkeys(_version(x) for x in (v.tolist() if isinstance(v, np.ndarray) else v) if x is not None)
        if len(seen) > MAX_SEQUENCE_VERSIONS:
            raise BadInput(WHO, f"'weight_version' names {len(seen):,} distinct versions for one sequence, more than "
                                f"the {MAX_SEQUENCE_VERSIONS:,} tim-report reads (config.bounds.MAX_SEQUENCE_VERSIONS)")
        return ",".join(seen)

    return np.asarray([one(v) for v in items], dtype=str)


def _version(v: Any) -> str:
    """One version: an integer of at most VERSION_DIGITS digits, or its text (at most 64 characters kept)."""
    if isinstance(v, str):
        return v.strip()[:64]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise BadInput(WHO, f"'weight_version' holds {_short(v)}: expected integers (or a list of them per sequence)")
    if abs(int(v)) >= 10**VERSION_DIGITS:
        raise BadInput(WHO, f"'weight_version' holds an integer of more than {VERSION_DIGITS} digits: not a version")
    return str(int(v))


def _trainer_version(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise BadInput(WHO, f"trainer_version={_short(v)}: expected an integer")
    if abs(int(v)) >= 10**VERSION_DIGITS:
        raise BadInput(WHO, f"trainer_version is an integer of more than {VERSION_DIGITS} digits: not a version")
    return int(v)


def _short(v: Any) -> str:
    """A value named in an error without converting it whole (a nested list's repr recurses; a huge int's fails)."""
    return f"a {type(v).__name__}" if isinstance(v, (list, tuple, dict, set, np.ndarray)) else repr(v)[:40]


def _prompts(ids: Any, mask: np.ndarray | None) -> list[np.ndarray] | None:
    """[B, P] prompt ids (with `prompt_mask`: left padding removed) or a list of 1-D arrays → one array per sequence."""
    if ids is None:
        return None
    if isinstance(ids, Sequence) and not isinstance(ids, (str, bytes)) and ids and np.ndim(to_numpy("prompt_ids", ids[0])) == 1:
        return [_ints("prompt_ids", to_numpy("prompt_ids", p)).astype(np.int64) for p in ids]
    arr = _ints("prompt_ids", to_numpy("prompt_ids", ids))
    if arr.ndim != 2:
        raise BadInput(WHO, f"'prompt_ids' is {list(arr.shape)}: expected [B, P] or a list of 1-D arrays")
    if mask is None:
        return [row.astype(np.int64) for row in arr]
    if mask.shape[0] != arr.shape[0] or mask.shape[1] < arr.shape[1]:
        raise BadInput(WHO, f"'prompt_mask' is {list(mask.shape)} but 'prompt_ids' is {list(arr.shape)}")
    keep = _bool("prompt_mask", mask[:, : arr.shape[1]])
    return [row[k].astype(np.int64) for row, k in zip(arr, keep)]


def _offsets(value: np.ndarray, n: int) -> np.ndarray:
    off = _ints("offsets", value).astype(np.int64)
    if off.ndim != 1 or off.size < 2 or off[0] != 0 or off[-1] != n or np.any(np.diff(off) < 0):
        raise BadInput(WHO, f"'offsets' must rise from 0 to the token count {n} (got {off.size} values)")
    return off


def _bool(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind not in "iuf":
        raise BadInput(WHO, f"'{name}' holds {arr.dtype}, expected 0/1 or booleans")
    return arr > 0


def _ints(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind not in "iub":
        raise BadInput(WHO, f"'{name}' holds {arr.dtype}, expected integers")
    return arr


def _floats(name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind not in "iuf":
        raise BadInput(WHO, f"'{name}' holds {arr.dtype}, expected numbers")
    return arr.astype(np.float64, copy=False)

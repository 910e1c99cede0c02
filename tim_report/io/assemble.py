"""Raw values + role choices → StepBatch: the three layouts flattened onto flat tokens and CSR offsets.

    padded  [B, L] arrays plus a mask (verl, TRL, OpenRLHF),
    ragged  a list of per-sequence lists (slime, prime-rl, JSONL),
    flat    [T] arrays plus `offsets` / `cu_seqlens` (the canonical format, with its kept sets: io/kept.py).
The rollout log-prob value decides the layout; every other token-level role is read in the same one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config import TOPK_MAX
from ..errors import BadInput
from ..model import UNKNOWN_VERSION, StepBatch
from . import kept
from .canonical import ROUTE_FIELDS, TOPK_FIELDS, named_sides
from .files import RawFile
from .masks import outside_trained, trained, without_tools
from .roles import SIDE_ROLES, RoleChoice, key_list
from .sequences import Exclusions, cached_counts, count_placeholders, turn_index
from .text import as_text, decoded

ALIGNMENT = ("same position: trainer_logp[t] and rollout_logp[t] score token t "
             "(no shift applied; OpenRLHF [1:] / AReaL roll(-1) layouts must be aligned before saving)")


class _Flattener:
    """Maps a layout onto flat token arrays and CSR offsets."""

    def __init__(self, offsets: np.ndarray, keep2d: np.ndarray | None):
        self.offsets = offsets.astype(np.int64, copy=False)
        self.keep2d = keep2d
        self.every = keep2d is not None and bool(keep2d.all())  # no padding: a [B, L] array is its tokens, row by row

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    @classmethod
    def padded(cls, keep2d: np.ndarray) -> _Flattener:
        return cls(np.concatenate([[0], np.cumsum(keep2d.sum(axis=1))]), keep2d)

    @classmethod
    def ragged(cls, lengths: np.ndarray) -> _Flattener:
        return cls(np.concatenate([[0], np.cumsum(lengths)]), None)

    def take(self, arr2d: np.ndarray) -> np.ndarray:
        return arr2d.reshape(-1) if self.every else arr2d[self.keep2d]  # a view, not a 16M-token gather, if it can be

    def cat(self, seqs: list) -> np.ndarray:
        return np.concatenate([np.asarray(s) for s in seqs]) if seqs else np.zeros(0)


@dataclass
class _Layout:
    """What a layout reader returns: the flat log-probs, the trained-on mask and the flattener."""

    rollout: np.ndarray
    trainer: np.ndarray
    mask: np.ndarray
    flat: _Flattener
    problems: dict[str, int]
    removed: dict[str, int] = field(default_factory=dict)  # [B, L] positions left out, by reason (padded layout)


def build_batch(raw: RawFile, roles: dict[str, RoleChoice]) -> StepBatch:
    p = raw.path
    missing = [r for r in ("rollout", "trainer") if roles[r].key is None]
    if missing:
        names = " and ".join(f"{r} log-probs" for r in missing)
        raise BadInput(p, f"no {names} found (keys: {key_list(raw)}); name them with --key rollout=NAME --key trainer=NAME")

    def get(role: str) -> Any:
        key = roles[role].key
        return None if key is None else raw.values[key]

    rollout_raw = get("rollout")
    layout = _layout_of(p, rollout_raw, roles["rollout"].key, get("offsets"))
    notes: list[str] = []
    tokens = _LAYOUTS[layout](p, roles, get, notes)
    if tokens.flat.n_tokens == 0:
        raise BadInput(p, "no tokens: every position is padding")
    if not tokens.mask.any():
        raise BadInput(p, f"mask '{roles['mask'].key}' selects no tokens")

    batch = StepBatch(
        rollout_logp=tokens.rollout.astype(np.float64, copy=False),
        trainer_logp=tokens.trainer.astype(np.float64, copy=False),
        offsets=tokens.flat.offsets, mask=tokens.mask, meta=dict(raw.meta), notes=notes, problems=tokens.problems,
    )
    _optional_roles(p, roles, get, layout, tokens.flat, rollout_raw, raw, batch)
    batch.meta.setdefault("source", str(p))
    batch.meta["layout"] = layout
    batch.meta["keys"] = {r: c.key for r, c in roles.items() if c.key is not None}
    batch.meta.setdefault("alignment", ALIGNMENT)
    if raw.canonical:
        _canonical_fields(p, raw, batch)
    else:
        batch.meta.setdefault("framework", "dict")
        batch.meta["exclusions"] = _exclusions(tokens, batch)
    if batch.turn is None:  # no explicit turn ids: the tool spans inside the loss mask
        batch.turn = turn_index(batch.mask, batch.rollout_logp, batch.offsets)
    return batch


PADDING_WHY = ("padded positions of the [B, L] arrays: outside the attention mask; without one, before a row's first "
               "or after its last trained token (or, with no mask either, where both log-probs are 0.0)")
LEAD_WHY = ("prompt of a whole-sequence layout (OpenRLHF): the untrained 0.0 placeholders before a row's first trained "
            "token; left out, so positions count from the response's first token")


def _exclusions(tokens: _Layout, batch: StepBatch) -> list[dict]:
    """What a plain dict's layout left out: padding and prompt positions, and untrained tokens kept in the tables."""
    ex = Exclusions()
    ex.add("padding", tokens.removed.get("padding", 0), PADDING_WHY)
    ex.add("prompt positions", tokens.removed.get("prompt", 0), LEAD_WHY)
    count_placeholders(batch.rollout_logp, batch.mask, ex, batch.notes)
    return ex.to_list()


def _canonical_fields(p: Path, raw: RawFile, batch: StepBatch) -> None:
    """The optional per-sequence version / environment of a canonical file (its `turn` is a role)."""
    for name, shape, dtype in (("weight_version", batch.n_seqs, str), ("env", batch.n_seqs, str)):
        if (value := raw.values.get(name)) is None:
            continue
        if (arr := np.asarray(value)).shape != (shape,):
            raise BadInput(p, f"'{name}' has shape {list(arr.shape)}, expected [{shape}]")
        setattr(batch, name, arr.astype(dtype))
    if "token_version" in raw.values:  # checked from the header before it is read
        declared, kind = _declared(raw, "token_version")
        if declared != (batch.n_tokens,) or kind.kind not in "iu":
            raise BadInput(p, f"'token_version' is {kind} {list(declared)}: expected one integer version per token "
                              f"({batch.n_tokens})")
        batch.token_version = as_versions(raw.values["token_version"])
    batch.cached_tokens = cached_counts(p, raw.values["cached_tokens"], batch.n_seqs) if "cached_tokens" in raw.values else None
    _topk_fields(p, raw, batch)
    _route_fields(p, raw, batch)
    batch.sides.update(named_sides(p, raw.values, batch.n_tokens))
    kept.canonical(p, raw.values, lambda key: _declared(raw, key), batch)

def _route_fields(p: Path, raw: RawFile, batch: StepBatch) -> None:
    """Either side's routed experts, integers of any shape and width (never cast: ids 2³² apart must stay apart):
    whether they line up with the tokens and are expert indices is the analysis's finding (analysis/routes.py), not a
    reason to refuse the batch."""
    for name in ROUTE_FIELDS:
        if name in raw.values:
            _, dtype = _declared(raw, name)
            if dtype.kind not in "iu":
                raise BadInput(p, f"'{name}' holds {dtype}, expected integers (expert ids)")
            setattr(batch, name, np.asarray(raw.values[name]))  # at full width: the analysis judges the ids


def _topk_fields(p: Path, raw: RawFile, batch: StepBatch) -> None:
    """Both sides' [T, k] top-k ids and log-probs: all four or none, each side's pair of the same shape."""
    present = [n for n in TOPK_FIELDS if n in raw.values]
    if not present:
        return
    if len(present) != len(TOPK_FIELDS):
        missing = ", ".join(n for n in TOPK_FIELDS if n not in present)
        raise BadInput(p, f"has {', '.join(present)} but not {missing}: top-k arrays come as all four or none")
    for side in ("rollout", "trainer"):
        names = (f"{side}_topk_ids", f"{side}_topk_logp")
        shapes = [_declared(raw, n) for n in names]  # from the .npy headers: checked before anything is read
        for name, (shape, dtype), kind in zip(names, shapes, ("iu", "f")):
            if len(shape) != 2 or shape[0] != batch.n_tokens or not 1 <= shape[1] <= TOPK_MAX:
                raise BadInput(p, f"'{name}' has shape {list(shape)}, expected [{batch.n_tokens}, k] with 1 ≤ k ≤ {TOPK_MAX}")
            if dtype.kind not in kind:
                raise BadInput(p, f"'{name}' holds {dtype}, expected {'integers' if kind == 'iu' else 'floats'}")
        if shapes[0][0] != shapes[1][0]:
            raise BadInput(p, f"'{names[0]}' has shape {list(shapes[0][0])} but '{names[1]}' {list(shapes[1][0])}: "
                              "they must match")
        setattr(batch, names[0], np.asarray(raw.values[names[0]]).astype(np.int32, copy=False))
        setattr(batch, names[1], np.asarray(raw.values[names[1]]).astype(np.float32, copy=False))


def _declared(raw: RawFile, key: str) -> tuple[tuple, np.dtype]:
    """A value's shape and dtype; an archive read lazily answers from its header, unread."""
    if hasattr(raw.values, "headers"):
        h = raw.values.headers[key]
        if h.error is not None:
            raise BadInput(raw.path, f"member '{key}' is not a readable .npy array ({h.error})")
        return h.shape, h.dtype
    arr = np.asarray(raw.values[key])
    return arr.shape, arr.dtype


def _layout_of(p: Path, value: Any, key: str | None, offsets: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, (list, np.ndarray)) for v in value):
        if all(_ndim(v) == 1 for v in value):
            return "ragged"
        raise BadInput(p, f"'{key}' is nested deeper than one list of numbers per sequence")
    try:
        arr = np.asarray(value) if not isinstance(value, np.ndarray) else value
    except ValueError as exc:
        raise BadInput(p, f"'{key}' is ragged where a rectangular array was expected") from exc
    if arr.ndim == 2:
        return "padded"
    if arr.ndim == 1:
        if offsets is None:
            raise BadInput(p, f"'{key}' is 1-D {arr.shape} but there is no 'offsets'/'cu_seqlens' to split it into "
                              "sequences: expected a 2-D [batch, length] array")
        return "flat"
    raise BadInput(p, f"'{key}' has {arr.ndim} dimensions {arr.shape}: expected [batch, length], per-sequence lists, or flat with offsets")


def _logprobs(p: Path, roles: dict[str, RoleChoice], get: Callable, layout: str) -> tuple[Any, Any]:
    rollout = _numeric(p, roles["rollout"].key, get("rollout"), layout)
    trainer = _numeric(p, roles["trainer"].key, get("trainer"), layout)
    _same_shape(p, rollout, trainer, roles["rollout"].key, roles["trainer"].key)
    return rollout, trainer


def _padded_layout(p: Path, roles: dict[str, RoleChoice], get: Callable, notes: list[str]) -> _Layout:
    """Which [B, L] positions are tokens, and which of those are trained.

    Real tokens: `attention_mask` (its last L columns); else, with a mask, each row from its first to its last
    trained token, the untrained gaps between kept (tool output: turns and positions survive); else positions
    where both log-probs are not exactly 0.0. TRL's `tool_mask` takes tool-result tokens out of the trained ones
    (its loss mask is completion_mask * tool_mask; the completion mask says which tokens are real). A row whose
    tokens before its first trained one are all 0.0 rollout placeholders starts with a prompt (OpenRLHF's
    whole-sequence [B, T−1] layout, both sides 0.0 there): those positions are left out."""
    rollout, trainer = _logprobs(p, roles, get, "padded")
    if rollout.size == 0:  # a [0, 0] or [B, 0] batch: no row has a position to find its first trained one in
        raise BadInput(p, f"no tokens: '{roles['rollout'].key}' has shape {list(rollout.shape)}")
    cols = rollout.shape[1]
    mask2d = _aligned(p, "mask", roles, get("mask"), rollout.shape, notes)
    problems: dict[str, int] = {}
    if mask2d is not None:
        mask2d, problems = trained(mask2d)
    real = None
    attn = get("attention")
    if attn is not None:
        attn = _numeric(p, roles["attention"].key, attn, "padded")
        if attn.shape[0] != rollout.shape[0] or attn.shape[1] < cols:
            raise BadInput(p, f"'attention_mask' has shape {attn.shape}, expected [{rollout.shape[0]}, >= {cols}]")
        real = attn[:, -cols:] > 0
    tool = _aligned(p, "tool", roles, get("tool"), rollout.shape, notes)
    if tool is not None:
        base = mask2d if mask2d is not None else np.ones(rollout.shape, bool)
        real = base if real is None else real
        mask2d = without_tools(base & real, tool, roles, notes)
    if mask2d is None:
        if real is None:
            real = ~((rollout == 0) & (trainer == 0))
            notes.append("no mask key: positions where both log-probs are exactly 0.0 were taken as padding")
        keep2d, mask, lead = real, np.ones(int(real.sum()), bool), 0
    else:
        if rollout.size and not mask2d.any():
            raise BadInput(p, f"mask '{roles['mask'].key}' selects no tokens")
        before, after = outside_trained(mask2d)
        if real is None:
            real = ~before & ~after
        pre = before & real
        whole = mask2d.any(axis=1) & ~(pre & (rollout != 0)).any(axis=1)  # rows that start with a placeholder prompt
        lead2d = pre & whole[:, None]
        keep2d = real & ~lead2d
        mask, lead = mask2d[keep2d], int(lead2d.sum())
    flat = _Flattener.padded(keep2d)
    removed = {"prompt": lead, "padding": int(keep2d.size - keep2d.sum()) - lead}
    return _Layout(flat.take(rollout), flat.take(trainer), mask, flat, problems, removed)


def _ragged_layout(p: Path, roles: dict[str, RoleChoice], get: Callable, notes: list[str]) -> _Layout:
    rollout, trainer = _logprobs(p, roles, get, "ragged")
    lengths = np.array([len(r) for r in rollout], dtype=np.int64)
    flat = _Flattener.ragged(lengths)
    m = get("mask")
    mask, problems = (trained(flat.cat(_numeric(p, roles["mask"].key, m, "ragged", lengths))) if m is not None
                      else (np.ones(flat.n_tokens, bool), {}))
    tool = get("tool")
    if tool is not None:
        mask = without_tools(mask, flat.cat(_numeric(p, roles["tool"].key, tool, "ragged", lengths)), roles, notes)
    return _Layout(flat.cat(rollout), flat.cat(trainer), mask, flat, problems)


def _flat_layout(p: Path, roles: dict[str, RoleChoice], get: Callable, notes: list[str]) -> _Layout:
    rollout, trainer = _logprobs(p, roles, get, "flat")
    offsets = _offsets(p, roles["offsets"].key, get("offsets"), rollout.shape[0])
    flat = _Flattener(offsets, None)
    m = get("mask")
    mask, problems = trained(_numeric(p, roles["mask"].key, m, "flat")) if m is not None else (np.ones(flat.n_tokens, bool), {})
    _same_shape(p, rollout, mask, roles["rollout"].key, roles["mask"].key)
    tool = get("tool")
    if tool is not None:
        tool = _numeric(p, roles["tool"].key, tool, "flat")
        _same_shape(p, rollout, tool, roles["rollout"].key, roles["tool"].key)
        mask = without_tools(mask, tool, roles, notes)
    return _Layout(rollout, trainer, mask, flat, problems)


_LAYOUTS = {"padded": _padded_layout, "ragged": _ragged_layout, "flat": _flat_layout}


def _optional_roles(p, roles, get, layout, flat, rollout_raw, raw: RawFile, batch: StepBatch) -> None:
    """Token ids, shadow and floor log-probs, text, groups, rewards, advantages and prompts, where the file has them."""
    notes = batch.notes
    batch.token_ids = _token_role(p, "tokens", roles, get("tokens"), layout, flat, rollout_raw, notes, np.int64)
    batch.shadow_logp = _token_role(p, "shadow", roles, get("shadow"), layout, flat, rollout_raw, notes, np.float64)
    batch.floor_logp = _token_role(p, "floor", roles, get("floor"), layout, flat, rollout_raw, notes, np.float64)
    batch.sides = {r: v for r in SIDE_ROLES if (v := _token_role(p, r, roles, get(r), layout, flat, rollout_raw, notes,
                                                                  np.float64)) is not None}
    batch.token_text = _text_role(p, roles, get("text"), layout, flat)
    batch.group = _group_role(p, roles, get("group"), batch)
    value = get("reward")
    batch.reward = None if value is None else _per_seq(p, roles["reward"].key, value, layout, flat, batch)
    batch.advantage = _advantage_role(p, roles, get("advantage"), layout, flat, batch)
    turn = _token_role(p, "turn", roles, get("turn"), layout, flat, rollout_raw, notes, np.float64)
    if turn is not None and not (np.isfinite(turn).all() and (turn == np.round(turn)).all() and (turn >= 0).all()):
        raise BadInput(p, f"'{roles['turn'].key}' holds values that are not turn numbers (whole numbers ≥ 0)")
    batch.turn = None if turn is None else turn.astype(np.int32)
    _prompt_roles(p, roles, get("prompt"), get("prompt_text"), get("attention"), raw, batch)


def _numeric(p: Path, key: str | None, value: Any, layout: str, lengths: np.ndarray | None = None) -> Any:
    """A float array (or list of arrays when ragged); refuses objects and strings."""
    if layout == "ragged":
        if not isinstance(value, list):
            raise BadInput(p, f"'{key}' is not a per-sequence list like the log-probs")
        out = [_numeric(p, key, v, "flat") for v in value]
        if lengths is not None and (len(out) != len(lengths) or any(len(a) != n for a, n in zip(out, lengths))):
            raise BadInput(p, f"'{key}' sequence lengths differ from the log-probs'")
        return out
    try:
        arr = np.asarray(value)
    except ValueError as exc:
        raise BadInput(p, f"'{key}' is ragged where a rectangular array was expected") from exc
    if arr.dtype == bool:
        arr = arr.view(np.int8)
    if arr.dtype.kind not in "iuf":
        raise BadInput(p, f"'{key}' is not numeric (dtype {arr.dtype})")
    return arr


def _same_shape(p: Path, a: Any, b: Any, ka: str | None, kb: str | None) -> None:
    if isinstance(a, list):
        if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
            raise BadInput(p, f"'{ka}' and '{kb}' have different sequence lengths")
    elif a.shape != b.shape:
        raise BadInput(p, f"shape mismatch: '{ka}' is {list(a.shape)} but '{kb}' is {list(b.shape)}")


def _aligned(p: Path, role: str, roles: dict[str, RoleChoice], value: Any, shape: tuple, notes: list[str]) -> Any:
    """A padded [B, L'] token-level array aligned to the log-probs' [B, L] (right-aligned if wider)."""
    if value is None:
        return None
    key = roles[role].key
    arr = _numeric(p, key, value, "padded")
    if arr.ndim != 2 or arr.shape[0] != shape[0] or arr.shape[1] < shape[1]:
        raise BadInput(p, f"shape mismatch: '{key}' is {list(arr.shape)} but the log-probs are {list(shape)}")
    if arr.shape[1] > shape[1]:
        notes.append(f"'{key}' is wider than the log-probs ({arr.shape[1]} > {shape[1]}): its last {shape[1]} columns were used")
        arr = arr[:, -shape[1]:]
    return arr


def _ndim(v: Any) -> int | None:
    """Dimensions of a list or array; None when it is ragged (lists of lists of different lengths)."""
    try:
        return np.ndim(v)
    except ValueError:
        return None


def _offsets(p: Path, key: str | None, value: Any, n: int) -> np.ndarray:
    off = _numeric(p, key, value, "flat")
    if off.dtype.kind == "f" and not (np.isfinite(off).all() and (off == np.round(off)).all()):
        raise BadInput(p, f"'{key}' holds values that are not whole numbers (NaN, inf or fractions)")
    off = off.astype(np.int64)
    if off.ndim != 1 or off.size < 2 or off[0] != 0 or off[-1] != n or np.any(np.diff(off) < 0):
        raise BadInput(p, f"'{key}' must rise from 0 to the token count {n}")
    return off


def _token_role(p, role, roles, value, layout, flat, rollout_raw, notes, dtype) -> np.ndarray | None:
    if value is None:
        return None
    key = roles[role].key
    if layout == "padded":
        return flat.take(_aligned(p, role, roles, value, np.shape(rollout_raw), notes)).astype(dtype, copy=False)
    if layout == "ragged":
        lengths = np.diff(flat.offsets)
        return flat.cat(_numeric(p, key, value, "ragged", lengths)).astype(dtype, copy=False)
    arr = _numeric(p, key, value, "flat")
    if arr.shape != (flat.n_tokens,):
        raise BadInput(p, f"shape mismatch: '{key}' is {list(arr.shape)} but there are {flat.n_tokens} tokens")
    return arr.astype(dtype, copy=False)


def _text_role(p, roles, value, layout, flat) -> np.ndarray | None:
    if value is None:
        return None
    key = roles["text"].key
    if isinstance(value, (str, bytes)) or (isinstance(value, np.ndarray) and value.ndim == 0):
        raise BadInput(p, f"'{key}' is a single {type(value).__name__} value, not one string per token")
    value = as_text(value)  # bytes: decoded, bad UTF-8 shown as U+FFFD
    if layout == "padded":
        arr = np.asarray(value, dtype=object) if isinstance(value, list) else value
        if arr.ndim != 2 or not flat.keep2d.shape == arr.shape:
            raise BadInput(p, f"shape mismatch: '{key}' is {list(np.shape(arr))} but the log-probs are {list(flat.keep2d.shape)}")
        return np.asarray(arr[flat.keep2d], dtype=str)
    if layout == "ragged":
        if not isinstance(value, list) or [len(v) for v in value] != list(np.diff(flat.offsets)):
            raise BadInput(p, f"'{key}' sequence lengths differ from the log-probs'")
        return np.asarray([str(t) for seq in value for t in seq], dtype=str)
    arr = np.asarray(value, dtype=str)
    if arr.shape != (flat.n_tokens,):
        raise BadInput(p, f"shape mismatch: '{key}' is {list(arr.shape)} but there are {flat.n_tokens} tokens")
    return arr


def _group_role(p, roles, value, batch: StepBatch) -> np.ndarray | None:
    if value is not None:
        arr = np.asarray(value)
        if arr.dtype.kind == "S":
            arr = decoded(arr)
        if arr.shape != (batch.n_seqs,):
            raise BadInput(p, f"'{roles['group'].key}' has shape {list(arr.shape)}, expected one entry per sequence ({batch.n_seqs})")
        return arr.astype(str)
    n = next((batch.meta[k] for k in ("n", "n_samples", "rollout_n", "num_generations") if isinstance(batch.meta.get(k), int)), None)
    if n and n > 0 and batch.n_seqs % n == 0:
        batch.notes.append(f"no group key: groups are {n} contiguous sequences each (meta n={n})")
        return np.repeat(np.arange(batch.n_seqs // n), n).astype(str)
    return None


def _per_seq(p, key, value, layout, flat, batch: StepBatch) -> np.ndarray:
    """A sequence-level or token-level value reduced to [N] (token-level: summed)."""
    if layout == "ragged" and isinstance(value, list) and value and isinstance(value[0], (list, np.ndarray)):
        return np.array([float(np.sum(v)) for v in value])
    arr = _numeric(p, key, value, "flat")
    if arr.ndim == 2 and layout == "padded" and arr.shape == flat.keep2d.shape:
        return np.where(flat.keep2d, arr, 0).sum(axis=1).astype(np.float64)
    if arr.shape == (batch.n_seqs,):
        return arr.astype(np.float64)
    raise BadInput(p, f"'{key}' has shape {list(arr.shape)}: expected one value per sequence ({batch.n_seqs}) or per token")


def _advantage_role(p, roles, value, layout, flat, batch: StepBatch) -> np.ndarray | None:
    """Advantages per token: padded [B, L] taken per token, per-sequence values broadcast."""
    if value is None:
        return None
    key = roles["advantage"].key
    if layout == "padded":
        arr = _numeric(p, key, value, "flat")
        if arr.shape == flat.keep2d.shape:
            return flat.take(arr).astype(np.float64)
    if layout == "ragged" and isinstance(value, list) and value and isinstance(value[0], (list, np.ndarray)):
        return flat.cat(_numeric(p, key, value, "ragged", batch.seq_lengths)).astype(np.float64)
    arr = _numeric(p, key, value, "flat")
    if arr.shape == (batch.n_tokens,):
        return arr.astype(np.float64)
    if arr.shape == (batch.n_seqs,):
        return np.repeat(arr.astype(np.float64), batch.seq_lengths)
    raise BadInput(p, f"'{key}' has shape {list(arr.shape)}: expected per token or per sequence")


def _prompt_roles(p, roles, ids, text, attention, raw: RawFile, batch: StepBatch) -> None:
    if text is not None:
        arr = np.asarray(text)
        if arr.dtype.kind == "S":
            arr = decoded(arr)
        if arr.shape == (batch.n_seqs,) and arr.dtype.kind == "U":
            batch.prompt_text = [str(t) for t in arr]
    if ids is None:
        return
    key = roles["prompt"].key
    if raw.canonical and "prompt_offsets" in raw.values:
        off = np.asarray(raw.values["prompt_offsets"], dtype=np.int64)
        flat = np.asarray(ids, dtype=np.int64)
        batch.prompt_ids = [flat[off[i]:off[i + 1]] for i in range(len(off) - 1)]
        return
    if isinstance(ids, list):
        batch.prompt_ids = [np.asarray(x, dtype=np.int64) for x in ids]
    else:
        arr = _numeric(p, key, ids, "flat")
        if arr.ndim != 2:
            return
        keep = np.ones(arr.shape, bool)
        if attention is not None:  # verl: prompts are left-padded; attention_mask's first columns cover them
            att = np.asarray(attention)
            if att.ndim == 2 and att.shape[0] == arr.shape[0] and att.shape[1] >= arr.shape[1]:
                keep = att[:, : arr.shape[1]] > 0
        batch.prompt_ids = [row[k].astype(np.int64) for row, k in zip(arr, keep)]
    if len(batch.prompt_ids) != batch.n_seqs:
        raise BadInput(p, f"'{key}' has {len(batch.prompt_ids)} prompts for {batch.n_seqs} sequences")


def as_versions(values: Any) -> np.ndarray:
    """Per-token versions as int64; an unsigned value int64 cannot hold is unknown, never wrapped to a small one."""
    v = np.asarray(values)
    out = v.astype(np.int64)
    if v.dtype.kind == "u":
        out[v > np.iinfo(np.int64).max] = UNKNOWN_VERSION
    return out

"""Kept sets: the vocabulary ids that survived the sampler's top-k / top-p / min-p for each token, as CSR over the flat
tokens (StepBatch.kept_ids [K] int32, kept_offsets [T + 1] int64; token t's set is ids[offsets[t]:offsets[t + 1]],
empty where none was recorded).

The frameworks write them in four shapes, each turned into that one here:

    offsets   ids plus offsets: vLLM's SamplingMaskLists in transit, miles' `rollout_sampling_mask_ids` /
              `rollout_sampling_mask_offsets` per sample, SkyRL's sparse `sample_support_csr_*`, the canonical file
    counts    ids plus one kept-set size per token, 0 where none: prime-rl's `SamplingMask(ids, counts)`
    nested    one list per token: vLLM's `CompletionOutput.sampling_mask.token_ids`
    dense     [T, K] padded with −1: SkyRL's `sample_support_ids`

Every count is checked before anything is allocated from it (a kept set's ids are bounded by one array's bytes,
io/limits.py), ids are vocabulary indices (0 ≤ id < 2³¹), offsets rise from 0 to the number of ids: else one line of
BadInput naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..catalogue.numbers import fmt
from ..config import POSITIVE_LOGP_TOLERANCE
from ..errors import BadInput
from ..model import StepBatch
from .limits import current

CSR = tuple[np.ndarray, np.ndarray]  # (ids [K] int32, offsets [T + 1] int64)
VOCAB_LIMIT = 2**31  # a vocabulary index fits int32 (the largest vocabularies hold some 260k ids)


def max_ids() -> int:
    """The most kept ids a batch may hold: one int32 array within this run's per-array bytes."""
    return current().max_bytes // 4


def _bounded(where: Path | str, count: int, what: str) -> None:
    if count > max_ids():
        limits = current()
        raise BadInput(where, f"{what} hold {fmt(count)} kept ids, more than this run reads ({fmt(max_ids())}, from "
                              f"--max-tokens {fmt(limits.max_tokens)}); raise --max-tokens if the file is real")


def _ints(where: Path | str, value: Any, what: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "b" or (arr.size and arr.dtype.kind not in "iu"):
        raise BadInput(where, f"{what} holds {arr.dtype}, expected integers")
    return arr


def _ids(where: Path | str, value: Any, what: str) -> np.ndarray:
    arr = _ints(where, value, what).reshape(-1)
    _bounded(where, arr.shape[0], what)
    if arr.size and (arr.min() < 0 or arr.max() >= VOCAB_LIMIT):
        bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
        raise BadInput(where, f"{what} holds {bad}, not a vocabulary index (0 ≤ id < 2³¹)")
    return arr.astype(np.int32, copy=False)


def csr(where: Path | str, ids: Any, offsets: Any, n_tokens: int, what: str = "the kept sets") -> CSR:
    """Ids and offsets checked against each other and the token count."""
    off = _ints(where, offsets, f"the offsets of {what}")
    if off.ndim != 1 or off.shape[0] != n_tokens + 1:
        raise BadInput(where, f"the offsets of {what} are {list(off.shape)}: expected one per token plus one ({n_tokens + 1})")
    ids = _ids(where, ids, what)
    off = off.astype(np.int64, copy=False)
    if off[0] != 0 or off[-1] != ids.shape[0] or (off.shape[0] > 1 and bool((np.diff(off) < 0).any())):
        raise BadInput(where, f"the offsets of {what} must rise from 0 to the number of ids ({ids.shape[0]}); they run "
                              f"{int(off[0])} … {int(off[-1])}")
    return ids, off


def from_counts(where: Path | str, ids: Any, counts: Any, what: str = "the kept sets") -> CSR:
    """prime-rl's layout: ids in position order and one kept-set size per token (0: none recorded)."""
    c = _ints(where, counts, f"the counts of {what}").reshape(-1)
    if c.size and c.min() < 0:
        raise BadInput(where, f"the counts of {what} hold {int(c.min())}: a kept set has no negative size")
    total = int(c.sum(dtype=np.float64)) if c.size else 0  # float: a hostile sum never wraps
    _bounded(where, total, what)
    off = np.zeros(c.shape[0] + 1, np.int64)
    np.cumsum(c, out=off[1:])
    return csr(where, ids, off, c.shape[0], what)


def from_nested(where: Path | str, rows: Any, what: str = "the kept sets") -> CSR:
    """vLLM's `SamplingMask.token_ids`: one list of ids per token."""
    try:
        rows = list(rows)
        sizes = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
        _bounded(where, int(sizes.sum(dtype=np.float64)), what)
        off = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(sizes, out=off[1:])
        flat = np.fromiter((_one_id(i) for r in rows for i in r), np.int64, count=int(off[-1]))
    except (TypeError, ValueError, OverflowError):
        raise BadInput(where, f"{what} are not one list of integer ids per token") from None
    return csr(where, flat, off, len(rows), what)


def _one_id(v: Any) -> int:
    if isinstance(v, (bool, float, str, bytes)) or not isinstance(v, (int, np.integer)):
        raise TypeError(v)
    return int(v)


def from_dense(where: Path | str, arr: Any, what: str = "the kept sets") -> CSR:
    """SkyRL's `[T, K]` rows, −1 where a row has fewer ids than K."""
    a = _ints(where, arr, what)
    if a.ndim != 2:
        raise BadInput(where, f"{what} are {list(a.shape)}: expected [tokens, K] padded with -1")
    keep = a >= 0
    off = np.zeros(a.shape[0] + 1, np.int64)
    np.cumsum(keep.sum(axis=1), out=off[1:])
    return csr(where, a[keep], off, a.shape[0], what)


def concat(parts: list[CSR]) -> CSR:
    """Sequences' kept sets end to end."""
    if not parts:
        return np.zeros(0, np.int32), np.zeros(1, np.int64)
    ids = np.concatenate([p[0] for p in parts]).astype(np.int32, copy=False)
    shifts = np.cumsum([0] + [int(p[1][-1]) for p in parts[:-1]])
    off = np.concatenate([[0]] + [p[1][1:] + s for p, s in zip(parts, shifts)]).astype(np.int64)
    return ids, off


def take(ids: np.ndarray, offsets: np.ndarray, index: np.ndarray) -> CSR:
    """The kept sets of the tokens at `index`, in that order."""
    index = np.asarray(index, np.int64)
    counts = (offsets[index + 1] - offsets[index]).astype(np.int64)
    off = np.zeros(index.shape[0] + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    gather = np.repeat(offsets[index] - off[:-1], counts) + np.arange(int(off[-1]), dtype=np.int64)
    return ids[gather], off


def empty(n_tokens: int) -> CSR:
    """No kept set recorded for any of n tokens."""
    return np.zeros(0, np.int32), np.zeros(n_tokens + 1, np.int64)


def log_mass(where: Path | str, value: Any, n_tokens: int, notes: list[str]) -> np.ndarray:
    """The trainer's log-probability mass on each kept set: one float per token, ≤ 0; NaN where unknown (a value
    above 0 or −inf is no mass: unknown, said in a note)."""
    arr = np.asarray(value)
    if arr.shape != (n_tokens,) or arr.dtype.kind not in "fiu":
        raise BadInput(where, f"'kept_log_mass' is {arr.dtype} {list(arr.shape)}: expected one float per token ({n_tokens})")
    out = arr.astype(np.float64)
    bad = ~np.isnan(out) & ((out > POSITIVE_LOGP_TOLERANCE) | np.isinf(out))
    if bad.any():
        notes.append(f"{int(bad.sum())} kept-set masses are above 1 or zero (log mass > 0 or −inf): read as unknown")
        out[bad] = np.nan
    return np.where(np.isnan(out), np.nan, np.minimum(out, 0.0))


def attach(batch: StepBatch, where: Path | str, kept: CSR | None, mass: Any = None) -> None:
    """Put checked kept sets (and the trainer's mass on them) on a batch; sets of another length are bad input."""
    if kept is not None:
        ids, off = kept
        if off.shape[0] != batch.n_tokens + 1:
            raise BadInput(where, f"the kept sets cover {off.shape[0] - 1} tokens, the batch has {batch.n_tokens}")
        batch.kept_ids, batch.kept_offsets = ids, off
    if mass is not None:
        batch.kept_log_mass = log_mass(where, mass, batch.n_tokens, batch.notes)


CANONICAL = ("kept_ids", "kept_offsets")


def canonical(p: Path, values: Any, declared: Any, batch: StepBatch) -> None:
    """A canonical file's `kept_ids` / `kept_offsets` (both or neither) and `kept_log_mass`, each declared size checked
    before it is read (`declared(key)` → (shape, dtype))."""
    present = [k for k in CANONICAL if k in values]
    if len(present) == 1:
        raise BadInput(p, f"has '{present[0]}' without '{({*CANONICAL} - {present[0]}).pop()}': kept sets are ids and offsets")
    if present:
        (ids_shape, ids_kind), (off_shape, _) = declared("kept_ids"), declared("kept_offsets")
        if len(ids_shape) != 1 or ids_kind.kind not in "iu":
            raise BadInput(p, f"'kept_ids' is {ids_kind} {list(ids_shape)}: expected a flat array of vocabulary ids")
        _bounded(p, int(ids_shape[0]), "'kept_ids'")
        if off_shape != (batch.n_tokens + 1,):
            raise BadInput(p, f"'kept_offsets' is {list(off_shape)}: expected one per token plus one ({batch.n_tokens + 1})")
        attach(batch, p, csr(p, values["kept_ids"], values["kept_offsets"], batch.n_tokens, "'kept_ids'"))
    if "kept_log_mass" in values:
        attach(batch, p, None, values["kept_log_mass"])


def arrays(batch: StepBatch) -> dict[str, np.ndarray]:
    """The canonical file's kept-set members of a batch."""
    out: dict[str, np.ndarray] = {}
    if batch.kept_ids is not None and batch.kept_offsets is not None:
        out["kept_ids"] = np.asarray(batch.kept_ids, np.int32)
        out["kept_offsets"] = np.asarray(batch.kept_offsets, np.int64)
    if batch.kept_log_mass is not None:
        out["kept_log_mass"] = np.asarray(batch.kept_log_mass, np.float64)
    return out

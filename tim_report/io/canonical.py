"""The canonical step-batch file: what `tim-report capture` writes and every reader can read back.

An `.npz` (no pickled objects) holding the StepBatch's flat arrays and a JSON header
`{"format": "tim-report/step-batch", "version": 1, "meta": {...}}` under the key `meta`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadInput
from ..model import StepBatch
from . import kept

NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
AT_FDS = os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd  # POSIX; elsewhere by path
CANONICAL_FORMAT = "tim-report/step-batch"
CANONICAL_VERSION = 1
# The optional [T, k] arrays of both sides' k most likely tokens (StepBatch fields of the same names).
ROUTE_FIELDS = ("rollout_routes", "trainer_routes")  # [T, layers, k] routed experts per token, either side
SIDE_PREFIX = "side_"  # a chain side of a name of its own: `side_NAME`; recompute and train are `recompute_logp`, `train_logp`
CANONICAL_SIDES = {"recompute": "recompute_logp", "train": "train_logp"}
# The optional per-sequence and per-token arrays, each with the dtype it is written in (None: its own).
OPTIONAL_FIELDS = {"group": str, "reward": None, "advantage": None, "shadow_logp": None, "floor_logp": None,
                   "weight_version": str, "env": str, "turn": np.int32, "token_version": np.int64,
                   "cached_tokens": np.int64}
TOPK_FIELDS = {"rollout_topk_ids": np.int32, "rollout_topk_logp": np.float32,
               "trainer_topk_ids": np.int32, "trainer_topk_logp": np.float32}


def save_batch(batch: StepBatch, path: str | Path, *, compact: bool = False) -> None:
    """Write the canonical `.npz` (no pickled objects; meta as JSON), atomically (write_npz).

    `compact` (save_step, every training step): the log-probs in the float dtype they come in (float32 from
    float32 or narrower tensors: exact, the reader widens them to float64), token ids as int32 when the
    vocabulary fits, and the fastest deflate level."""
    write_npz(batch_arrays(batch, compact), Path(path), 1 if compact else 6)


def batch_arrays(batch: StepBatch, compact: bool) -> dict[str, Any]:
    """The members of a batch's canonical file (save_batch)."""
    arrays: dict[str, Any] = {
        "rollout_logp": batch.rollout_logp if compact else batch.rollout_logp.astype(np.float64),
        "trainer_logp": batch.trainer_logp if compact else batch.trainer_logp.astype(np.float64),
        "offsets": batch.offsets.astype(np.int64, copy=False),
        "mask": batch.mask.astype(bool, copy=False),
    }
    if batch.token_ids is not None:
        ids = np.asarray(batch.token_ids)
        small = ids.size == 0 or (ids.min() >= 0 and ids.max() < 2**31)  # a vocabulary fits int32: half the bytes
        arrays["token_ids"] = ids.astype(np.int32 if compact and small else np.int64, copy=False)
    if batch.token_text is not None:
        arrays["token_text"] = np.asarray([str(t) for t in batch.token_text[: batch.n_tokens]], dtype=str)
    if batch.prompt_ids is not None:
        arrays["prompt_ids"] = (np.concatenate([np.asarray(p, dtype=np.int64) for p in batch.prompt_ids])
                                if batch.prompt_ids else np.zeros(0, np.int64))
        arrays["prompt_offsets"] = np.concatenate([[0], np.cumsum([len(p) for p in batch.prompt_ids])]).astype(np.int64)
    if batch.prompt_text is not None:
        arrays["prompt_text"] = np.asarray(batch.prompt_text, dtype=str)
    for name, kind in OPTIONAL_FIELDS.items():
        if (value := getattr(batch, name)) is not None:
            arrays[name] = np.asarray(value, dtype=kind)
    for name, dtype in TOPK_FIELDS.items():
        value = getattr(batch, name)
        if value is not None:
            arrays[name] = np.asarray(value, dtype=dtype)
    for name in ROUTE_FIELDS:
        value = getattr(batch, name)
        if value is not None:  # expert ids at their own width when int32 cannot hold them (never wrapped)
            value = np.asarray(value)
            fits = value.size == 0 or (value.dtype.kind in "iu" and value.min() >= -2**31 and value.max() < 2**31)
            arrays[name] = value.astype(np.int32) if fits else value
    arrays.update(_side_arrays(batch, compact))
    arrays.update(kept.arrays(batch))
    header = {"format": CANONICAL_FORMAT, "version": CANONICAL_VERSION, "meta": batch.meta}
    arrays["meta"] = np.asarray(json.dumps(header, sort_keys=True, default=str))
    return arrays


def _side_arrays(batch: StepBatch, compact: bool) -> dict[str, np.ndarray]:
    """The chain's further sides under their keys: `recompute_logp`, `train_logp`, `side_NAME`."""
    out = {}
    for name, value in batch.sides.items():
        logp = np.asarray(value)
        out[CANONICAL_SIDES.get(name, SIDE_PREFIX + name)] = logp if compact else logp.astype(np.float64)
    return out


def named_sides(p: Path, values: Any, n_tokens: int) -> dict[str, np.ndarray]:
    """The chain's sides a canonical file holds under names of their own (`side_NAME`, one log-prob per token)."""
    out = {}
    for key in values:
        if not key.startswith(SIDE_PREFIX):
            continue
        arr = np.asarray(values[key])
        if arr.shape != (n_tokens,) or arr.dtype.kind != "f":
            raise BadInput(p, f"'{key}' is {arr.dtype} {list(arr.shape)}: a side is one float log-prob per token ({n_tokens})")
        out[key.removeprefix(SIDE_PREFIX)] = arr.astype(np.float64, copy=False)
    return out


def write_npz(arrays: dict[str, np.ndarray], path: Path, compresslevel: int) -> None:
    """An `.npz` at `path` (its folder as named): write_npz_at in that folder."""
    if not AT_FDS:
        write_npz_at(arrays, path.parent, None, path.name, compresslevel)
        return
    fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        write_npz_at(arrays, path.parent, fd, path.name, compresslevel)
    finally:
        os.close(fd)


def write_npz_at(arrays: dict[str, np.ndarray], folder: Path, folder_fd: int | None, name: str, compresslevel: int) -> None:
    """An `.npz` as numpy writes one (a zip of `.npy` members), made durable before it appears: a hidden temporary
    file beside it, created exclusive and no-follow under a name no other process picks (pid and 64 random bits: a
    link planted at a guessable name is never written through), fsync'ed, renamed over `name` (atomic on POSIX;
    whatever was there, a link included, is replaced as a name), then the folder fsync'ed. A reader that lists the
    folder sees the whole file or nothing. `folder_fd` (a descriptor on `folder`, None where the system has no
    *at() calls) names the folder race-free. Level 1 deflate (save_step) is 2-3x faster than numpy's 6."""
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(8)}.tmp"
    where = (lambda n: n) if folder_fd is not None else (lambda n: str(folder / n))
    fd = os.open(where(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW, 0o666, dir_fd=folder_fd)
    try:
        with os.fdopen(fd, "wb") as fh:
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=compresslevel, allowZip64=True) as zf:
                for key, value in arrays.items():
                    with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(where(tmp), where(name), src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(where(tmp), dir_fd=folder_fd)
        raise
    if folder_fd is not None:
        with contextlib.suppress(OSError):
            os.fsync(folder_fd)
    else:
        _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a platform without directory fds skips it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

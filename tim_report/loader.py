"""Read step batches from disk into a StepBatch: the only module that knows file formats and key names.

Supported: `.pt` (torch.load(weights_only=True); `allow_pickle` opts into full unpickling),
`.npz` (allow_pickle=False unless asked), `.jsonl` (one sample per line, per-token lists),
and the canonical `.npz` that `tim-report capture` writes.

Three layouts are recognised, decided by the rollout log-prob value:
  padded  [B, L] arrays plus a mask (verl, TRL, OpenRLHF),
  ragged  a list of per-sequence lists (slime, prime-rl, JSONL),
  flat    [T] arrays plus `offsets` / `cu_seqlens` (the canonical format).
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .batch import CANONICAL_FORMAT, StepBatch
from .errors import BadInput

# Roles and the key names that fill them, in priority order: the first key present wins.
# Canonical names come first, then the frameworks' (design §3). `--key role=name` overrides.
ROLE_ALIASES: dict[str, tuple[str, ...]] = {
    "rollout": ("rollout_logp", "rollout_log_probs", "sampling_per_token_logps", "inference_logprobs",
                "generation_logprobs", "rollout_per_token_logps", "rollout_logprobs", "logprobs"),
    "trainer": ("trainer_logp", "old_log_probs", "old_per_token_logps", "action_log_probs", "trainer_logprobs",
                "prev_logprobs", "log_probs", "prox_logp"),
    "mask": ("mask", "response_mask", "completion_mask", "action_mask", "loss_mask", "loss_masks", "token_mask"),
    "tokens": ("token_ids", "responses", "completion_ids", "response_ids", "sequences"),
    "text": ("token_text", "response_tokens", "token_strings"),
    "group": ("group", "uid", "group_id", "group_ids", "prompt_uid"),
    "reward": ("reward", "rewards", "token_level_rewards", "token_level_scores", "scores", "score"),
    "advantage": ("advantage", "advantages"),
    "shadow": ("shadow_logp", "shadow_log_probs", "shadow_logprobs"),
    "prompt": ("prompt_ids", "prompts", "prompt_token_ids", "prompt_input_ids"),
    "prompt_text": ("prompt_text", "raw_prompt", "prompt"),
    "attention": ("attention_mask",),
    "offsets": ("offsets", "cu_seqlens"),
}
ROLES = tuple(ROLE_ALIASES)
USER_ROLES = ("rollout", "trainer", "mask", "tokens", "text", "group", "reward", "advantage", "shadow", "prompt")

POSITIVE_LOGP_TOLERANCE = 1e-6  # log-probs above this are impossible, not rounding (used in analyze)
_STEP_RE = re.compile(r"(?:global[_-]?)?step[_-]?(\d+)", re.IGNORECASE)


@dataclass
class RawFile:
    """A file's contents as plain values (numpy arrays, lists, strings, dicts), keyed by name."""

    path: Path
    values: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    canonical: bool = False


@dataclass
class RoleChoice:
    key: str | None
    reason: str


# ---------------------------------------------------------------- reading files


def read_file(path: str | Path, *, allow_pickle: bool = False) -> RawFile:
    path = Path(path)
    if not path.exists():
        raise BadInput(path, "no such file")
    if path.is_dir():
        raise BadInput(path, "is a directory, expected a .pt, .npz or .jsonl file")
    if path.stat().st_size == 0:
        raise BadInput(path, "file is empty")
    suffix = path.suffix.lower()
    readers = {".pt": _read_pt, ".pth": _read_pt, ".npz": _read_npz, ".jsonl": _read_jsonl}
    if suffix not in readers:
        raise BadInput(path, f"unknown file type '{suffix or '(none)'}': expected .pt, .npz or .jsonl")
    values = readers[suffix](path, allow_pickle)
    if not isinstance(values, dict):
        raise BadInput(path, f"holds a {type(values).__name__}, expected a dict of arrays")
    values = _flatten(values)
    meta = _extract_meta(path, values)
    canonical = meta.pop("__canonical__", False)
    return RawFile(path, values, meta, canonical)


def _read_pt(path: Path, allow_pickle: bool) -> Any:
    import pickle

    import torch  # heavy: only for .pt files

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if not allow_pickle:
            raise BadInput(path, "needs full unpickling (pickled objects such as verl DataProto), which can run "
                                 "arbitrary code; re-run with --allow-pickle if you trust this file") from exc
        warnings.warn(f"{path}: unpickling with weights_only=False because --allow-pickle was given", stacklevel=2)
        try:
            obj = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc2:  # noqa: BLE001 - any failure is a bad file
            raise BadInput(path, f"cannot unpickle: {_first_line(exc2)}") from exc2
    except Exception as exc:  # noqa: BLE001 - truncated zip, not a torch file, ...
        raise BadInput(path, f"not a readable PyTorch file: truncated, corrupt or not saved by torch.save ({_first_line(exc)})") from exc
    return _to_plain(_unwrap_dataproto(obj))


def _read_npz(path: Path, allow_pickle: bool) -> Any:
    try:
        with np.load(path, allow_pickle=allow_pickle) as npz:
            return {k: npz[k] for k in npz.files}
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise BadInput(path, "holds object arrays (pickled Python objects); store numeric or string arrays, "
                                 "or re-run with --allow-pickle if you trust this file") from exc
        raise BadInput(path, f"not a readable .npz file ({_first_line(exc)})") from exc
    except Exception as exc:  # noqa: BLE001
        raise BadInput(path, f"not a readable .npz file ({_first_line(exc)})") from exc


def _read_jsonl(path: Path, allow_pickle: bool) -> Any:
    """One JSON object per line (prime-rl style): per-token lists become ragged columns."""
    rows: list[dict] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise BadInput(path, f"line {n} is not a JSON object")
                    rows.append(row)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(path, f"not valid JSON lines ({_first_line(exc)})") from exc
    if not rows:
        raise BadInput(path, "no JSON records")
    keys = sorted({k for r in rows for k in r})
    return {k: [r.get(k) for r in rows] for k in keys}


def _unwrap_dataproto(obj: Any) -> Any:
    """verl's DataProto: tensors in `.batch`, numpy objects in `.non_tensor_batch`, dict `.meta_info`."""
    if hasattr(obj, "batch") and hasattr(obj, "non_tensor_batch"):
        out: dict[str, Any] = {}
        batch = obj.batch
        if batch is not None:
            for k in list(batch.keys()):
                out[k] = batch[k]
        out.update(dict(obj.non_tensor_batch or {}))
        out["meta_info"] = dict(getattr(obj, "meta_info", {}) or {})
        return out
    return obj


def _to_plain(obj: Any) -> Any:
    """Tensors to numpy (bf16/fp16 widened to fp32), containers recursively."""
    if type(obj).__module__.startswith("torch"):
        import torch

        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu()
            if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64):
                t = t.float()
            return t.numpy()
    if isinstance(obj, dict):
        return {str(k): _to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_plain(v) for v in obj]
    return obj


def _flatten(values: dict[str, Any]) -> dict[str, Any]:
    """Promote one level of nesting ({'batch': {...}}) so aliases match inner names too."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if isinstance(v, dict) and k not in ("meta", "meta_info"):
            for ik, iv in v.items():
                out.setdefault(ik, iv)
                out[f"{k}.{ik}"] = iv
        else:
            out[k] = v
    return out


def _extract_meta(path: Path, values: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key in ("meta_info", "meta"):
        raw = values.pop(key, None)
        if raw is None:
            continue
        if isinstance(raw, np.ndarray) and raw.ndim == 0:
            raw = raw.item()
        if isinstance(raw, (bytes, str)):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise BadInput(path, f"'{key}' is not valid JSON") from exc
        if isinstance(raw, dict):
            if raw.get("format") == CANONICAL_FORMAT:
                meta["__canonical__"] = True
                raw = raw.get("meta", {})
            meta.update({str(k): v for k, v in raw.items() if _jsonable(v)})
    if "step" not in meta:
        m = _STEP_RE.search(path.stem)
        if m:
            meta["step"] = int(m.group(1))
    return meta


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


# ---------------------------------------------------------------- choosing keys


def choose_roles(raw: RawFile, overrides: dict[str, str] | None = None) -> dict[str, RoleChoice]:
    overrides = overrides or {}
    for role, key in overrides.items():
        if role not in USER_ROLES:
            raise BadInput(raw.path, f"unknown role '{role}' in --key (roles: {', '.join(USER_ROLES)})")
        if key not in raw.values:
            raise BadInput(raw.path, f"--key {role}={key}: no key '{key}' (keys: {_key_list(raw)})")
    taken = set(overrides.values())
    choices: dict[str, RoleChoice] = {}
    for role, aliases in ROLE_ALIASES.items():
        if role in overrides:
            choices[role] = RoleChoice(overrides[role], "--key override")
            continue
        present = [a for a in aliases if a in raw.values and a not in taken]
        if present:
            key = present[0]
            taken.add(key)
            others = f"; also present: {', '.join(present[1:])}" if len(present) > 1 else ""
            choices[role] = RoleChoice(key, f"first of {len(aliases)} known names{others}")
        else:
            choices[role] = RoleChoice(None, "none of: " + ", ".join(aliases))
    return choices


def _key_list(raw: RawFile) -> str:
    return ", ".join(sorted(raw.values)) or "(none)"


# ---------------------------------------------------------------- building the batch


def load(path: str | Path, *, keys: dict[str, str] | None = None, allow_pickle: bool = False,
         tokenizer: str | None = None) -> StepBatch:
    """Read a step batch file into a StepBatch (raises BadInput with a one-line reason)."""
    raw = read_file(path, allow_pickle=allow_pickle)
    batch = build_batch(raw, choose_roles(raw, keys))
    if tokenizer:
        batch.decoder = load_decoder(tokenizer)
    return batch


def build_batch(raw: RawFile, roles: dict[str, RoleChoice]) -> StepBatch:
    p = raw.path
    missing = [r for r in ("rollout", "trainer") if roles[r].key is None]
    if missing:
        names = " and ".join(f"{r} log-probs" for r in missing)
        raise BadInput(p, f"no {names} found (keys: {_key_list(raw)}); name them with --key rollout=NAME --key trainer=NAME")

    def get(role: str) -> Any:
        key = roles[role].key
        return None if key is None else raw.values[key]

    rollout_raw = get("rollout")
    layout = _layout_of(p, rollout_raw, roles["rollout"].key, get("offsets"))
    notes: list[str] = []
    rollout = _numeric(p, roles["rollout"].key, rollout_raw, layout)
    trainer = _numeric(p, roles["trainer"].key, get("trainer"), layout)
    _same_shape(p, rollout, trainer, roles["rollout"].key, roles["trainer"].key)

    if layout == "padded":
        cols = rollout.shape[1]
        mask2d = _aligned(p, "mask", roles, get("mask"), rollout.shape, notes)
        if mask2d is not None and rollout.size and not (mask2d > 0).any():
            raise BadInput(p, f"mask '{roles['mask'].key}' selects no tokens")
        attn = get("attention")
        if attn is not None:
            attn = _numeric(p, roles["attention"].key, attn, "padded")
            if attn.shape[0] != rollout.shape[0] or attn.shape[1] < cols:
                raise BadInput(p, f"'attention_mask' has shape {attn.shape}, expected [{rollout.shape[0]}, >= {cols}]")
            keep2d = attn[:, -cols:] > 0
            if mask2d is not None:
                keep2d &= ~((mask2d == 0) & (rollout == 0) & (trainer == 0))
        elif mask2d is not None:
            keep2d = mask2d > 0
        else:
            keep2d = ~((rollout == 0) & (trainer == 0))
            notes.append("no mask key: positions where both log-probs are exactly 0.0 were taken as padding")
        flat = _Flattener.padded(keep2d)
        mask = (mask2d[keep2d] > 0) if mask2d is not None else np.ones(int(keep2d.sum()), bool)
    elif layout == "ragged":
        lengths = np.array([len(r) for r in rollout], dtype=np.int64)
        flat = _Flattener.ragged(lengths)
        rollout, trainer = flat.cat(rollout), flat.cat(trainer)
        m = get("mask")
        mask = flat.cat(_numeric(p, roles["mask"].key, m, "ragged", lengths)) > 0 if m is not None else np.ones(flat.n_tokens, bool)
    else:  # flat
        offsets = _offsets(p, roles["offsets"].key, get("offsets"), rollout.shape[0])
        flat = _Flattener(offsets, None)
        m = get("mask")
        mask = _numeric(p, roles["mask"].key, m, "flat") > 0 if m is not None else np.ones(flat.n_tokens, bool)
        _same_shape(p, rollout, mask, roles["rollout"].key, roles["mask"].key)

    if layout == "padded":
        rollout, trainer = flat.take(rollout), flat.take(trainer)
    if flat.n_tokens == 0:
        raise BadInput(p, "no tokens: every position is padding")
    if not mask.any():
        raise BadInput(p, f"mask '{roles['mask'].key}' selects no tokens")

    batch = StepBatch(
        rollout_logp=rollout.astype(np.float64, copy=False),
        trainer_logp=trainer.astype(np.float64, copy=False),
        offsets=flat.offsets, mask=mask, meta=dict(raw.meta), notes=notes,
    )
    batch.token_ids = _token_role(p, "tokens", roles, get("tokens"), layout, flat, rollout_raw, notes, np.int64)
    batch.shadow_logp = _token_role(p, "shadow", roles, get("shadow"), layout, flat, rollout_raw, notes, np.float64)
    batch.token_text = _text_role(p, roles, get("text"), layout, flat)
    batch.group = _group_role(p, roles, get("group"), batch)
    batch.reward = _seq_or_token_sum(p, "reward", roles, get("reward"), layout, flat, batch)
    batch.advantage = _advantage_role(p, roles, get("advantage"), layout, flat, batch)
    _prompt_roles(p, roles, get("prompt"), get("prompt_text"), get("attention"), raw, batch)

    batch.meta.setdefault("source", str(p))
    batch.meta["layout"] = layout
    batch.meta["keys"] = {r: c.key for r, c in roles.items() if c.key is not None}
    batch.meta.setdefault("alignment", "same position: trainer_logp[t] and rollout_logp[t] score token t "
                                       "(no shift applied; OpenRLHF [1:] / AReaL roll(-1) layouts must be aligned before saving)")
    return batch


def _layout_of(p: Path, value: Any, key: str | None, offsets: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, (list, np.ndarray)) for v in value):
        if all(np.ndim(v) == 1 for v in value):
            return "ragged"
    arr = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if arr.ndim == 2:
        return "padded"
    if arr.ndim == 1:
        if offsets is None:
            raise BadInput(p, f"'{key}' is 1-D {arr.shape} but there is no 'offsets'/'cu_seqlens' to split it into "
                              "sequences: expected a 2-D [batch, length] array")
        return "flat"
    raise BadInput(p, f"'{key}' has {arr.ndim} dimensions {arr.shape}: expected [batch, length], per-sequence lists, or flat with offsets")


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


class _Flattener:
    """Maps a layout onto flat token arrays and CSR offsets."""

    def __init__(self, offsets: np.ndarray, keep2d: np.ndarray | None):
        self.offsets = offsets.astype(np.int64, copy=False)
        self.keep2d = keep2d

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    @classmethod
    def padded(cls, keep2d: np.ndarray) -> "_Flattener":
        return cls(np.concatenate([[0], np.cumsum(keep2d.sum(axis=1))]), keep2d)

    @classmethod
    def ragged(cls, lengths: np.ndarray) -> "_Flattener":
        return cls(np.concatenate([[0], np.cumsum(lengths)]), None)

    def take(self, arr2d: np.ndarray) -> np.ndarray:
        return arr2d[self.keep2d]

    def cat(self, seqs: list) -> np.ndarray:
        return np.concatenate([np.asarray(s) for s in seqs]) if seqs else np.zeros(0)


def _offsets(p: Path, key: str | None, value: Any, n: int) -> np.ndarray:
    off = _numeric(p, key, value, "flat").astype(np.int64)
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
        if arr.shape != (batch.n_seqs,):
            raise BadInput(p, f"'{roles['group'].key}' has shape {list(arr.shape)}, expected one entry per sequence ({batch.n_seqs})")
        return arr.astype(str)
    n = next((batch.meta[k] for k in ("n", "n_samples", "rollout_n", "num_generations") if isinstance(batch.meta.get(k), int)), None)
    if n and n > 0 and batch.n_seqs % n == 0:
        batch.notes.append(f"no group key: groups are {n} contiguous sequences each (meta n={n})")
        return np.repeat(np.arange(batch.n_seqs // n), n).astype(str)
    return None


def _per_seq(p, key, value, layout, flat, batch: StepBatch) -> np.ndarray:
    """A sequence-level or token-level value reduced to [N] (token-level: summed) or broadcast later."""
    if layout == "ragged" and isinstance(value, list) and value and isinstance(value[0], (list, np.ndarray)):
        return np.array([float(np.sum(v)) for v in value])
    arr = _numeric(p, key, value, "flat")
    if arr.ndim == 2 and layout == "padded" and arr.shape == flat.keep2d.shape:
        return np.where(flat.keep2d, arr, 0).sum(axis=1).astype(np.float64)
    if arr.shape == (batch.n_seqs,):
        return arr.astype(np.float64)
    raise BadInput(p, f"'{key}' has shape {list(arr.shape)}: expected one value per sequence ({batch.n_seqs}) or per token")


def _seq_or_token_sum(p, role, roles, value, layout, flat, batch) -> np.ndarray | None:
    return None if value is None else _per_seq(p, roles[role].key, value, layout, flat, batch)


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
        if arr.shape == (batch.n_seqs,) and arr.dtype.kind in "US":
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


def load_decoder(tokenizer_path: str) -> Callable:
    """A local tokenizer's decode (offline; transformers imported only here)."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - transformers is a dependency
        raise BadInput(tokenizer_path, "--tokenizer needs the 'transformers' package") from exc
    try:
        tok = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise BadInput(tokenizer_path, f"cannot load a tokenizer from this path ({_first_line(exc)})") from exc
    return lambda ids: tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def describe(path: str | Path, *, keys: dict[str, str] | None = None, allow_pickle: bool = False) -> dict[str, Any]:
    """What `tim-report inspect` prints: every key's shape/dtype and the role mapping, with reasons."""
    raw = read_file(path, allow_pickle=allow_pickle)
    roles = choose_roles(raw, keys)
    entries = []
    for k, v in sorted(raw.values.items()):
        if isinstance(v, np.ndarray):
            shape, dtype = list(v.shape), str(v.dtype)
        elif isinstance(v, list):
            shape, dtype = [len(v)], "list" + (f" of {type(v[0]).__name__}" if v else "")
        else:
            shape, dtype = [], type(v).__name__
        role = next((r for r, c in roles.items() if c.key == k), None)
        entries.append({"key": k, "shape": shape, "dtype": dtype, "role": role})
    batch = build_batch(raw, roles)
    return {
        "file": str(raw.path),
        "keys": entries,
        "roles": {r: {"key": c.key, "reason": c.reason} for r, c in roles.items()},
        "layout": batch.meta["layout"],
        "sequences": batch.n_seqs,
        "tokens": batch.n_tokens,
        "masked_tokens": int(batch.mask.sum()),
        "alignment": batch.meta["alignment"],
        "notes": batch.notes,
        "meta": {k: v for k, v in raw.meta.items()},
    }

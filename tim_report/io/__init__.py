"""Input files: the readers of every input format and framework dump, and the canonical format.

    sources(path)         a file or folder → the batches in it (`Source`s), one per training step
    load(src, options)    a Source or a path holding one batch → StepBatch (BadInput with a one-line reason otherwise)
    describe(src, options) what `tim-report inspect` prints: framework, layout, keys, the role mapping, exclusions and why
    save_batch(b, p)      the canonical `.npz`
    save_step(p, ...)     a training loop's tensors → the canonical `.npz` of one rank of a step (save_step.py)
    LoadOptions           how to read (keys, meta, pickling, tokenizer, format hint, size limit): one object for all

A framework's dump is read by its own module in `dumps/` (the registry: catalogue/frameworks.py); a file is
read by its format's module in `readers/` (the registry: `readers.FILE_FORMATS`); plain dicts of arrays go
through `files.py` → `roles.py` → `assemble.py`. Nothing outside this package knows a file format or a
framework's key names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..catalogue.numbers import fmt
from ..config import MAX_STEP, MAX_TOKENS, MODEL_CLASSES
from ..config.bounds import LR_MAX, LR_MIN
from ..errors import BadInput, parser_limits
from ..model import META_KEYS, StepBatch, digest_records, learning_rate
from .assemble import build_batch
from .canonical import save_batch
from .discover import RANK_NPZ, SAVED_STEP, Source, Unreadable, scan, settle_step, sources
from .dumps import Dump, dump
from .files import RawFile, raw_file, read_file
from .limits import limited
from .options import LoadOptions
from .roles import ROLE_ALIASES, USER_ROLES, choose_roles
from .text import clean_strings
from .tokenizer import load_decoder

__all__ = ["ROLE_ALIASES", "USER_ROLES", "LoadOptions", "RawFile", "Source", "describe", "load",
           "Unreadable", "meta_overrides", "read_file", "save_batch", "scan", "sources"]


def load(src: str | Path | Source, options: LoadOptions | None = None) -> StepBatch:
    """Read one batch (a Source, or a path that holds exactly one) into a StepBatch.

    `options.meta` (from `--meta KEY=VALUE`) names what the file does not: it overrides the file's own meta.
    `options.max_tokens` (`--max-tokens`) bounds what is read (io/limits.py)."""
    opts = options or LoadOptions()
    src = _one(src, opts.format_hint)
    with limited(opts.max_tokens), parser_limits(src.origin):
        batch, _, _ = _read(src, opts.keys, opts.allow_pickle)
        _finish(batch, src, opts.max_tokens)
    if opts.tokenizer:
        batch.decoder = load_decoder(opts.tokenizer, batch.token_ids, src.origin)
    batch.meta.update(meta_overrides(opts.meta))
    return batch


def _finish(batch: StepBatch, src: Source, max_tokens: int | None) -> None:
    """What every reader's batch gets: its step settled, its file named, its size checked, its strings valid UTF-8."""
    step = settle_step(src, batch.meta.pop("step", None), batch.notes)
    if isinstance(step, (int, float)) and not abs(step) < MAX_STEP:  # a step no run reaches, or inf/NaN
        raise BadInput(src.origin, f"records a step beyond ±{fmt(MAX_STEP)} (or not finite): not a training step")
    if step is not None:
        batch.meta["step"] = step
    limit = max_tokens or MAX_TOKENS
    if batch.n_tokens > limit:
        raise BadInput(src.origin, f"holds {fmt(batch.n_tokens)} tokens, more than --max-tokens {fmt(limit)}")
    batch.meta["file"] = src.shown or str(src.origin)
    if src.shown and batch.meta.get("source") == str(src.origin):
        batch.meta["source"] = src.shown
    repaired = 0
    for name in ("token_text", "prompt_text", "group", "weight_version", "env", "meta"):
        value = getattr(batch, name)
        if value is not None:
            fixed, n = clean_strings(value)
            setattr(batch, name, fixed)
            repaired += n
    if repaired:
        batch.problems["text_invalid"] = batch.problems.get("text_invalid", 0) + repaired


def meta_overrides(pairs: dict[str, str]) -> dict:
    """`--meta` values checked against META_KEYS (a typo is bad input, not a silent no-op); step as an integer."""
    out: dict = {}
    for key, value in pairs.items():
        if key not in META_KEYS:
            raise BadInput("--meta", f"unknown key '{key}' (keys: {', '.join(META_KEYS)})")
        if key in ("step", "trainer_version"):
            try:
                out[key] = int(value)
            except ValueError:
                raise BadInput("--meta", f"{key}={value[:40]}: not an integer") from None
            if abs(out[key]) >= MAX_STEP:
                raise BadInput("--meta", f"{key}={value[:40]}: beyond ±{fmt(MAX_STEP)}, not a training step")
        elif key in ("ppo_clip_fraction", "lr"):
            out[key] = _meta_number(key, value)
        elif key in ("engine_digest", "trainer_digest"):
            out[key] = _digests(key, value)
        elif key == "model_class":
            if value.lower() not in MODEL_CLASSES:
                raise BadInput("--meta", f"model_class={value}: use one of {', '.join(MODEL_CLASSES)}")
            out[key] = value.lower()
        else:
            out[key] = value
    return out


def _meta_number(key: str, value: str) -> float:
    """`--meta ppo_clip_fraction=` (a fraction) or `--meta lr=` (model.learning_rate's range): the number, or BadInput."""
    try:
        x = float(value)
    except ValueError:
        x = float("nan")
    if key == "lr":
        if learning_rate(x) is None:
            raise BadInput("--meta", f"lr={value[:40]}: not a learning rate (a number from {LR_MIN:g} to {LR_MAX:g})")
    elif not 0 <= x <= 1:
        raise BadInput("--meta", f"ppo_clip_fraction={value[:40]}: not a fraction between 0 and 1")
    return x


def _digests(key: str, value: str) -> list[dict]:
    """`--meta engine_digest=5:bf16:<sha256>[:share[:since]],...` → its records (docs/sync.md)."""
    records, problem = digest_records(value)
    if problem:
        raise BadInput("--meta", f"{key} {problem}")
    return records


def describe(src: str | Path | Source, options: LoadOptions | None = None) -> dict[str, Any]:
    """What `tim-report inspect` prints; for a folder of several steps, the list of steps found."""
    opts = options or LoadOptions()
    if not isinstance(src, Source):
        found = sources(src, opts.format_hint)
        if len(found) > 1:
            return {"file": str(src), "sources": [_source_info(s) for s in found]}
        src = found[0]
    with limited(opts.max_tokens), parser_limits(src.origin):
        batch, fields, roles = _read(src, opts.keys, opts.allow_pickle)
        _finish(batch, src, opts.max_tokens)
    if opts.tokenizer:  # not used to describe, but named: said now if it cannot be used
        load_decoder(opts.tokenizer, batch.token_ids, src.origin)
    fields, _ = clean_strings(fields)
    return {
        **_source_info(src),
        "step": batch.meta.get("step"),  # the step `build` uses (settle_step), not only the path's
        "file": str(src.origin),
        "framework": batch.meta.get("framework"),
        "keys": fields,
        "layout": batch.meta["layout"],
        "sequences": batch.n_seqs,
        "tokens": batch.n_tokens,
        "masked_tokens": int(batch.mask.sum()),
        "alignment": batch.meta["alignment"],
        "exclusions": batch.meta.get("exclusions", []),
        "notes": batch.notes,
        "roles": roles,
        "meta": {k: v for k, v in batch.meta.items() if k not in ("keys", "exclusions", "alignment", "layout")},
    }


def _one(src: str | Path | Source, format_hint: str | None) -> Source:
    if isinstance(src, Source):
        return src
    found = sources(src, format_hint)
    if len(found) > 1:
        raise BadInput(src, f"holds {len(found)} batches ({found[0].run_id} … {found[-1].run_id}): read them one "
                            "by one (tim_report.io.sources), or build the folder")
    return found[0]


def _read(src: Source, keys: dict[str, str] | None, allow_pickle: bool) -> tuple[StepBatch, list[dict], dict]:
    """Dispatch on the framework. For `inspect`: the fields the file holds, and which filled which role and why."""
    if src.kind.startswith(SAVED_STEP):  # save_step's rank files of one step
        from .ranks import merge_ranks

        parts = [_read_dict(Source((p,), "dict", src.step, src.run_id, p), keys, allow_pickle) for p in src.paths]
        named = [int(m.group(1)) if (m := RANK_NPZ.fullmatch(p.name)) else -1 for p in src.paths]
        return merge_ranks(src.origin, [b for b, _, _ in parts], named), parts[0][1], parts[0][2]
    d = dump(src.framework)
    if d is None or d.read is None:  # a plain dict of arrays (or a dump read as one)
        return _read_dict(src, keys, allow_pickle, d)
    if keys:
        raise BadInput(src.origin, f"--key applies to plain dicts of arrays; this {src.framework} dump is read by its own "
                                   "reader (--format-hint dict reads it as a plain dict)")
    batch, fields = d.read(src, allow_pickle)
    batch.meta.setdefault("source", str(src.origin))
    why = f"fixed by the {src.framework} format"
    filled = {r: k for r, k in batch.meta.get("keys", {}).items() if getattr(batch, _ROLE_FIELDS.get(r, "mask")) is not None}
    batch.meta["keys"] = filled
    return batch, fields, {r: {"key": k, "reason": why} for r, k in filled.items()}


# The StepBatch field each optional role fills: a framework reader's role is listed only when its field is.
_ROLE_FIELDS = {"tokens": "token_ids", "text": "token_text", "group": "group", "reward": "reward", "advantage": "advantage",
                "shadow": "shadow_logp", "prompt": "prompt_ids", "turn": "turn"}


def _read_dict(src: Source, keys: dict[str, str] | None, allow_pickle: bool,
               d: Dump | None = None) -> tuple[StepBatch, list[dict], dict]:
    """A plain dict of arrays (or a dump read as one, such as verl's DataProto unwrapped): key names matched to roles."""
    path = src.paths[0]
    if d is not None and d.values is not None:
        raw = raw_file(path, d.values(path, allow_pickle))
    else:
        raw = read_file(path, allow_pickle=allow_pickle)
    roles = choose_roles(raw, keys)
    if hasattr(raw.values, "prefetch"):  # an .npz read lazily: its used members decompress in parallel
        raw.values.prefetch([c.key for c in roles.values() if c.key is not None])
    batch = build_batch(raw, roles)
    if d is not None and d.annotate is not None:
        d.annotate(batch, raw.values)
    fields = [_field(k, raw.values, roles) for k in sorted(raw.values)]
    return batch, fields, {r: {"key": c.key, "reason": c.reason} for r, c in roles.items()}


def _field(key: str, values, roles) -> dict:
    """A key's shape, dtype and role for `inspect`; an archive read lazily answers from its header, unread."""
    shape, dtype = values.describe(key) if hasattr(values, "describe") else _shape_dtype(values[key])
    role = next((r for r, c in roles.items() if c.key == key), None)
    return {"key": key, "shape": shape, "dtype": dtype, "role": role}


def _shape_dtype(value: Any) -> tuple[list[int], str]:
    if isinstance(value, np.ndarray):
        return list(value.shape), str(value.dtype)
    if isinstance(value, list):
        return [len(value)], "list" + (f" of {type(value[0]).__name__}" if value else "")
    return [], type(value).__name__


def _source_info(src: Source) -> dict:
    return {"run_id": src.run_id, "step": src.step, "framework": src.framework, "found_as": src.kind,
            "paths": [str(p) for p in src.paths]}

"""miles (v0.1.0) train dump `train_data/{rollout_id}_{rank}.pt`, written by every rank.

`{"rollout_id", "rank", "cp_rank", "cp_size", "qkv_format", "rollout_data": {column: one entry per local
sample}}`, with slime's column names (`tokens`, `response_lengths`, `total_lengths`, `loss_masks`,
`log_probs`, `rollout_log_probs`, `advantages`, `rewards`, `weight_versions`, `sample_indices`).
Written with miles' default Ray object store it holds torch tensors and lists and loads with weights_only=True;
numpy arrays (the Mooncake codecs) need full unpickling, only with --allow-pickle. Tensor-parallel replicas write
the same samples twice: the first copy is kept. With context parallelism (cp_size > 1, thd format)
a per-token field is either whole or the rank's zigzag slice: chunk c = ceil(total / 2cp), rank r
holds sequence positions [r·c, (r+1)·c) and [(2cp−r−1)·c, (2cp−r)·c); a response field holds the
response tokens whose logit position (token position − 1) falls there. The slices of every cp rank
are put back in place. Older slime columnar dumps (no cp fields) read the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BadInput
from ..discover import Source, step_id, step_of
from ..readers.pt import to_plain, torch_load
from ..sequences import Exclusions, assemble_seqs
from . import Dump, pattern
from .slime import ALIGNMENT, sample_seq

REFUSAL = ("this miles train dump holds objects only full unpickling can load (numpy arrays: the Mooncake transfer "
           "codecs; the default Ray object store writes tensors that load without), and unpickling can run arbitrary "
           "code from the file: re-run with --allow-pickle if you trust it")
RESPONSE_FIELDS = ("rollout_log_probs", "log_probs", "loss_masks", "advantages", "ref_log_probs")
CP_KEPT = ("the kept sets (rollout_sampling_mask_*) of a context-parallel dump are left out: how miles slices them across "
           "cp ranks is not recorded")
REPLAYED = ("rollout_sampling_mask_ids / _offsets present (--rollout-top-p < 1): miles renormalises its actor's log_probs "
            "over these kept sets (sampling-support replay), so δ is read as the ratio over the kept set")
DUPLICATE_WHY = "a tensor-parallel replica wrote the same sample again: one copy is kept"


def read(src, allow_pickle: bool = False):
    """Every rank file of one rollout id → StepBatch, plus the fields for `inspect`."""
    dumps = [(p, _load(p, allow_pickle)) for p in src.paths]
    ex, notes = Exclusions(), list[str]()
    cp_size, qkv = _cp_layout(src.origin, dumps)
    by_sample = _collect(src.origin, dumps, ex, notes)
    joined = _rollout_join(src, allow_pickle, notes)
    seqs = []
    for i, sid in enumerate(sorted(by_sample)):
        sample = _reassemble(src.origin, sid, by_sample[sid], cp_size)
        if cp_size > 1 and sample.pop("rollout_sampling_mask_ids", None) is not None and CP_KEPT not in notes:
            notes.append(CP_KEPT)
        versions = sample.get("weight_versions")
        extra = {**joined.get(sid, {}), **({"weight_versions": versions} if versions is not None else {})}
        seqs.append(sample_seq(src.origin, i, sample, extra, ex))
    framework = "miles" if any("cp_size" in d for _, d in dumps) else "slime"
    meta = {"framework": framework, "layout": f"response only, per-rank columns (cp_size {cp_size}, {qkv})",
            "alignment": ALIGNMENT + ("; context-parallel zigzag slices put back in place" if cp_size > 1 else ""),
            "ranks": len(dumps),
            "keys": {"rollout": "rollout_log_probs", "trainer": "log_probs", "mask": "loss_masks", "tokens": "tokens",
                     "advantage": "advantages", "reward": "rewards", "weight_version": "weight_versions"}}
    if any(_has(d, "rollout_routed_experts") for _, d in dumps):
        meta["routed_experts"] = "rollout_routed_experts present (kept for later, not analysed)"
    batch = assemble_seqs(src.origin, seqs, meta, ex, notes)
    if batch.kept_ids is not None:  # miles replays the kept sets in its actor: log_probs are over the kept set
        batch.meta["trainer_support"] = "kept"
        batch.meta["keys"]["kept"] = "rollout_sampling_mask_ids, rollout_sampling_mask_offsets"
        batch.notes.append(REPLAYED)
    first = dumps[0][1]
    fields = [{"key": k, "type": type(v).__name__} for k, v in sorted(first.items()) if k != "rollout_data"]
    return batch, fields + [{"key": f"rollout_data.{k}", "type": type(v).__name__} for k, v in sorted(first["rollout_data"].items())]


def _load(path: Path, allow_pickle: bool) -> dict:
    dump = to_plain(torch_load(path, allow_pickle, refusal=REFUSAL), path)
    if not isinstance(dump, dict) or not isinstance(dump.get("rollout_data"), dict):
        raise BadInput(path, "not a miles train dump: expected a dict with a 'rollout_data' dict of columns")
    return dump


def _cp_layout(origin: Path, dumps: list) -> tuple[int, str]:
    sizes = {int(d.get("cp_size") or 1) for _, d in dumps}
    formats = {str(d.get("qkv_format") or "thd") for _, d in dumps}
    if len(sizes) > 1:
        raise BadInput(origin, f"rank files disagree on cp_size ({', '.join(map(str, sorted(sizes)))})")
    cp_size, qkv = sizes.pop(), sorted(formats)[0]
    if cp_size > 1 and formats != {"thd"}:
        raise BadInput(origin, f"context parallelism with qkv_format {qkv}: its slices depend on a padded length the dump "
                               "does not record; only the thd format can be put back together")
    return cp_size, qkv


def _collect(origin: Path, dumps: list, ex: Exclusions, notes: list[str]) -> dict[int, dict[int, dict]]:
    """sample index → cp rank → that rank's columns for the sample (first copy kept)."""
    out: dict[int, dict[int, dict]] = {}
    for path, d in dumps:
        cols = d["rollout_data"]
        if "log_probs" not in cols:
            notes.append(f"{path.name} has no log_probs column (not the last pipeline stage?): skipped")
            continue
        n = len(cols["log_probs"])
        ids = cols.get("sample_indices")
        if ids is None and len(dumps) > 1:
            raise BadInput(path, "no sample_indices column to match samples across rank files")
        cp_rank = int(d.get("cp_rank") or 0)
        for k in range(n):
            sid = int(np.asarray(ids[k]).reshape(-1)[0]) if ids is not None else k
            per = {c: v[k] for c, v in cols.items() if isinstance(v, list) and len(v) == n}
            slot = out.setdefault(sid, {})
            if cp_rank in slot:
                ex.add("tensor-parallel duplicate samples", len(np.asarray(per["log_probs"]).reshape(-1)), DUPLICATE_WHY)
            else:
                slot[cp_rank] = per
    return out


def _reassemble(origin: Path, sid: int, ranks: dict[int, dict], cp_size: int) -> dict:
    """One sample's columns with every per-token field whole again."""
    missing = [r for r in range(cp_size) if r not in ranks]
    if missing:
        raise BadInput(origin, f"sample {sid}: no slice from context-parallel rank(s) {', '.join(map(str, missing))}: "
                               "is a rank file missing?")
    sample = dict(ranks[0])
    if cp_size == 1:
        return sample
    total, resp = int(np.asarray(sample["total_lengths"]).reshape(-1)[0]), int(np.asarray(sample["response_lengths"]).reshape(-1)[0])
    for field in RESPONSE_FIELDS:
        if field in sample and sample[field] is not None:
            sample[field] = _whole(origin, sid, field, [ranks[r][field] for r in range(cp_size)], resp,
                                   [_positions(total, resp, cp_size, r)[0] for r in range(cp_size)])
    sample["tokens"] = _whole(origin, sid, "tokens", [ranks[r]["tokens"] for r in range(cp_size)], total,
                              [_positions(total, resp, cp_size, r)[1] for r in range(cp_size)])
    return sample


def _positions(total: int, resp: int, cp_size: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank r's zigzag share: response indices (by logit position) and sequence positions (padded)."""
    c = -(-total // (2 * cp_size))
    chunks = [(r * c, (r + 1) * c), ((2 * cp_size - r - 1) * c, (2 * cp_size - r) * c)]
    p = total - resp
    resp_idx = [np.arange(max(a, p - 1), min(b, total - 1)) - (p - 1) for a, b in chunks]
    return np.concatenate(resp_idx).astype(np.int64), np.concatenate([np.arange(a, b) for a, b in chunks])


def _whole(origin: Path, sid: int, field: str, parts: list[Any], length: int, where: list[np.ndarray]) -> np.ndarray:
    arrays = [np.asarray(p).reshape(-1) for p in parts]
    if all(a.shape[0] == length for a in arrays):
        return arrays[0]
    out = np.zeros(length, dtype=arrays[0].dtype)
    for r, (a, idx) in enumerate(zip(arrays, where)):
        if a.shape[0] != idx.shape[0]:
            raise BadInput(origin, f"sample {sid}: cp rank {r}'s '{field}' has {a.shape[0]} entries, neither the whole "
                                   f"{length} nor its zigzag slice of {idx.shape[0]}")
        keep = idx < length
        out[idx[keep]] = a[keep]
    return out


def _rollout_join(src, allow_pickle: bool, notes: list[str]) -> dict[int, dict]:
    """The rollout dump of the same id (`rollout_data/{id}.pt`), by sample index: groups and prompt text."""
    if src.step is None:
        return {}
    path = src.paths[0].parent.parent / "rollout_data" / f"{src.step}.pt"
    if not path.is_file():
        return {}
    dump = to_plain(torch_load(path, allow_pickle, refusal=REFUSAL), path)
    samples = dump.get("samples") if isinstance(dump, dict) else None
    if not isinstance(samples, list):
        notes.append(f"{path} is not a rollout dump with a 'samples' list: not joined")
        return {}
    return {int(s["index"]): s for s in samples if isinstance(s, dict) and s.get("index") is not None}


def _has(dump: dict, column: str) -> bool:
    values = dump["rollout_data"].get(column)
    return isinstance(values, list) and any(v is not None for v in values)


RANK_FILE = "{rollout_id}_{rank}.pt"


def rollout_source(path: Path) -> Source:
    """A rollout id: every rank's file of that id (context-parallel slices need their siblings)."""
    rank_file = pattern(RANK_FILE)
    m = rank_file.fullmatch(path.name)
    if m is None:
        return Source((path,), "miles", step_of(path), path.stem, path, "miles train dump")
    rid = m.group(1)
    ranks = sorted((f for f in path.parent.glob(f"{rid}_*.pt") if rank_file.fullmatch(f.name)),
                   key=lambda f: int(rank_file.fullmatch(f.name).group(2)))  # type: ignore[union-attr]  # matched above
    step = int(rid)
    return Source(tuple(ranks), "miles", step, step_id(step, rid), path.parent / f"{rid}_*.pt",
                  f"miles train dump ({len(ranks)} rank file{'s' if len(ranks) != 1 else ''})")


DUMP = Dump(
    name="miles",
    layout="per-rank column dicts (rollout_data) of response-only samples; context-parallel zigzag slices put back in place",
    pickled=lambda words: {"rollout_data", "rollout_id"} <= words, pickled_words="`rollout_data` and `rollout_id`",
    folder="train_data", step_files=(RANK_FILE,),
    read=read, source=rollout_source,
)

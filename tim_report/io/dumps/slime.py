"""slime (v0.3.1) train dump `train_data/{rollout_id}.pt`, joined with `rollout_data/{rollout_id}.pt` when present.

The train dump (format_version 2, `torch.load(weights_only=True)`) holds per sample the whole token
sequence and response-aligned `rollout_log_probs`, `log_probs` (the trainer's) and `loss_masks` of
length R = `response_lengths`; the response is the last R of the sample's `total_lengths` tokens.
No first-token exclusion. `rollout_position` indexes the rollout dump's samples: from there come
the group, the prompt text, the reward, the weight versions (one per turn) and the status. The
rollout dump may need full unpickling (metadata objects); without --allow-pickle the join is
skipped with a note rather than failing the batch.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import BadInput
from .. import kept
from ..discover import Source, step_id, step_of
from ..readers.pt import to_plain, torch_load
from ..sequences import Exclusions, Seq, assemble_seqs, call_token_versions, floats, joined_versions
from . import Dump

ALIGNMENT = ("response only: rollout_log_probs[j], log_probs[j] and loss_masks[j] score response token j = "
             "tokens[total_lengths − response_lengths + j]; no first-token exclusion; nothing shifted")
ROLLOUT_REFUSAL = ("needs full unpickling (metadata objects), which can run arbitrary code; re-run with --allow-pickle "
                   "if you trust it")


def read(src, allow_pickle: bool = False):
    """A slime train dump (and its rollout dump) → StepBatch, plus the fields for `inspect`."""
    train_path = src.paths[0]
    dump = to_plain(torch_load(train_path, allow_pickle), train_path)
    samples = _train_samples(train_path, dump)
    notes: list[str] = []
    rollout = _rollout_samples(src.paths[1], allow_pickle, notes) if len(src.paths) > 1 else None
    if rollout is None and len(src.paths) == 1:
        notes.append("no rollout_data/ dump beside this train dump: no groups, prompt text or weight versions")
    ex = Exclusions()
    seqs = [sample_seq(train_path, i, s, _joined(train_path, i, s, rollout, src.paths), ex) for i, s in enumerate(samples)]
    meta = {"framework": "slime", "layout": "response only (per-sample lists)", "alignment": ALIGNMENT,
            "step": dump.get("rollout_id"), "rollout_id": dump.get("rollout_id"),
            "keys": {"rollout": "rollout_log_probs", "trainer": "log_probs", "mask": "loss_masks", "tokens": "tokens",
                     "advantage": "advantages", "reward": "rewards"}}
    if rollout is not None:
        meta["keys"].update(group="rollout_data: group_index", weight_version="rollout_data: weight_versions",
                            prompt_text="rollout_data: prompt", cached_tokens="rollout_data: prefix_cache_info")
        meta["sample_status"] = _statuses(rollout, samples)
    _routed(meta, samples, rollout)
    batch = assemble_seqs(train_path, seqs, meta, ex, notes)
    return batch, _fields(dump, samples)


def _train_samples(path: Path, dump: Any) -> list[dict]:
    if not isinstance(dump, dict) or not isinstance(dump.get("samples"), list):
        raise BadInput(path, "not a slime train dump: expected a dict with a 'samples' list")
    samples = dump["samples"]
    if samples and "log_probs" not in samples[0] and "group_index" in samples[0]:
        raise BadInput(path, "a slime rollout dump holds the rollout log-probs only: the trainer's are in "
                             "train_data/{rollout_id}.pt (--save-debug-train-data or --dump-details)")
    return samples


def _rollout_samples(path: Path, allow_pickle: bool, notes: list[str]) -> list[dict] | None:
    try:
        dump = to_plain(torch_load(path, allow_pickle, refusal=ROLLOUT_REFUSAL), path)
    except BadInput as exc:
        if allow_pickle or "--allow-pickle" not in exc.problem:
            raise
        notes.append(f"{path.name} in rollout_data/ {ROLLOUT_REFUSAL}: groups, prompt text and weight versions were not read")
        return None
    if not isinstance(dump, dict) or not isinstance(dump.get("samples"), list):
        raise BadInput(path, "not a slime rollout dump: expected a dict with a 'samples' list")
    return dump["samples"]


def _joined(path: Path, i: int, s: dict, rollout: list[dict] | None, paths) -> dict:
    """The rollout-dump sample this train sample came from (empty without a rollout dump)."""
    if rollout is None:
        return {}
    pos = _int(s.get("rollout_position"))
    if pos is None:
        raise BadInput(path, f"sample {i} has no rollout_position to join it with {paths[1]}")
    if not 0 <= pos < len(rollout):
        raise BadInput(path, f"sample {i}: rollout_position {pos} points past the {len(rollout)} samples of {paths[1]}")
    joined = rollout[pos]
    if _int(s.get("sample_index")) is not None and _int(joined.get("index")) not in (None, _int(s.get("sample_index"))):
        raise BadInput(path, f"sample {i}: sample_index {s.get('sample_index')} but rollout sample {pos} has index "
                             f"{joined.get('index')}: the dumps are not of the same rollout")
    return joined


def sample_seq(path: Path, i: int, s: dict, joined: dict, ex: Exclusions) -> Seq:
    """One train sample (slime and miles share the column names) → its response as a Seq."""
    tokens = np.asarray(s.get("tokens"), dtype=np.int64).reshape(-1)
    total = _int(s.get("total_lengths")) or len(tokens)
    resp = _int(s.get("response_lengths"))
    rollout, trainer = floats(_vec(s.get("rollout_log_probs"))), floats(_vec(s.get("log_probs")))
    resp = len(rollout) if resp is None else resp
    mask = np.ones(resp, bool) if s.get("loss_masks") is None else np.asarray(_vec(s["loss_masks"])) > 0
    lengths = {"rollout_log_probs": len(rollout), "log_probs": len(trainer), "loss_masks": len(mask)}
    if set(lengths.values()) != {resp} or not 0 < resp <= min(total, len(tokens)):
        raise BadInput(path, f"sample {i}: response_lengths {resp}, total_lengths {total}, tokens {len(tokens)} but "
                             + ", ".join(f"{k} {v}" for k, v in lengths.items()))
    p = total - resp
    ex.add("prompt tokens", p, "prompt: the first total_lengths − response_lengths tokens, never sampled")
    adv = s.get("advantages")
    return Seq(rollout=rollout, trainer=trainer, mask=mask, token_ids=tokens[p:total], prompt_ids=tokens[:p],
               advantage=floats(_vec(adv)) if adv is not None and len(_vec(adv)) == resp else None,
               reward=_reward(s.get("rewards"), joined.get("reward")), group=_opt_str(joined.get("group_index")),
               weight_version=joined_versions(joined.get("weight_versions"), path, i), prompt_text=_prompt_text(joined.get("prompt")),
               token_version=call_token_versions(joined.get("weight_versions"), mask, p),
               cached_tokens=cached_prompt_tokens(joined.get("prefix_cache_info")), kept=_kept(path, i, s, resp))


def cached_prompt_tokens(info: Any) -> int | None:
    """The rollout sample's `prefix_cache_info` (slime ≥ 0.2.2, miles: SGLang's `cached_tokens` summed over its generate
    calls) → the prompt tokens served from the prefix cache; None where it was never filled (no prompt token counted)."""
    if not isinstance(info, dict) or not _int(info.get("total_prompt_tokens")):
        return None
    return _int(info.get("cached_tokens"))


def _kept(path: Path, i: int, s: dict, resp: int) -> tuple[np.ndarray, np.ndarray] | None:
    """miles' `rollout_sampling_mask_ids` / `_offsets` (written when --rollout-top-p < 1): one sample's kept sets as CSR
    over its response tokens (an empty set: no support recorded there)."""
    ids, offsets = s.get("rollout_sampling_mask_ids"), s.get("rollout_sampling_mask_offsets")
    if ids is None or offsets is None:
        return None
    return kept.csr(path, _vec(ids), _vec(offsets), resp, f"sample {i}'s rollout_sampling_mask")


def _vec(value: Any) -> Any:
    return np.asarray(value).reshape(-1) if value is not None else np.zeros(0)


def _int(value: Any) -> int | None:
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0]
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else None


def _reward(train: Any, rollout: Any) -> float | None:
    for v in (train, rollout):
        if isinstance(v, np.ndarray) and v.size == 1:
            v = v.reshape(-1)[0]
        if isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool):
            return float(v)
    return None


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _prompt_text(prompt: Any) -> str | None:
    """slime `prompt`: a string, or chat messages ({'role', 'content'} dicts)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        return "\n\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" for m in prompt)
    return None


def _statuses(rollout: list[dict], samples: list[dict]) -> str | None:
    used = [rollout[p] for s in samples if (p := _int(s.get("rollout_position"))) is not None and 0 <= p < len(rollout)]
    counts = Counter(str(r.get("status")) for r in used if r.get("status") is not None)
    return " · ".join(f"{k} {v}" for k, v in sorted(counts.items())) or None


def _routed(meta: dict, samples: list[dict], rollout: list[dict] | None) -> None:
    if any(s.get("rollout_routed_experts") is not None for s in samples) or \
            any(r.get("rollout_routed_experts") is not None for r in rollout or []):
        meta["routed_experts"] = "rollout_routed_experts present (kept for later, not analysed)"


def _fields(dump: dict, samples: list[dict]) -> list[dict]:
    top = [{"key": k, "type": type(v).__name__} for k, v in sorted(dump.items()) if k != "samples"]
    per = samples[0] if samples else {}
    return top + [{"key": f"samples[].{k}", "type": type(v).__name__} for k, v in sorted(per.items())]


ROLLOUT_ID = re.compile(r"(\d+)\.pt$")


def train_source(train: Path) -> Source | None:
    """A train dump in train_data/, with the rollout dump of the same id beside it when there is one (the join); a
    file elsewhere is None (read alone)."""
    if train.parent.name != "train_data":
        return None
    m = ROLLOUT_ID.fullmatch(train.name) or ROLLOUT_ID.search(train.name)
    sibling = train.parent.parent / "rollout_data" / train.name
    paths = (train, sibling) if sibling.is_file() else (train,)
    kind = "slime train dump" + (" + rollout dump" if len(paths) == 2 else " (no rollout_data/ sibling)")
    step = int(m.group(1)) if m else step_of(train)
    return Source(paths, "slime", step, step_id(step, train.stem), train, kind)


DUMP = Dump(
    name="slime",
    layout="response only, per-sample lists (train dump), joined by rollout_position with the rollout dump of the same id",
    pickled=lambda words: "samples" in words and bool({"format_version", "rollout_position"} & words
                                                      or {"group_index", "rollout_id"} <= words),
    pickled_words="`samples` with `format_version` or `rollout_position` (train dump) or `group_index` and `rollout_id`",
    folder="train_data", step_files=("{rollout_id}.pt",),
    read=read, source=train_source,
)

"""Per-sequence records → StepBatch: what every framework reader builds its batch from.

A framework reader knows its layout (whole sequence or response only, padded or not, one file per
rank or per step); it cuts each sample into a `Seq` (the response, with the prompt beside it) and
counts what it left out in an `Exclusions`. `assemble_seqs` then does the part every framework
shares: flat arrays and offsets, the turn index of multi-turn samples, the placeholder zeros, and
the meta that says what was read and what was excluded, and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config.bounds import MAX_SEQUENCE_VERSIONS
from ..errors import BadInput
from ..model import UNKNOWN_VERSION, StepBatch, version_int
from . import kept

PLACEHOLDER_WHY = ("the rollout log-prob is a 0.0 placeholder (prompt, tool or environment output): outside the loss "
                   "mask it is padding, kept in the token tables but out of every metric")
UNTRAINED_WHY = "outside the loss mask (not trained on): kept in the token tables, out of every metric"
PROMPT_WHY = "prompt: before the first loss-mask token, never sampled; kept as the sequence's prompt"


@dataclass
class Seq:
    """One sample's response (from its first trained token, or as the framework stores it) and what goes with it."""

    rollout: np.ndarray  # [L] float64
    trainer: np.ndarray  # [L] float64
    mask: np.ndarray  # [L] bool, trained on
    token_ids: np.ndarray | None = None
    prompt_ids: np.ndarray | None = None
    prompt_text: str | None = None
    advantage: np.ndarray | None = None  # [L]
    reward: float | None = None
    group: str | None = None
    weight_version: str | None = None
    token_version: np.ndarray | None = None  # [L] int64, where the framework says which call generated which tokens
    env: str | None = None
    cached_tokens: int | None = None  # prompt tokens the engine served from its prefix cache (slime / miles, SGLang's)
    kept: tuple[np.ndarray, np.ndarray] | None = None  # the sampler's kept sets over [L]: (ids, offsets [L + 1]), io/kept.py


class Exclusions:
    """What a reader left out of the metrics, in tokens, with the reason (meta["exclusions"])."""

    def __init__(self) -> None:
        self._items: dict[str, list] = {}

    def add(self, what: str, tokens: int, why: str) -> None:
        if tokens > 0:
            entry = self._items.setdefault(what, [0, why])
            entry[0] += int(tokens)

    def to_list(self) -> list[dict]:
        return [{"what": w, "tokens": n, "why": why} for w, (n, why) in self._items.items()]


def check_token_lists(path: Path, n: int, rec: dict, required: tuple[str, ...], optional: tuple[str, ...],
                      record: str) -> None:
    """One JSON-lines record's per-token lists (whole-sequence layouts): each `required` key holds a list, and every
    list among them and the `optional` ones has one length; else bad input naming the line. `record` says what such
    a line is ("a prime-rl token export line")."""
    missing = [k for k in required if not isinstance(rec.get(k), list)]
    if missing:
        raise BadInput(path, f"line {n}: no per-token list '{missing[0]}' ({record} has {', '.join(required)})")
    lengths = {k: len(rec[k]) for k in required + optional if isinstance(rec.get(k), list)}
    if len(set(lengths.values())) > 1:
        raise BadInput(path, f"line {n}: per-token fields differ in length ({', '.join(f'{k} {v}' for k, v in lengths.items())})")


def floats(values: Any) -> np.ndarray:
    """A per-token list (JSON `null` for NaN, as prime-rl writes it) or tensor as float64."""
    if isinstance(values, np.ndarray):
        return values.astype(np.float64, copy=False)
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def split_at_first_trained(mask: np.ndarray) -> int | None:
    """Whole-sequence formats: the response starts at the first loss-mask token (None: nothing trained)."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def turn_index(mask: np.ndarray, rollout: np.ndarray, offsets: np.ndarray) -> np.ndarray | None:
    """[T] turn of each token in its sequence: k for the k-th assistant span and the untrained tokens after it.

    A trained token starts a new turn when the untrained run before it, inside the same sequence and after a
    trained token, holds only 0.0 rollout placeholders: tool and environment output, which no engine sampled
    (every framework dump read here, and OpenRLHF and TRL in memory, write 0.0 there: docs/formats.md). A run of sampled tokens taken
    out of the loss (verl's token-level rejection, a veto) is not a turn. None when no sequence has a second turn.
    Works on the untrained runs' ends only, so a 16M-token batch costs a few passes."""
    m, ro = np.asarray(mask, bool), np.asarray(rollout)
    untrained = ~m
    if not (untrained & (ro == 0.0)).any():
        return None  # single-turn, the usual case
    edges = np.diff(untrained.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    a, b = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # each untrained run is [a, b)
    inside = (a > 0) & (b < m.shape[0])  # a trained token on both sides
    a, b = a[inside], b[inside]
    same_seq = np.searchsorted(offsets, a - 1, side="right") == np.searchsorted(offsets, b, side="right")
    sampled = np.flatnonzero(untrained & (ro != 0.0))
    clean = np.searchsorted(sampled, b) == np.searchsorted(sampled, a)
    starts = b[same_seq & clean]
    if not starts.size:
        return None
    marks = np.zeros(m.shape[0], np.int32)
    marks[starts] = 1
    running = np.cumsum(marks, dtype=np.int32)
    before = np.searchsorted(starts, offsets[:-1]).astype(np.int32)  # turn starts before each sequence
    return running - np.repeat(before, np.diff(offsets))


def joined_versions(versions: Any, path: Path | str, sample: int) -> str | None:
    """slime/miles `weight_versions` (one per generate call) as one string, distinct versions in order (linear: a dict
    keeps the order). BadInput for a sample naming more than MAX_SEQUENCE_VERSIONS distinct versions."""
    if versions is None:
        return None
    if isinstance(versions, (str, int, float)):
        return str(versions)
    seen = dict.fromkeys(_call_versions(versions))
    if len(seen) > MAX_SEQUENCE_VERSIONS:
        raise BadInput(path, f"sample {sample}: its weight_versions name {len(seen):,} distinct versions, more than the "
                             f"{MAX_SEQUENCE_VERSIONS:,} one sequence may carry (config.bounds.MAX_SEQUENCE_VERSIONS)")
    return ",".join(seen) if seen else None


def _call_versions(versions: Any) -> Iterator[str]:
    """Each generate call's version, in order: a string per call (slime, miles), or the version of each span of
    miles' per-call span lists ({"version", "abs_start", "abs_end"})."""
    for v in versions:
        for span in (v if isinstance(v, (list, tuple)) else [v]):
            yield str(span.get("version")) if isinstance(span, dict) else str(span)


def call_token_versions(versions: Any, mask: np.ndarray, prompt_len: int) -> np.ndarray | None:
    """[L] the version that generated each response token, where the dump says which call made which tokens: miles'
    spans (absolute positions in `tokens`, so shifted by the prompt's length), or one version per generate call of a
    multi-turn sample whose calls match its trained spans one for one (call k made trained span k and what follows it
    up to the next). None when the dump cannot say (one call, or a partial rollout's resumed calls inside one span):
    the sequence's versions (oldest first) stand for it. Tokens no span covers are UNKNOWN_VERSION."""
    if versions is None or isinstance(versions, (str, int, float)) or len(list(versions)) < 2 and not _spans(versions):
        return None
    out = np.full(mask.shape[0], UNKNOWN_VERSION, np.int64)
    if _spans(versions):
        for call in versions:
            for span in call if isinstance(call, (list, tuple)) else [call]:
                v, start, end = (_int_version(span.get(k)) for k in ("version", "abs_start", "abs_end"))
                if v is None or start is None or end is None:
                    continue  # a span that does not say its version or its tokens in plain integers covers nothing
                lo, hi = start - prompt_len, end - prompt_len
                if hi > 0:
                    out[max(lo, 0):max(hi, 0)] = v
        return out
    parsed = [_int_version(v) for v in _call_versions(versions)]
    calls = [v for v in parsed if v is not None]
    starts = np.flatnonzero(mask & ~np.concatenate([[False], mask[:-1]]))  # where each trained span begins
    if len(calls) != starts.size or len(calls) != len(parsed):
        return None
    bounds = [0, *starts[1:].tolist(), mask.shape[0]]  # call k: from span k's start (the first from 0) to span k + 1's
    for k, v in enumerate(calls):
        out[bounds[k]: bounds[k + 1]] = v
    return out


def _spans(versions: Any) -> bool:
    flat = [x for v in list(versions) for x in (v if isinstance(v, (list, tuple)) else [v])]
    return bool(flat) and all(isinstance(x, dict) and "abs_start" in x for x in flat)


def _int_version(v: Any) -> int | None:
    """A dump's version or position (an int, or its text) → int, by model.version_int's rule; None for anything else."""
    return version_int(str(v))


def cached_counts(p: Path | str, value: Any, n_seqs: int) -> np.ndarray:
    """Per sequence, the prompt tokens served from the engine's prefix cache: integers ≥ 0, one per sequence."""
    arr = np.asarray(value)
    if arr.shape != (n_seqs,) or arr.dtype.kind not in "iub":
        raise BadInput(p, f"'cached_tokens' is {arr.dtype} {list(arr.shape)}: expected one integer count per sequence "
                          f"({n_seqs})")
    if arr.size and (arr.min() < 0 or (arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max)):
        raise BadInput(p, f"'cached_tokens' holds {arr.min()}: a count of prompt tokens served from the cache is ≥ 0")
    return arr.astype(np.int64)


def assemble_seqs(path: Path | str, seqs: list[Seq], meta: dict, exclusions: Exclusions, notes: list[str]) -> StepBatch:
    """Flat arrays + offsets from the sequences; meta gets the exclusions, including the placeholder zeros."""
    if not seqs:
        raise BadInput(path, "no sample with a trained (loss-mask) token")
    lengths = np.array([len(s.rollout) for s in seqs], dtype=np.int64)
    mask = np.concatenate([s.mask.astype(bool) for s in seqs])
    rollout = np.concatenate([s.rollout for s in seqs]).astype(np.float64, copy=False)
    if not mask.any():
        raise BadInput(path, "no token is inside the loss mask")
    count_placeholders(rollout, mask, exclusions, notes)
    batch = StepBatch(rollout_logp=rollout, trainer_logp=np.concatenate([s.trainer for s in seqs]).astype(np.float64, copy=False),
                      offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), mask=mask,
                      meta=dict(meta), notes=notes)
    batch.token_ids = _cat_tokens(seqs, "token_ids", np.int64)
    batch.advantage = _cat_tokens(seqs, "advantage", np.float64)
    batch.prompt_ids = [np.asarray(s.prompt_ids, np.int64) for s in seqs] if all(s.prompt_ids is not None for s in seqs) else None
    batch.prompt_text = [str(s.prompt_text) for s in seqs] if all(s.prompt_text is not None for s in seqs) else None
    batch.reward = np.array([s.reward for s in seqs], np.float64) if all(s.reward is not None for s in seqs) else None
    for name in ("group", "weight_version", "env"):
        values = [getattr(s, name) for s in seqs]
        if all(v is not None for v in values):
            setattr(batch, name, np.asarray([str(v) for v in values], dtype=str))
    if all(s.cached_tokens is not None for s in seqs):
        batch.cached_tokens = cached_counts(path, np.asarray([s.cached_tokens for s in seqs]), len(seqs))
    if any(s.token_version is not None for s in seqs):  # the others: their sequence's version (analysis/lag/versions.py)
        batch.token_version = np.concatenate([s.token_version if s.token_version is not None else
                                              np.full(len(s.rollout), UNKNOWN_VERSION, np.int64) for s in seqs])
    if any(s.kept is not None for s in seqs):  # a sample without them has none at any token
        batch.kept_ids, batch.kept_offsets = kept.concat([s.kept if s.kept is not None else kept.empty(len(s.rollout))
                                                          for s in seqs])
    if batch.env is not None:
        counts = Counter(batch.env.tolist())
        batch.meta["environments"] = " · ".join(f"{name} {n}" for name, n in sorted(counts.items()))
    batch.turn = turn_index(batch.mask, batch.rollout_logp, batch.offsets)
    batch.meta["exclusions"] = exclusions.to_list()
    batch.meta.setdefault("source", str(path))
    return batch


def _cat_tokens(seqs: list[Seq], name: str, dtype) -> np.ndarray | None:
    values = [getattr(s, name) for s in seqs]
    if any(v is None for v in values):
        return None
    return np.concatenate([np.asarray(v, dtype=dtype) for v in values])


def count_placeholders(rollout: np.ndarray, mask: np.ndarray, exclusions: Exclusions, notes: list[str]) -> None:
    """Untrained response tokens (placeholder 0.0 or not), and a note on trained ones at exactly 0.0."""
    zero = rollout == 0.0
    exclusions.add("placeholder 0.0 rollout log-probs outside the loss mask", int((zero & ~mask).sum()), PLACEHOLDER_WHY)
    exclusions.add("response tokens outside the loss mask", int((~zero & ~mask).sum()), UNTRAINED_WHY)
    inside = int((zero & mask).sum())
    if inside:
        notes.append(f"{inside} trained tokens have a rollout log-prob of exactly 0.0: kept in the metrics, where the "
                     "dummy-zero detector judges whether they are placeholders (tool tokens left in the mask)")

"""The valid tokens of a batch as flat arrays, plus the data problems that were excluded.

Valid = masked in, both log-probs finite and ≤ 0 (within rounding). Every metric reads from here,
so exclusions are decided once. When every token is valid (the usual case) the arrays are views
of the batch's, not copies: at 16M tokens each copy costs 128 MB.

What several families read (|δ|, k3, positions, per-sequence sums) is made once per batch by `Tokens.once`, from
either of the analysis's two lanes, and handed out read-only: a family that wants to reorder or change one makes its
own copy (docs/performance.md, "One pass").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..config import POSITIVE_LOGP_TOLERANCE, SAFETY_BOUND, DiagnosisThresholds
from ..errors import BadInput
from ..model import INPUT_PROBLEMS, StepBatch
from .stats import cluster_mean_se, k3_per_token, run_starts

PROBABILITY_SHARE = DiagnosisThresholds.probability_share  # the default; the diagnosis reads its own thresholds


@dataclass
class Tokens:
    rollout: np.ndarray  # [V] log p rollout of valid tokens
    trainer: np.ndarray  # [V]
    delta: np.ndarray  # [V] trainer - rollout (nats)
    log_r: np.ndarray  # [V] delta clamped to ±SAFETY_BOUND (the same array when nothing needs clamping)
    seq: np.ndarray  # [V] int32 sequence index of each valid token (non-decreasing)
    valid_index: np.ndarray | None  # [V] index into the batch's flat arrays; None when every token is valid
    batch_offsets: np.ndarray  # [N+1] the batch's CSR offsets
    n_seqs: int  # sequences in the batch (including those with no valid token)
    _made: dict = field(default_factory=dict, repr=False, compare=False)  # Tokens.once's values, by key
    _making: dict = field(default_factory=dict, repr=False, compare=False)  # a lock per key being made
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def once(self, key: Any, make: Callable[[], Any]) -> Any:
        """`make()`, made on first use and kept for this batch: the two analysis lanes may ask at once (the second
        waits for the first's, it does not make its own). An array comes back read-only: it is every family's."""
        if key in self._made:
            return self._made[key]
        with self._guard:
            lock = self._making.setdefault(key, threading.Lock())
        with lock:
            if key not in self._made:
                value = make()
                if isinstance(value, np.ndarray) and value.base is None:
                    value.flags.writeable = False
                self._made[key] = value
        return self._made[key]

    @property
    def n(self) -> int:
        return int(self.delta.shape[0])

    @property
    def index(self) -> np.ndarray:
        """[V] index of each valid token in the batch's flat arrays (made on demand when all are valid)."""
        return np.arange(self.n) if self.valid_index is None else self.valid_index

    @property
    def pos(self) -> np.ndarray:
        """[V] position within its response (0-based, over all response tokens); computed on demand."""
        return self.pos_at(slice(None))

    def pos_at(self, part: slice) -> np.ndarray:
        """`pos[part]` without making the whole array (chunked passes)."""
        lo, hi, _ = part.indices(self.n)
        index = np.arange(lo, hi) if self.valid_index is None else self.valid_index[lo:hi]
        return (index - self.batch_offsets[self.seq[lo:hi]]).astype(np.int32)

    def max_pos(self) -> int:
        """The largest position: each sequence's last valid token holds its own maximum."""
        if self.n == 0:
            return 0
        last = np.append(self.starts[1:], self.n) - 1
        index = last if self.valid_index is None else self.valid_index[last]
        return int((index - self.batch_offsets[self.seq[last]]).max())

    def k3(self) -> np.ndarray:
        """Per-token k3 = r − 1 − log r (stats.k3_per_token), made once (read-only)."""
        return self.once("k3", lambda: k3_per_token(self.log_r))

    @property
    def abs_delta(self) -> np.ndarray:
        """Per-token |δ|, made once (read-only)."""
        return self.once("abs_delta", lambda: np.abs(self.delta))

    def shared(self, name: str) -> np.ndarray:
        """A per-token array by name: "delta", "rollout", "trainer" (the batch's own) or a shared one."""
        return {"delta": lambda: self.delta, "rollout": lambda: self.rollout, "trainer": lambda: self.trainer,
                "abs_delta": lambda: self.abs_delta, "k3": self.k3}[name]()

    def seq_sum_of(self, name: str) -> np.ndarray:
        """[N] per-sequence sums of a per-token array named as `shared` names it, made once."""
        return self.once(("seq_sum", name), lambda: self.seq_sum(self.shared(name)))

    def mean_se_of(self, name: str) -> tuple[float, float]:
        """`mean_se` of a named per-token array, from its shared per-sequence sums."""
        return cluster_mean_se(self.shared(name), self.seq, self.starts, self.seq_sum_of(name)[self.present])

    def seq_mean_of(self, name: str) -> np.ndarray:
        """`seq_mean` of a named per-token array, from its shared per-sequence sums."""
        return self.seq_sum_of(name)[self.present] / self.counts[self.present]

    def valid_mask(self) -> np.ndarray:
        """[T] over the batch's flat tokens: True where the token is valid (masked in, finite, ≤ 0)."""
        out = np.zeros(int(self.batch_offsets[-1]), bool)
        out[self.index] = True
        return out

    def subset(self, keep: np.ndarray) -> Tokens:
        """These tokens without those `keep` is False for (same sequences, same batch)."""
        if keep.all():
            return self
        at = np.flatnonzero(keep)  # one scan of the mask for the six arrays; the index is `at` when all are valid
        return Tokens(self.rollout[at], self.trainer[at], self.delta[at], self.log_r[at], self.seq[at],
                      at if self.valid_index is None else self.valid_index[at], self.batch_offsets, self.n_seqs)

    @cached_property
    def starts(self) -> np.ndarray:
        """Where each present sequence's run of valid tokens begins (tokens are sorted by sequence)."""
        return run_starts(self.seq)

    def seq_sum(self, values: np.ndarray) -> np.ndarray:
        """[N] per-sequence sums: one reduceat pass over contiguous runs (≈10× faster than bincount)."""
        out = np.zeros(self.n_seqs)
        out[self.seq[self.starts]] = np.add.reduceat(values, self.starts)
        return out

    def span(self, i: int) -> tuple[int, int]:
        """Where sequence i's valid tokens lie in these arrays: [lo, hi) (tokens are sorted by sequence)."""
        g = int(np.searchsorted(self.seq[self.starts], i))
        if g == self.starts.shape[0] or self.seq[self.starts[g]] != i:
            return 0, 0
        return int(self.starts[g]), int(self.starts[g + 1]) if g + 1 < self.starts.shape[0] else self.n

    def seq_count_of(self, flags: np.ndarray) -> np.ndarray:
        """[N] per-sequence count of True flags (integer sums: no float copy of the flags)."""
        out = np.zeros(self.n_seqs, dtype=np.int64)
        out[self.seq[self.starts]] = np.add.reduceat(flags.view(np.int8), self.starts, dtype=np.int64)
        return out

    @cached_property
    def counts(self) -> np.ndarray:
        """[N] valid tokens per sequence."""
        out = np.zeros(self.n_seqs, dtype=np.int64)
        out[self.seq[self.starts]] = np.diff(np.append(self.starts, self.n))
        return out

    @cached_property
    def present(self) -> np.ndarray:
        """[N] the sequence has at least one valid token."""
        return self.counts > 0

    def mean_se(self, values: np.ndarray) -> tuple[float, float]:
        """Token-mean of a per-token value and its cluster-robust standard error (clusters = sequences)."""
        return cluster_mean_se(values, self.seq, self.starts)

    def seq_mean(self, values: np.ndarray) -> np.ndarray:
        """Per-sequence means of a per-token value, one per present sequence (in sequence order)."""
        return self.seq_sum(values)[self.present] / self.counts[self.present]


def probability_sides(batch: StepBatch, share: float) -> list[str]:
    """The sides whose finite masked values all lie in [0, 1] with more than `share` of them above 0: probabilities
    (or ratios) saved where log-probs belong. A side whose values are all ≤ 0 is settled in one pass."""
    out = []
    for side, arr in (("rollout", batch.rollout_logp), ("trainer", batch.trainer_logp)):
        if arr.max(initial=-np.inf) <= POSITIVE_LOGP_TOLERANCE:
            continue  # the usual case: all ≤ 0 (a NaN makes the max NaN and the test False), no temporary array
        values = arr[batch.mask]
        values = values[np.isfinite(values)]
        if values.shape[0] and values.min() >= -POSITIVE_LOGP_TOLERANCE and values.max() <= 1 + POSITIVE_LOGP_TOLERANCE \
                and float(np.mean(values > POSITIVE_LOGP_TOLERANCE)) > share:
            out.append(side)
    return out


def valid_tokens(batch: StepBatch) -> tuple[Tokens, dict]:
    """Split the masked tokens into valid ones and counted data problems."""
    ro, tr, m = batch.rollout_logp, batch.trainer_logp, batch.mask
    problems: dict[str, int] = {}
    bad = None
    for side, arr in (("rollout", ro), ("trainer", tr)):
        if arr.max(initial=-np.inf) <= POSITIVE_LOGP_TOLERANCE and arr.min(initial=0.0) > -np.inf:  # NaN fails the first
            problems.update({f"{side}_nan": 0, f"{side}_inf": 0, f"{side}_positive": 0})  # the usual case: one pass
            continue
        nan = np.isnan(arr) & m
        inf = np.isinf(arr) & m
        pos = (arr > POSITIVE_LOGP_TOLERANCE) & np.isfinite(arr) & m  # +inf counts once, as inf
        problems[f"{side}_nan"] = int(nan.sum())
        problems[f"{side}_inf"] = int(inf.sum())
        problems[f"{side}_positive"] = int(pos.sum())
        bad = (nan | inf | pos) if bad is None else (bad | nan | inf | pos)
    keep = m if bad is None else m & ~bad
    del bad
    masked = int(m.sum())
    n_valid = int(keep.sum())
    excluded = masked - n_valid
    report = {
        "masked_tokens": masked,
        "excluded_tokens": excluded,
        "excluded_fraction": excluded / masked if masked else 0.0,
        "counts": problems,
        "input": {k: int(v) for k, v in sorted(batch.problems.items()) if v},
        "messages": [
            f"{n} masked tokens have {kind.replace('_', ' ')} log-probs; excluded" for kind, n in problems.items() if n
        ] + [f"{n} {INPUT_PROBLEMS.get(k, k)}" for k, n in sorted(batch.problems.items()) if n],
        "positive_tolerance": POSITIVE_LOGP_TOLERANCE,
    }
    if n_valid == 0:
        probs = probability_sides(batch, PROBABILITY_SHARE)
        whose = "both sides'" if len(probs) == 2 else f"the {probs[0]} side's" if probs else ""
        why = (f"{whose} values look like probabilities (all in [0, 1]), not log-probs" if probs
               else f"all {masked} masked tokens have NaN, inf or positive log-probs")
        raise BadInput(batch.meta.get("file") or batch.meta.get("source", "batch"), f"no usable tokens: {why}")
    seq_all = np.repeat(np.arange(batch.n_seqs, dtype=np.int32), batch.seq_lengths)
    if n_valid == batch.n_tokens:
        index, seq, rollout, trainer = None, seq_all, ro, tr
    else:
        index = np.flatnonzero(keep)
        seq, rollout, trainer = seq_all[index], ro[index], tr[index]
    del seq_all, keep
    delta = trainer - rollout
    big = delta.max() > SAFETY_BOUND or delta.min() < -SAFETY_BOUND
    log_r = np.clip(delta, -SAFETY_BOUND, SAFETY_BOUND) if big else delta
    tokens = Tokens(rollout, trainer, delta, log_r, seq, index, batch.offsets, batch.n_seqs)
    return tokens, report


def third_side(values: np.ndarray | None, name: str, n_tokens: int, tok: Tokens) -> tuple[np.ndarray, np.ndarray] | str:
    """A third per-token log-prob array of the batch (the shadow pass, the trainer floor) on the valid tokens:
    (its values where they are valid log-probs, that mask over `tok`), or why it cannot be used."""
    if values is None:
        return f"the batch has no {name}"
    whole = np.asarray(values, dtype=np.float64)
    if whole.shape[0] != n_tokens:
        return f"{name} has {whole.shape[0]} tokens, the batch {n_tokens}"
    on_tok = whole[tok.index]
    ok = np.isfinite(on_tok) & (on_tok <= POSITIVE_LOGP_TOLERANCE)
    if not ok.any():
        return f"no valid token has a finite {name}"
    return on_tok[ok], ok

"""The valid tokens of a batch as flat arrays, plus the data problems that were excluded.

Valid = masked in, both log-probs finite and ≤ 0 (within rounding). Every metric reads from here,
so exclusions are decided once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..batch import StepBatch
from ..errors import BadInput
from ..loader import POSITIVE_LOGP_TOLERANCE
from .config import SAFETY_BOUND


@dataclass
class Tokens:
    rollout: np.ndarray  # [V] log p rollout of valid tokens
    trainer: np.ndarray  # [V]
    delta: np.ndarray  # [V] trainer - rollout (nats)
    log_r: np.ndarray  # [V] delta clamped to ±SAFETY_BOUND
    seq: np.ndarray  # [V] sequence index of each valid token
    pos: np.ndarray  # [V] position within its response (0-based, over all response tokens)
    index: np.ndarray  # [V] index into the batch's flat arrays
    n_seqs: int  # sequences in the batch (including those with no valid token)

    @property
    def n(self) -> int:
        return int(self.delta.shape[0])

    def k3(self) -> np.ndarray:
        """Per-token k3 = r − 1 − log r (≥ 0; expm1 keeps it exact for tiny δ)."""
        return np.maximum(np.expm1(self.log_r) - self.log_r, 0.0)

    def seq_sum(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.seq, weights=values, minlength=self.n_seqs)

    def seq_count(self) -> np.ndarray:
        return np.bincount(self.seq, minlength=self.n_seqs)

    def seqs_present(self) -> np.ndarray:
        return self.seq_count() > 0


def valid_tokens(batch: StepBatch) -> tuple[Tokens, dict]:
    """Split the masked tokens into valid ones and counted data problems."""
    ro, tr, m = batch.rollout_logp, batch.trainer_logp, batch.mask
    problems: dict[str, int] = {}
    bad = np.zeros(batch.n_tokens, bool)
    for side, arr in (("rollout", ro), ("trainer", tr)):
        nan = np.isnan(arr) & m
        inf = np.isinf(arr) & m
        pos = (arr > POSITIVE_LOGP_TOLERANCE) & m
        problems[f"{side}_nan"] = int(nan.sum())
        problems[f"{side}_inf"] = int(inf.sum())
        problems[f"{side}_positive"] = int(pos.sum())
        bad |= nan | inf | pos
    keep = m & ~bad
    masked = int(m.sum())
    excluded = int((m & bad).sum())
    report = {
        "masked_tokens": masked,
        "excluded_tokens": excluded,
        "excluded_fraction": excluded / masked if masked else 0.0,
        "counts": problems,
        "messages": [
            f"{n} masked tokens have {kind.replace('_', ' ')} log-probs; excluded" for kind, n in problems.items() if n
        ],
        "positive_tolerance": POSITIVE_LOGP_TOLERANCE,
    }
    if not keep.any():
        raise BadInput(batch.meta.get("source", "batch"),
                       f"no usable tokens: all {masked} masked tokens have NaN, inf or positive log-probs")
    index = np.flatnonzero(keep)
    seq_all = batch.seq_index()
    seq = seq_all[index].astype(np.int32)
    pos = (index - batch.offsets[seq]).astype(np.int32)
    rollout, trainer = ro[index], tr[index]
    delta = trainer - rollout
    tokens = Tokens(rollout, trainer, delta, np.clip(delta, -SAFETY_BOUND, SAFETY_BOUND), seq, pos, index, batch.n_seqs)
    return tokens, report

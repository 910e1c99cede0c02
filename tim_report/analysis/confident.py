"""Confident disagreements: tokens the engine sampled with probability ≥ CONFIDENT_P that the trainer puts more than
CONFIDENT_GAP nats lower (the metrics count them: `confident_disagree`). Precision noise puts none there; a token
spliced into the sequence or garbled after it was sampled does (inference-atlas #192: a stray `carrierhed` in long
generations, about one output token in 8,000, present in the sampled ids). A few are not a finding: `spliced_tokens`
needs more than the clean rate explains, by a Poisson test on the count (P(X ≥ count | clean rate × tokens) ≤
confident_alpha) and at least confident_min_count of them, so its bar rises with the batch's size.

Beside a fault of every token (an off-by-one shift puts ~10% of SmolLM2's tokens there) the count says nothing new
and the finding stays silent. Non-finite rollout log-probs are the data problems' count (analysis/tokens.py), said in
its evidence, not counted again.
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import findings
from ..config import CONFIDENT_GAP, CONFIDENT_P
from .registry import Scene, detector
from .stats import poisson_tail

WHERE_MAX = 5  # the first confident disagreements the evidence names (sequence, position, token id)


@detector("spliced_tokens")
def _spliced(s: Scene) -> dict | None:
    count, dt, tok = s.metrics.get("confident_disagree") or 0, s.dt, s.tok
    if count < dt.confident_min_count or s.whole_batch_fault():
        return None
    expected = dt.confident_clean_rate * tok.n
    p = poisson_tail(count, expected)
    if p > dt.confident_alpha:
        return None
    low = np.flatnonzero(tok.delta < -CONFIDENT_GAP)
    hits = low[tok.rollout[low] >= math.log(CONFIDENT_P)]
    seqs, flat = tok.seq[hits], tok.index[hits]
    ids = s.batch.token_ids
    where = [f"sequence {int(q)} position {int(i - tok.batch_offsets[q])}" + (f" (token {int(ids[i])})" if ids is not None
                                                                             else "")
             for q, i in zip(seqs[:WHERE_MAX], flat[:WHERE_MAX])]
    counts = (s.given.get("data_problems") or {}).get("counts") or {}
    evidence = {"count": count, "tokens": tok.n, "rate": count / tok.n, "expected": expected, "p_value": p,
                "sequences": int(np.unique(seqs).size), "where": "; ".join(where),
                "rollout_nonfinite": int(counts.get("rollout_nan", 0) + counts.get("rollout_inf", 0)),
                "threshold_clean_rate": dt.confident_clean_rate, "threshold_alpha": dt.confident_alpha}
    return findings.make("spliced_tokens", evidence, dt)

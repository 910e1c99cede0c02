"""The gate on the input: is enough of the batch, in the right units, left to draw a verdict from?

A batch whose log-probs are mostly NaN, or that holds probabilities instead of log-probs, keeps a few valid
tokens after the data problems are excluded (tokens.py), and a verdict drawn from those few says nothing about
the batch. This finding leads the diagnosis and makes the batch an input problem everywhere (`check` exits 2).
The limits are `DiagnosisThresholds.min_usable_share`, `min_usable_tokens` and `probability_share`.
"""

from __future__ import annotations

import numpy as np

from ..catalogue import findings
from ..config import POSITIVE_LOGP_TOLERANCE, DiagnosisThresholds
from ..model import StepBatch
from .registry import Scene, detector
from .tokens import Tokens, probability_sides


def unusable_input(batch: StepBatch, tok: Tokens, dt: DiagnosisThresholds) -> dict | None:
    """The `unusable_input` finding (an error) when too small a share or count of the masked tokens is valid, or a
    side holds probabilities; else None."""
    masked = int(batch.mask.sum())
    share = tok.n / masked if masked else 0.0
    probs = probability_sides(batch, dt.probability_share)
    if share >= dt.min_usable_share and tok.n >= dt.min_usable_tokens and not probs:
        return None
    m = batch.mask
    evidence: dict = {"usable_tokens": tok.n, "masked_tokens": masked, "usable_share": share,
                      "min_usable_share": dt.min_usable_share, "min_usable_tokens": dt.min_usable_tokens}
    for side, arr in (("rollout", batch.rollout_logp), ("trainer", batch.trainer_logp)):
        finite = np.isfinite(arr)
        evidence[f"{side}_nan"] = int((np.isnan(arr) & m).sum())
        evidence[f"{side}_inf"] = int((np.isinf(arr) & m).sum())
        evidence[f"{side}_positive"] = int(((arr > POSITIVE_LOGP_TOLERANCE) & finite & m).sum())
        evidence[f"{side}_probabilities"] = side in probs
    return findings.make("unusable_input", evidence, dt, probability_sides=probs)


@detector("unusable_input")
def _unusable(s: Scene) -> dict | None:
    return unusable_input(s.batch, s.tok, s.dt)

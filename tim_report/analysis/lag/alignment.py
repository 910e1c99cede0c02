"""Per-token version arrays out of line with the loss mask: a version array shifted by one position (AReaL #1736).

AReaL records the version that generated each token in an array aligned with the tokens (−1 on tokens no engine
generated: the prompt, a tool's output), while its loss mask is aligned with the next-token targets; #1736 fixed the
off-by-one between the two. An array one position late gives every trained span's first token the version of the
token before it (the prompt's −1: unknown) and drops its last; one position early does the opposite at the span's end.
Over the batch's trained spans (runs of the loss mask, at least two tokens), the share whose first (or last) token is
unknown while the rest of the span is known says which: clean arrays leave span edges as known as their insides.
"""

from __future__ import annotations

import numpy as np

from ...catalogue import findings
from ...config.sampling import VERSION_SHIFT_SHARE
from ...model import StepBatch
from ..registry import Scene, detector
from .versions import LIMIT


def _spans(mask: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[a, b) of every run of trained tokens, cut at sequence boundaries."""
    n = mask.shape[0]
    first, last = np.zeros(n, bool), np.zeros(n, bool)
    first[offsets[:-1][offsets[:-1] < n]] = True
    last[offsets[1:][offsets[1:] > 0] - 1] = True
    before, after = np.concatenate([[False], mask[:-1]]), np.concatenate([mask[1:], [False]])
    return np.flatnonzero(mask & (first | ~before)), np.flatnonzero(mask & (last | ~after)) + 1


def misalignment(batch: StepBatch, min_spans: int) -> dict | None:
    """How many trained spans have an unknown version at their first or last token while the rest is known; None
    without per-token versions or with fewer than `min_spans` spans of two or more tokens."""
    if batch.token_version is None:
        return None
    v = np.asarray(batch.token_version, np.int64)
    unknown = (v < 0) | (v >= LIMIT)
    if unknown.all():
        return None
    mask = np.asarray(batch.mask, bool)
    a, b = _spans(mask, batch.offsets)
    long = (b - a) >= 2
    a, b = a[long], b[long]
    if a.shape[0] < min_spans:
        return None
    counted = np.cumsum(np.concatenate([[0], unknown.astype(np.int64)]))
    inside = counted[b - 1] - counted[a + 1]  # unknown strictly between the first and the last token
    first, last = unknown[a], unknown[b - 1]
    clean_inside = inside == 0
    late, early = first & ~last & clean_inside, last & ~first & clean_inside
    n = a.shape[0]
    return {"spans": n, "spans_first_unknown": int(late.sum()), "spans_last_unknown": int(early.sum()),
            "late_share": float(late.mean()), "early_share": float(early.mean()),
            "interior_unknown_share": float((counted[b] - counted[a] - first - last).sum() / max(int((b - a).sum()), 1))}


def measured(s: Scene) -> dict | None:
    return misalignment(s.batch, s.dt.min_localise_sequences)


@detector("versions_misaligned", beside=True)
def _misaligned(s: Scene) -> dict | None:
    m = s.once(measured)
    if not m or max(m["late_share"], m["early_share"]) < VERSION_SHIFT_SHARE:
        return None
    shift = 1 if m["late_share"] >= m["early_share"] else -1
    return findings.make("versions_misaligned", {**m, "direction": shift, "threshold_share": VERSION_SHIFT_SHARE}, s.dt)

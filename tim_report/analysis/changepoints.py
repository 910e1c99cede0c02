"""Where a series changes level: PELT (ruptures) with a weighted L2 cost and a BIC-like penalty.

The position-onset detector (analysis/localise.py) feeds it one value per response position (mean log|δ|,
weighted by the tokens at that position). The run view's change points use analysis/shifts.py instead, which
tests each change against the noise of the two segments it separates rather than one noise level for the series.
Noise is estimated from the series itself (a robust scale of its first differences), so the same
penalty works for |δ| in nats and for KL in decades: a level shift has to stand out of the series'
own noise by about √(penalty · log n) standard errors before it counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import CHANGE_POINT_MIN_SIZE, CHANGE_POINT_PENALTY


@dataclass(frozen=True)
class ChangePoint:
    """The level of `values` is `before` on [start, index) and `after` on [index, end)."""

    index: int
    before: float
    after: float
    start: int
    end: int
    z: float  # the shift in standard errors of the two segments' means


def noise_scale(values: np.ndarray, weights: np.ndarray) -> float:
    """σ of one unit-weight point, robust to the level shifts themselves (MAD of scaled differences)."""
    if len(values) < 3:
        return 0.0
    d = np.diff(values) / np.sqrt(1.0 / weights[1:] + 1.0 / weights[:-1])
    return float(1.4826 * np.median(np.abs(d - np.median(d))))


def change_points(values, weights=None, *, min_size: int = CHANGE_POINT_MIN_SIZE,
                  penalty: float = CHANGE_POINT_PENALTY) -> list[ChangePoint]:
    """The level shifts of `values` (NaN points dropped), each with its level before and after."""
    x = np.asarray(values, dtype=np.float64)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=np.float64)
    keep = np.isfinite(x) & np.isfinite(w) & (w > 0)
    index = np.flatnonzero(keep)
    x, w = x[keep], w[keep]
    n = len(x)
    if n < 2 * min_size:
        return []
    sigma = noise_scale(x, w)
    if sigma == 0.0:  # a constant series with a step is still a step: use the spread instead
        sigma = float(np.sqrt(np.average((x - np.average(x, weights=w)) ** 2, weights=w))) / 10
        if sigma == 0.0:
            return []
    import ruptures  # heavy-ish: only when a change point is asked for

    pen = penalty * sigma**2 * np.log(n)
    if np.all(w == w[0]):  # equal weights: the L2 cost (the weighted one over w), in ruptures' C code, ~250× faster
        algo = ruptures.KernelCPD(kernel="linear", min_size=min_size, jump=1).fit(x)
        pen /= float(w[0])
    else:
        algo = ruptures.Pelt(custom_cost=_weighted_l2(ruptures.base.BaseCost, w), min_size=min_size, jump=1).fit(x)
    ends = [int(e) for e in algo.predict(pen=pen)]
    points, starts = [], [0, *ends[:-1]]
    for k in range(1, len(ends)):
        a, b, c = starts[k - 1], ends[k - 1], ends[k]
        before, after = np.average(x[a:b], weights=w[a:b]), np.average(x[b:c], weights=w[b:c])
        se = sigma * np.sqrt(1.0 / w[a:b].sum() + 1.0 / w[b:c].sum())
        points.append(ChangePoint(index=int(index[b]), before=float(before), after=float(after),
                                  start=int(index[a]), end=int(index[c - 1]) + 1, z=float((after - before) / se)))
    return points


def _weighted_l2(base: type, weights: np.ndarray):
    """Σ w·(x − x̄_w)² over a segment, from cumulative sums: O(1) per segment (ruptures wants a BaseCost)."""

    class WeightedL2(base):
        model = "weighted_l2"
        min_size = 1

        def fit(self, signal):
            x = np.asarray(signal, dtype=np.float64).reshape(-1)
            self.signal = x.reshape(-1, 1)
            zero = np.zeros(1)
            self.cw = np.concatenate([zero, np.cumsum(weights)])
            self.cwx = np.concatenate([zero, np.cumsum(weights * x)])
            self.cwx2 = np.concatenate([zero, np.cumsum(weights * x * x)])
            return self

        def error(self, start: int, end: int) -> float:
            sw = self.cw[end] - self.cw[start]
            swx = self.cwx[end] - self.cwx[start]
            return float(self.cwx2[end] - self.cwx2[start] - swx * swx / sw)

    return WeightedL2()

"""Where a run's per-step series changes level, each change tested against the noise of the two segments it separates.

The run view's change points (analysis/trend.py). Binary segmentation: a segment is split where the two sides
differ most, and only when that difference stands out of *their own* noise at the false-alarm level
`CHANGE_POINT_ALPHA` (Bonferroni over the positions tried); each side is then searched again. A single
noise level for the whole series (PELT with one penalty, as analysis/changepoints.py does for a response's
positions) splits the noisier stretch after a real jump again and again; here a segment is only compared
with its neighbour, at their own scatter. Two noise models:

  normal    a value per step (|δ| and KL in logs, ESS): Welch's t of the two means, each side's variance its
            own, moderated towards the parent segment's robust step-to-step scatter (CHANGE_POINT_PRIOR_DF
            pseudo-steps of it) so a three-step side cannot claim a variance of zero;
  binomial  a count per step out of that step's tokens (a share of tokens is tokens × share of them);
  poisson   a count per step with the step's tokens as exposure (data problems):
            the signed root of the likelihood-ratio (deviance) statistic, scaled by each side's own
            over-dispersion (Pearson χ² per degree of freedom, moderated towards the parent segment's robust
            scatter of step-to-step differences, never below 1: tokens of one sequence are not independent, so
            real shares scatter more than a binomial).

After the search, every change is tested again between the two whole segments it separates, and the one
that fails most is merged away until all pass (`prune`, which the callers also run with their size floors).
docs/diagnosis.md measures the false-alarm rate on steady runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import CHANGE_POINT_ALPHA, CHANGE_POINT_MIN_SIZE, CHANGE_POINT_PRIOR_DF

FAMILIES = ("normal", "binomial", "poisson")


@dataclass(frozen=True)
class Series:
    """One metric over a run's steps, as the tests see it (every point finite; NaN steps are left out by the caller).

    normal: `x` the value of each step. binomial: `x` the count of each step out of its `n` tokens. poisson: `x` the
    count of each step, `n` its exposure (the tokens it had)."""

    family: str
    x: np.ndarray
    n: np.ndarray | None = None

    def __post_init__(self) -> None:
        assert self.family in FAMILIES, self.family
        assert self.family == "normal" or (self.n is not None and len(self.n) == len(self.x)), "counts need tokens"

    def __len__(self) -> int:
        return len(self.x)

    def level(self, a: int, b: int) -> float:
        """The level of steps [a, b) as its metric reads: the mean value or count per step, or for a share the pooled
        share (all counts over all tokens)."""
        if self.family != "binomial":
            return float(self.x[a:b].mean())
        assert self.n is not None
        total = float(self.n[a:b].sum())
        return float(self.x[a:b].sum()) / total if total > 0 else 0.0


def level_shifts(s: Series, min_size: int = CHANGE_POINT_MIN_SIZE, alpha: float = CHANGE_POINT_ALPHA) -> list[int]:
    """The indices where a new level starts (each segment at least `min_size` steps), sorted."""
    cuts: list[int] = []
    todo = [(0, len(s))]
    while todo:
        a, b = todo.pop()
        if b - a < 2 * min_size:
            continue
        ks, p, fit = split_pvalues(s, a, b, min_size)
        best = int(np.argmax(fit))  # where the two levels explain the segment best; then: does that stand out?
        if p[best] * len(ks) < alpha:  # Bonferroni over the positions tried
            k = int(ks[best])
            cuts.append(k)
            todo += [(a, k), (k, b)]
    return prune(s, sorted(cuts), min_size, alpha)


def prune(s: Series, cuts: list[int], min_size: int = CHANGE_POINT_MIN_SIZE, alpha: float = CHANGE_POINT_ALPHA,
          keep=None) -> list[int]:
    """Merge away, one at a time and weakest first, every change that does not stand out of the noise of the two
    whole segments it separates (or that `keep(before, after)`, the caller's size floor on the two levels, refuses)."""
    cuts = list(cuts)
    while cuts:
        bounds = [0, *cuts, len(s)]
        failing = []
        for j in range(len(cuts)):
            a, k, b = bounds[j], bounds[j + 1], bounds[j + 2]
            p = float(split_pvalues(s, a, b, min_size, only=k)[1][0]) * max(1, b - a - 2 * min_size + 1)  # as searched
            small = keep is not None and not keep(s.level(a, k), s.level(k, b))
            if p >= alpha or small:
                failing.append((not small, -p, j))  # size failures first, then the least significant
        if not failing:
            break
        cuts.pop(min(failing)[2])
    return cuts


def split_pvalues(s: Series, a: int, b: int, min_size: int,
                  only: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions k, two-sided p-value of "steps [a, k) and [k, b) have one level", how much better two levels fit
    than one) for every k that leaves at least `min_size` steps on each side, or for `only`. The fit (the between-
    segment sum of squares, or the deviance) places a split; the p-value, at each side's own noise, judges it."""
    ks = np.arange(a + min_size, b - min_size + 1) if only is None else np.array([only])
    if s.family == "normal":
        return (ks, *_normal(s.x[a:b], ks - a))
    assert s.n is not None
    return (ks, *_counts(s.x[a:b], s.n[a:b], ks - a, s.family))


def _sides(values: np.ndarray, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Σ over [0, k) and over [k, end) of `values`, for each k."""
    c = np.concatenate([[0.0], np.cumsum(values)])
    return c[ks], c[-1] - c[ks]


def _normal(x: np.ndarray, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Welch's t with moderated variances (each side's own, shrunk towards the segment's step-to-step scatter)."""
    m = len(x)
    n_l, n_r = ks.astype(np.float64), (m - ks).astype(np.float64)
    s_l, s_r = _sides(x, ks)
    q_l, q_r = _sides(x * x, ks)
    mean_l, mean_r = s_l / n_l, s_r / n_r
    var_l = np.maximum(q_l - n_l * mean_l**2, 0.0) / (n_l - 1)
    var_r = np.maximum(q_r - n_r * mean_r**2, 0.0) / (n_r - 1)
    d = np.diff(x)
    prior = (1.4826 * float(np.median(np.abs(d - np.median(d))))) ** 2 / 2 if len(d) else 0.0  # robust to the shift itself
    nu = CHANGE_POINT_PRIOR_DF
    df_l, df_r = nu + n_l - 1, nu + n_r - 1
    v_l = (nu * prior + (n_l - 1) * var_l) / df_l / n_l
    v_r = (nu * prior + (n_r - 1) * var_r) / df_r / n_r
    se = np.sqrt(v_l + v_r)
    diff = np.abs(mean_r - mean_l)
    df = np.where(se > 0, (v_l + v_r) ** 2 / np.maximum(v_l**2 / df_l + v_r**2 / df_r, 1e-300), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tval = np.where(se > 0, diff / np.where(se > 0, se, 1.0), np.where(diff > 0, np.inf, 0.0))
    return _two_sided(tval, df), n_l * n_r / m * (mean_r - mean_l) ** 2


def _counts(k: np.ndarray, n: np.ndarray, ks: np.ndarray, family: str) -> tuple[np.ndarray, np.ndarray]:
    """The signed-root deviance of one rate against two, over each side's own over-dispersion (≥ 1)."""
    k_l, k_r = _sides(k, ks)
    n_l, n_r = _sides(n, ks)
    rate_l, rate_r = _rate(k_l, n_l), _rate(k_r, n_r)
    pooled = _rate(k_l + k_r, n_l + n_r)
    dev = 2 * (_loglik(k_l, n_l, rate_l, family) + _loglik(k_r, n_r, rate_r, family)
               - _loglik(k_l, n_l, pooled, family) - _loglik(k_r, n_r, pooled, family))
    prior = _scatter(k, n, family)
    phi_l, df_l = _dispersion(k, n, ks, rate_l, family, prior, left=True)
    phi_r, df_r = _dispersion(k, n, ks, rate_r, family, prior, left=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        # each side's dispersion weighted by its share of the variance of the difference (∝ 1 / tokens)
        w_l, w_r = np.where(n_l > 0, 1 / n_l, 0.0), np.where(n_r > 0, 1 / n_r, 0.0)
        phi = np.where(w_l + w_r > 0, (phi_l * w_l + phi_r * w_r) / (w_l + w_r), 1.0)
    tval = np.sqrt(np.maximum(dev, 0.0) / phi)
    return _two_sided(tval, df_l + df_r), dev


def _two_sided(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    """P(|T| ≥ t) for Student's T with `df` degrees of freedom (t = inf → 0): scipy.special.stdtr's value to ~1e-14
    without importing scipy.special, a quarter of a second of every build's index and of a rebuild's 1 s
    (docs/performance.md). A few hundred values at most: one scalar evaluation each."""
    t = np.abs(np.asarray(t, dtype=np.float64))
    df = np.broadcast_to(np.asarray(df, dtype=np.float64), t.shape)
    return np.array([_t_tail(float(a), float(d)) for a, d in zip(t.ravel(), df.ravel())]).reshape(t.shape)


def _t_tail(t: float, df: float) -> float:
    """P(|T| ≥ t), t ≥ 0: the regularised incomplete beta I_x(df/2, 1/2) at x = df / (df + t²)."""
    if math.isnan(t) or math.isnan(df) or df <= 0:
        return math.nan
    if t == math.inf:
        return 0.0
    if df == math.inf:
        return math.erfc(t / math.sqrt(2.0))
    return _betai(df / 2, 0.5, df / (df + t * t), t * t / (df + t * t))


def _betai(a: float, b: float, x: float, y: float) -> float:
    """I_x(a, b) with y = 1 − x given exactly (Numerical Recipes §6.4: the continued fraction on the side it converges)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_x = math.log1p(-y) if y < 0.5 else math.log(x)  # x near 1: from y, which is exact
    log_y = math.log1p(-x) if x < 0.5 else math.log(y)
    front = math.exp(a * log_x + b * log_y - _lbeta(a, b))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, y) / b


def _lbeta(a: float, b: float) -> float:
    """log B(a, b); for b = ½ and a large, log Γ(a) − log Γ(a + ½) by its asymptotic series (the difference of two
    lgamma values of 10¹³ would keep only three digits)."""
    big = max(a, b)
    if min(a, b) == 0.5 and big > 1e4:
        return math.lgamma(0.5) - 0.5 * math.log(big) + 1 / (8 * big) - 1 / (192 * big ** 3)
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _betacf(a: float, b: float, x: float) -> float:
    """The incomplete beta's continued fraction by the modified Lentz method."""
    tiny = 1e-300

    def nz(v: float) -> float:
        return v if abs(v) >= tiny else tiny

    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 / nz(1.0 - qab * x / qap)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 / nz(1.0 + aa * d)
        c = nz(1.0 + aa / c)
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 / nz(1.0 + aa * d)
        c = nz(1.0 + aa / c)
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-16:
            break
    return h


def _rate(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, k / np.where(n > 0, n, 1.0), 0.0)


def _xlogy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x·log y with 0·log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, x * np.log(np.where(y > 0, y, 1.0)), 0.0)


def _loglik(k: np.ndarray, n: np.ndarray, rate: np.ndarray, family: str) -> np.ndarray:
    """The log-likelihood of `k` events in `n` tokens at `rate`, up to terms that cancel in the deviance."""
    if family == "binomial":
        return _xlogy(k, rate) + _xlogy(n - k, 1 - rate)
    return _xlogy(k, rate) - n * rate


def _scatter(k: np.ndarray, n: np.ndarray, family: str) -> float:
    """The over-dispersion of a segment's step-to-step differences (≥ 1), robust to a level shift inside it: the
    squared MAD-scale of consecutive rate differences over their binomial / Poisson standard error."""
    total = float(n.sum())
    rate = float(k.sum()) / total if total > 0 else 0.0
    scale = rate * (1 - rate) if family == "binomial" else rate
    if len(k) < 3 or scale <= 0 or not (n > 0).all():
        return 1.0
    z = np.diff(k / n) / np.sqrt(scale * (1 / n[1:] + 1 / n[:-1]))
    return max(1.0, (1.4826 * float(np.median(np.abs(z - np.median(z))))) ** 2)


def _dispersion(k: np.ndarray, n: np.ndarray, ks: np.ndarray, rate: np.ndarray, family: str, prior: float,
                left: bool) -> tuple[np.ndarray, np.ndarray]:
    """(over-dispersion φ ≥ 1, its degrees of freedom) of the steps on one side of each k around that side's rate:
    Pearson χ² / (steps − 1), moderated towards the segment's robust scatter `prior` by CHANGE_POINT_PRIOR_DF
    pseudo-steps."""
    m = len(k)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv_n = np.where(n > 0, 1 / np.where(n > 0, n, 1.0), 0.0)
    # Σ (k − n·rate)² / n = Σ k²/n − 2·rate·Σ k + rate²·Σ n, from cumulative sums on the side
    a2_l, a2_r = _sides(k * k * inv_n, ks)
    a1_l, a1_r = _sides(k, ks)
    a0_l, a0_r = _sides(n, ks)
    a2, a1, a0 = (a2_l, a1_l, a0_l) if left else (a2_r, a1_r, a0_r)
    steps = ks.astype(np.float64) if left else (m - ks).astype(np.float64)
    scale = rate * (1 - rate) if family == "binomial" else rate
    with np.errstate(divide="ignore", invalid="ignore"):
        chi2 = np.where(scale > 0, np.maximum(a2 - 2 * rate * a1 + rate**2 * a0, 0.0) / np.where(scale > 0, scale, 1.0), 0.0)
    nu = CHANGE_POINT_PRIOR_DF
    df = nu + steps - 1
    return np.maximum((nu * prior + chi2) / df, 1.0), df

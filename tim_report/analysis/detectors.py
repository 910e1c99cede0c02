"""The diagnosis's detectors: each looks for one known fault and returns a finding, or None.

Every detector is a pure function of the valid tokens (`Tokens`), vectorised, and only fires when
its signal is both large (an effect-size threshold) and significant (a z-score with cluster-robust
standard errors, clusters = sequences, and a minimum count), so clean bf16 / fp16 noise does not
trigger it on small batches. Thresholds live in `config.DiagnosisThresholds` beside their reasons.
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import findings
from ..catalogue.numbers import plain
from ..config import DETECTOR_MAX_TOKENS, TEMPERATURE_FIT_COVERAGE, DiagnosisThresholds
from . import kept
from .breakdowns import length_growth
from .lag.findings import lag0_only
from .registry import Scene, detector
from .stats import cluster_mean_se, dot, exp_or_inf, pearson, run_starts
from .tokens import Tokens


def _slope(x: np.ndarray, y: np.ndarray, seq: np.ndarray) -> tuple[float, float, float]:
    """OLS slope of y on x, its cluster-robust SE (clusters = sequences, `seq` sorted) and R².

    Written with dot products and per-sequence sums of raw moments, so it needs one scratch array
    rather than the half-dozen that centring each array would allocate.
    """
    n = x.shape[0]
    mx, my = float(x.mean()), float(y.mean())
    sxx = dot(x, x) - n * mx * mx
    if sxx <= 0:
        return 0.0, float("inf"), 0.0
    sxy = dot(x, y) - n * mx * my
    syy = dot(y, y) - n * my * my
    b = sxy / sxx
    # per sequence: Σ xc·e = Σ xc·yc − b·Σ xc², from sums of x, y, xy, x² and the count
    starts = run_starts(seq)
    cnt = np.diff(np.append(starts, n)).astype(np.float64)
    sx, sy = np.add.reduceat(x, starts), np.add.reduceat(y, starts)
    buf = np.multiply(x, y)
    sxy_g = np.add.reduceat(buf, starts)
    np.multiply(x, x, out=buf)
    sxx_g = np.add.reduceat(buf, starts)
    del buf
    cxy = sxy_g - mx * sy - my * sx + cnt * mx * my
    cxx = sxx_g - 2 * mx * sx + cnt * mx * mx
    sums = cxy - b * cxx
    g = starts.shape[0]
    var = dot(sums, sums) * (g / (g - 1) if g > 1 else 1.0) / sxx ** 2
    r2 = 1.0 - (syy - b * sxy) / syy if syy > 0 else 0.0
    return b, math.sqrt(max(var, 0.0)), r2


def _thin(idx: np.ndarray, limit: int) -> np.ndarray:
    """An even, order-preserving subsample of at most `limit` entries (detectors need power, not all 16M tokens)."""
    if idx.shape[0] <= limit:
        return idx
    return idx[:: -(-idx.shape[0] // limit)]


def _neighbour_pairs(tok: Tokens, step: int = 1) -> np.ndarray:
    """i such that valid tokens i and i+1 are adjacent positions of the same sequence (every `step`-th i)."""
    i = np.arange(0, tok.n - 1, step)
    same = tok.seq[1:tok.n:step] == tok.seq[0:tok.n - 1:step]  # strided views: seq[i + 1] == seq[i]
    if tok.valid_index is not None:
        same &= tok.valid_index[1:tok.n:step] == tok.valid_index[0:tok.n - 1:step] + 1
    return i[same]


# ---------------------------------------------------------------- detectors


def detect_shift(tok: Tokens, dt: DiagnosisThresholds) -> dict | None:
    """trainer[t] agrees better with rollout[t+1] (or rollout[t−1]) than with rollout[t]."""
    step = max(1, -(-(tok.n - 1) // DETECTOR_MAX_TOKENS))  # an even subsample of at most 2M candidate pairs
    i = _neighbour_pairs(tok, step)
    if i.shape[0] < dt.min_tokens:
        return None
    best = None
    seq = tok.seq[i]  # a pair's two tokens are of one sequence: the clusters of both directions
    starts = run_starts(seq)
    # lead: trainer[t] vs rollout[t+1], over t = i; lag: trainer[t] vs rollout[t−1], over t = i+1
    for name, t, other in (("next", i, i + 1), ("previous", i + 1, i)):
        same = tok.abs_delta[t]  # |trainer[t] − rollout[t]|
        shifted = np.abs(tok.trainer[t] - tok.rollout[other])
        m_same, m_shift = float(same.mean()), float(shifted.mean())
        diff_mean, diff_se = cluster_mean_se(same - shifted, seq, starts)
        z = diff_mean / diff_se if diff_se > 0 else (math.inf if diff_mean > 0 else 0.0)
        if m_shift < dt.shift_ratio * m_same and z >= dt.z and (best is None or m_shift < best[2]):
            best = (name, m_same, m_shift, z, int(t.shape[0]))
    if best is None:
        return None
    name, m_same, m_shift, z, n = best
    return findings.make(
        "shift", {"mean_abs_diff_same_position": m_same, "mean_abs_diff_shifted": m_shift,
                  "shift": 1 if name == "next" else -1, "ratio": m_shift / m_same if m_same > 0 else 0.0, "z": z,
                  "pairs": n, "every_nth_pair": step, "threshold_ratio": dt.shift_ratio}, dt)


def declared_processing(meta: dict) -> str | None:
    """'top_p=0.9, top_k=50' when the batch's meta says its rollout log-probs are processed and truncated
    (what `tim-report capture` records in meta['sampling']), else None."""
    s = meta.get("sampling") if isinstance(meta, dict) else None
    if not isinstance(s, dict) or s.get("logprobs") != "processed" or not s.get("truncated"):
        return None
    parts = [f"{k}={plain(s[k])}" for k in ("top_p", "top_k", "min_p") if isinstance(s.get(k), (int, float))
             and not (k == "top_p" and s[k] >= 1) and not (k in ("top_k", "min_p") and s[k] <= 0)]
    return ", ".join(parts) or "truncated sampling"


def kept_mass_floor(meta: dict, dt: DiagnosisThresholds) -> float | None:
    """The lowest mean δ declared top-p sampling can make: top-p keeps at least `top_p` of the sampler's mass, so
    log S ≥ log top_p, less the precision's noise; None without a declared top-p (top-k alone has no floor)."""
    s = meta.get("sampling") if isinstance(meta, dict) else None
    top_p = s.get("top_p") if isinstance(s, dict) else None
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p < 1:
        return None
    return math.log(top_p) - dt.noise_abs_delta_max


def detect_processed(tok: Tokens, dt: DiagnosisThresholds, corr: float | None, declared: str | None = None,
                     kept: dict | None = None, floor: float | None = None) -> dict | None:
    """Rollout log-probs renormalised after top-p / top-k: δ = log(kept mass) ≤ 0 on every token.

    With the trainer's mass on the recorded kept sets (`kept`, analysis/kept.py) the kept mass is measured: the finding
    is there when it is significantly below 1. Without it, a batch that declares processed, truncated rollout log-probs
    (`declared`, from meta['sampling']) is decided by the data: δ significantly negative both in sign and in mean (and
    no lower than the declared top-p allows, `floor`); a batch that declares nothing needs rollout ≥ trainer on nearly
    every token (`processed_negative_share`). Declared or recorded, the finding is `info`: the mismatch is explained
    and expected, not a bug in the pipeline."""
    if corr is not None and corr < dt.systematic_corr_max:
        return None
    nonzero = tok.rollout != 0.0
    every = bool(nonzero.all())  # the usual case: no exact-zero rollout log-prob, no subset to make
    moved = nonzero & (tok.abs_delta > dt.identical_atol)
    n = int(np.count_nonzero(moved))
    measured = kept is not None and kept.get("mass_tokens", 0) >= dt.min_tokens
    if n < dt.min_tokens and not measured:
        return None
    share = np.count_nonzero(moved & (tok.delta < 0)) / n if n else 0.0
    z_sign = (share - 0.5) / (0.5 / math.sqrt(n)) if n else 0.0
    if every:
        mean, se = tok.mean_se_of("delta")
    else:
        mean, se = cluster_mean_se(tok.delta[nonzero], tok.seq[nonzero]) if nonzero.any() else (0.0, 0.0)
    if measured:
        log_mass, log_se = kept["log_mass_mean"], kept["log_mass_se"]  # type: ignore[index]
        if not (log_mass < -dt.identical_atol and log_se > 0 and -log_mass / log_se >= dt.z):
            return None
    elif declared is not None:
        if z_sign < dt.z or not (se > 0 and -mean / se >= dt.z) or (floor is not None and mean + 2 * se < floor):
            return None
    elif share < dt.processed_negative_share or z_sign < dt.z or not (se > 0 and -mean / se >= dt.z):
        return None
    zeros_below = 0 if every else int(((tok.rollout == 0.0) & (tok.trainer < -1e-4)).sum())
    evidence = {"negative_delta_share": share, "tokens_compared": n, "mean_delta": mean, "mean_delta_se": se,
                "rollout_exact_zero_trainer_below": zeros_below, "rollout_exact_zero_share": 1.0 - np.count_nonzero(nonzero) / tok.n,
                "min_delta": float(tok.delta.min()), "implied_min_kept_mass": float(math.exp(tok.delta.min())),
                "kept_mass": math.exp(kept["log_mass_mean"] if measured else min(mean, 0.0)),  # type: ignore[index]
                "kept_mass_measured": measured, "threshold_negative_share": dt.processed_negative_share,
                "declared_in_meta": declared is not None or measured}
    if measured:
        k = kept["kept"]  # type: ignore[index]
        evidence.update(kept_mass_min=kept["mass_min"], renormalised_kl_k3=k["kl_k3"],  # type: ignore[index]
                        renormalised_abs_delta_mean=k["mean_abs_delta"], renormalised_within_noise=k["within_noise"])
    return findings.make("processed_logprobs", evidence, dt, declared=declared or "kept sets recorded")


def _log_mean_exp(x: np.ndarray) -> float:
    top = float(x.max())
    return top + math.log(float(np.mean(np.exp(x - top))))


def sampler_side(tok: Tokens, dt: DiagnosisThresholds, keep: np.ndarray | None = None) -> tuple[str | None, float, float]:
    """Which side's log-probs are those of the distribution the tokens were sampled from, and the two log-means.

    For tokens drawn from q, E_q[p/q] = 1 for any p: the mean importance ratio is 1 when the rollout side is the
    sampler's (E[r] = 1) and the mean inverse ratio when the trainer side is (E[1/r] = 1), whatever the other side
    scores. The side whose log-mean is near 0 while the other's is well away from it is the sampler's; the other
    side is the one that scores something else (None when neither or both are near 0)."""
    if keep is None or keep.all():  # an even subsample of at most DETECTOR_MAX_TOKENS: the means need no more
        log_r = tok.log_r[:: max(1, -(-tok.n // DETECTOR_MAX_TOKENS))]
    else:
        log_r = tok.log_r[_thin(np.flatnonzero(keep), DETECTOR_MAX_TOKENS)]
    if log_r.shape[0] < dt.min_tokens:
        return None, 0.0, 0.0
    fwd, inv = _log_mean_exp(log_r), _log_mean_exp(-log_r)
    near, far = sorted((abs(fwd), abs(inv)))
    if near > max(dt.sampler_log_mean_max, dt.sampler_relative_max * far) \
            or far < dt.sampler_far_factor * max(near, dt.sampler_log_mean_floor):
        return None, fwd, inv
    return ("rollout" if abs(fwd) < abs(inv) else "trainer"), fwd, inv


def detect_temperature(tok: Tokens, dt: DiagnosisThresholds, corr: float | None,
                       keep: np.ndarray | None = None, told: tuple[str | None, float, float] = (None, 0.0, 0.0)) -> dict | None:
    """The non-sampler side's log-prob regressed on the sampler side's has slope T_rollout/T_trainer (or its inverse)
    instead of ≈ 1 (over `keep` tokens; `told` is `sampler_side`'s answer: fitted on the rollout when unknown)."""
    sampler, log_mean_ratio, log_mean_inverse = told
    keep = np.ones(tok.n, bool) if keep is None else keep
    n = int(keep.sum())
    if n < dt.min_tokens or (corr is not None and corr < dt.systematic_corr_max):
        return None
    if keep.all():
        idx = np.arange(0, tok.n, max(1, -(-tok.n // DETECTOR_MAX_TOKENS)))
    else:
        idx = _thin(np.flatnonzero(keep), DETECTOR_MAX_TOKENS)
    x = tok.trainer if sampler == "trainer" else tok.rollout
    slope, se, r2 = _slope(x[idx], tok.delta[idx], tok.seq[idx])
    if abs(slope) < dt.temperature_slope_min or not (se > 0 and abs(slope) / se >= dt.z):
        return None
    # trainer = (1 + slope)·rollout + c, or rollout = (1 − slope)·trainer + c: the ratio T_rollout / T_trainer
    ratio = 1.0 + slope if sampler != "trainer" else (1.0 / (1.0 - slope) if slope < 1.0 else math.inf)
    if not 0.0 < ratio < math.inf:
        return None  # one side does not grow with the other at all (a constant side): no temperature does that
    # the fit is shrunk towards 1 (the per-position log Z_T correlates with the log-prob): it recovers between
    # TEMPERATURE_FIT_COVERAGE and all of the true log-ratio, so the truth lies between the fit and `far`
    coverage = TEMPERATURE_FIT_COVERAGE[sampler is not None]
    far = math.exp(math.log(ratio) / coverage)
    return findings.make(
        "temperature", {"slope": slope, "slope_se": se, "r2": r2, "temperature_ratio": ratio, "temperature_ratio_far": far,
                        "inverse_ratio": 1.0 / ratio, "fitted_on_trainer": sampler == "trainer", "fit_coverage": coverage,
                        "trainer_off": None if sampler is None else sampler == "rollout",
                        "log_mean_ratio": log_mean_ratio, "log_mean_inverse_ratio": log_mean_inverse, "tokens": n,
                        "tokens_fitted": int(idx.shape[0]), "threshold_slope": dt.temperature_slope_min}, dt,
        sampler_side=sampler)


def detect_dummy_zero(tok: Tokens, dt: DiagnosisThresholds) -> tuple[dict | None, np.ndarray]:
    """Exact 0.0 log-probs inside the mask on one side where the other gives p < 1/2: a placeholder, or a side that
    never scored (the side with more such tokens is named)."""
    side, hit, n = "rollout", np.zeros(tok.n, bool), 0
    for name, zeros, other in (("rollout", tok.rollout, tok.trainer), ("trainer", tok.trainer, tok.rollout)):
        found = (zeros == 0.0) & (other < dt.dummy_trainer_logp_max)
        count = int(found.sum())
        if count > n:
            side, hit, n = name, found, count
    if n == 0:
        return None, hit
    zeros, other = (tok.rollout, tok.trainer) if side == "rollout" else (tok.trainer, tok.rollout)
    i = _neighbour_pairs(tok)
    in_runs = np.zeros(tok.n, bool)
    pair_hit = hit[i] & hit[i + 1]
    in_runs[i[pair_hit]] = True
    in_runs[i[pair_hit] + 1] = True
    seqs = int(np.unique(tok.seq[hit]).shape[0])
    abs_d = tok.abs_delta
    return findings.make(
        "dummy_zero", {"trainer_side": side == "trainer", "tokens": n, "token_share": n / tok.n, "sequences": seqs,
                       "in_runs_share": float(in_runs[hit].mean()), "mean_other_side_logp": float(other[hit].mean()),
                       "abs_delta_share": float(abs_d[hit].sum() / abs_d.sum()) if abs_d.sum() > 0 else 0.0,
                       "exact_zero_tokens": int((zeros == 0.0).sum()), "all_exact_zero": bool((zeros == 0.0).all()),
                       "threshold_other_side_logp": dt.dummy_trainer_logp_max}, dt, side=side), hit


def detect_one_side_broken(tok: Tokens, dt: DiagnosisThresholds, corr: float | None, keep: np.ndarray,
                           explained: bool, bias: tuple[float, float] | None = None,
                           sampler: tuple[str | None, float, float] = (None, 0.0, 0.0)) -> dict | None:
    """One side's token-level perplexity many times the other's on the same tokens, and which side is broken: a
    constant side (it scored nothing), else the side that is not the sampler's (`sampler_side`), else the side with
    the higher perplexity (scoring another model raises the perplexity of tokens the right one sampled)."""
    if keep.sum() < dt.min_tokens:
        return None
    if keep.all():
        ro, tr = tok.rollout, tok.trainer
        d_mean, d_se = bias if bias is not None else cluster_mean_se(tok.delta, tok.seq)
    else:  # correlation without the tokens another finding already explains (dummy zeros)
        ro, tr = tok.rollout[keep], tok.trainer[keep]
        corr = pearson(ro, tr)
        d_mean, d_se = cluster_mean_se(tok.delta[keep], tok.seq[keep])
    ppl_ro, ppl_tr = exp_or_inf(-float(ro.mean())), exp_or_inf(-float(tr.mean()))
    ratio = exp_or_inf(abs(d_mean))
    low_corr = corr is not None and corr < dt.systematic_corr_max
    significant = d_se > 0 and abs(d_mean) / d_se >= dt.z
    if not ((ratio >= dt.ppl_ratio_warn and significant) or low_corr):
        return None
    higher = "trainer" if ppl_tr > ppl_ro else "rollout"
    constant = [name for name, side in (("rollout", ro), ("trainer", tr)) if side.shape[0] and side.min() == side.max()]
    if len(constant) == 1:
        broken, basis = constant[0], "constant"
    elif sampler[0] is not None:
        broken, basis = ("trainer" if sampler[0] == "rollout" else "rollout"), "sampler"
    else:
        broken, basis = higher, "perplexity"
    evidence = {"ppl_rollout": ppl_ro, "ppl_trainer": ppl_tr, "ppl_ratio": ratio, "mean_delta": d_mean,
                "mean_delta_se": d_se, "corr_logp": corr, "tokens": int(keep.sum()), "trainer_broken": broken == "trainer",
                "constant_value": float(ro[0] if broken == "rollout" else tr[0]) if basis == "constant" else None,
                "log_mean_ratio": sampler[1], "log_mean_inverse_ratio": sampler[2],
                "threshold_ppl_ratio_warn": dt.ppl_ratio_warn, "threshold_ppl_ratio_error": dt.ppl_ratio_error,
                "threshold_corr": dt.systematic_corr_max}
    found = findings.make("one_side_broken", evidence, dt, higher=higher, broken_side=broken, broken_side_basis=basis)
    if explained and found["severity"] != "error":
        return None  # a temperature / processed-log-probs finding already explains a moderate gap
    return found


def detect_low_prob_tail(tok: Tokens, dt: DiagnosisThresholds) -> dict | None:
    """Mismatch concentrated on low-probability tokens (informational)."""
    tail = tok.rollout < math.log(dt.tail_p)
    k3 = tok.k3()
    tot = float(k3.sum())
    in_tail = np.count_nonzero(tail)
    if tot <= 0 or in_tail == 0:
        return None
    token_share = in_tail / tok.n
    if token_share > dt.tail_token_share_max:
        return None
    k3_share = float(k3[tail].sum() / tot)
    if k3_share < dt.tail_k3_share:
        return None
    abs_d = tok.abs_delta
    abs_share = float(abs_d[tail].sum() / abs_d.sum())
    return findings.make(
        "low_prob_tail", {"tail_p": dt.tail_p, "token_share": token_share, "k3_share": k3_share, "abs_delta_share": abs_share,
                          "abs_delta_mean_tail": float(abs_d[tail].mean()),
                          "abs_delta_mean_rest": float(abs_d[~tail].mean()) if (~tail).any() else 0.0}, dt)


def detect_drift(tok: Tokens, dt: DiagnosisThresholds, bias: float, bias_se: float,
                 explained_by: str | None = None) -> dict | None:
    """|Σδ| grows faster than √length: accumulation, not a random walk.

    `explained_by` names a finding that already accounts for a signed bias (processed log-probs,
    temperature, a broken side); the accumulation is then a consequence and only `info`."""
    g = length_growth(tok)
    b, se = g.get("exponent"), g.get("exponent_se")
    if b is None or se is None or g["sequences_used"] < dt.min_drift_sequences or not se > 0:
        return None
    z = (b - 0.5) / se
    if b < dt.drift_exponent_min or z < dt.drift_z:
        return None
    lengths = tok.counts[tok.present]
    return findings.make(
        "drift_with_length", {"exponent": b, "exponent_se": se, "z_vs_random_walk": z, "sequences": g["sequences_used"],
                              "bias_per_token": bias, "bias_se": bias_se, "expected_seq_log_ratio_at_p90_length":
                              bias * float(np.percentile(lengths, 90)), "threshold_exponent": dt.drift_exponent_min,
                              "threshold_bias": dt.noise_kl_max, "explained_by_other_finding": explained_by is not None},
        dt, explained_by=explained_by)


# ---------------------------------------------------------------- registered: what each detector reads of the scene


def _placeholders(s: Scene) -> tuple[dict | None, np.ndarray]:
    """The placeholder-zero finding and its tokens: the detectors after it read the batch without them."""
    return detect_dummy_zero(s.tok, s.dt)


def _kept(s: Scene) -> np.ndarray:
    """[V] the tokens that are not placeholder zeros."""
    return ~s.once(_placeholders)[1]


def _sampler(s: Scene) -> tuple[str | None, float, float]:
    return sampler_side(s.tok, s.dt, s.once(_kept))  # whose log-probs the tokens were drawn from


def rest(s: Scene) -> Tokens:
    """The valid tokens without placeholder zeros (they would dominate per-sequence sums)."""
    return s.tok.subset(s.once(_kept))


def numeric_rest(s: Scene) -> Tokens:
    """`rest` without the tokens of a known lag ≥ 1 where the batch carries any (lag.findings.lag0_only): what the
    detectors of where the mismatch sits read, since the lag's own mismatch sits where the policy learns."""
    lag0 = s.once(lag0_only)
    return s.once(rest) if lag0 is None else s.tok.subset(~s.once(_placeholders)[1] & lag0)


def _rest_bias(s: Scene) -> tuple[float, float]:
    r = s.once(rest)
    if r is not s.tok and r.n:
        return r.mean_se_of("delta")
    return s.metrics["bias"], s.metrics.get("bias_se") or 0.0


@detector("shift", whole_batch=True, decorrelates=True)
def _shift(s: Scene) -> dict | None:
    return detect_shift(s.tok, s.dt)


@detector("dummy_zero", decorrelates=True)
def _dummy_zero(s: Scene) -> dict | None:
    found = s.once(_placeholders)[0]
    if found and "shift" in s.found and found["evidence"]["trainer_side"]:
        return None  # a shifted trainer's exact zeros are its confident neighbours' log-probs, not placeholders
    return found


@detector("processed_logprobs", whole_batch=True)
def _processed(s: Scene) -> dict | None:
    if s.batch.meta.get("trainer_support") == "kept":
        return None  # the trainer renormalised over the kept sets itself: δ is already the ratio over the kept set
    sets = s.once(kept.measured)
    recorded = "kept sets recorded" if sets and sets.get("with_set") else None  # the sampler truncated: it says so itself
    return detect_processed(s.tok, s.dt, s.metrics.get("corr_logp"), declared_processing(s.batch.meta) or recorded,
                            sets, kept_mass_floor(s.batch.meta, s.dt))


def _renormalised(s: Scene) -> Tokens | None:
    return kept.renormalised(s.batch, s.tok)


@detector("temperature", whole_batch=True)
def _temperature(s: Scene) -> dict | None:
    tok = s.once(_renormalised)  # with the trainer's mass on every kept set: the engines' own mismatch, log S taken out
    if tok is None and "processed_logprobs" in s.found:
        return None  # truncation tilts δ too, and nothing says by how much
    if tok is not None:
        keep = s.once(_kept)
        return detect_temperature(tok, s.dt, pearson(tok.rollout, tok.trainer), keep, sampler_side(tok, s.dt, keep))
    return detect_temperature(s.tok, s.dt, s.metrics.get("corr_logp"), s.once(_kept), s.once(_sampler))


@detector("one_side_broken", whole_batch=True)
def _one_side_broken(s: Scene) -> dict | None:
    if "shift" in s.found:
        return None  # a shifted trainer decorrelates the log-probs by itself: no separate "broken side" claim then
    return detect_one_side_broken(s.tok, s.dt, s.metrics.get("corr_logp"), s.once(_kept),
                                  explained="processed_logprobs" in s.found or "temperature" in s.found,
                                  bias=(s.metrics["bias"], s.metrics.get("bias_se") or 0.0), sampler=s.once(_sampler))


@detector("drift_with_length")
def _drift(s: Scene) -> dict | None:
    r = s.once(numeric_rest)
    if not r.n:
        return None
    cause = next((i for i in ("processed_logprobs", "temperature", "one_side_broken") if i in s.found), None)
    bias, bias_se = s.once(_rest_bias)
    return detect_drift(r, s.dt, bias, bias_se, cause)


@detector("low_prob_tail")
def _low_prob_tail(s: Scene) -> dict | None:
    return detect_low_prob_tail(s.tok, s.dt)

"""Summary metrics with their exact definitions (design §4).

Conventions: δ = trainer_logp − rollout_logp (nats), r = exp(δ) = p_train / p_rollout (δ clamped
to ±20 before exponentiating, as verl does). Token-mean = over all valid tokens of the batch;
seq-mean = mean over sequences of per-sequence values. Standard errors on token-means treat
sequences as clusters (tokens of one sequence are not independent), which is wider and more
honest than std/√T.
"""

from __future__ import annotations

import math

import numpy as np

from ..config import CONFIDENT_GAP, CONFIDENT_P, PERCENTILES, SAFETY_BOUND, Thresholds
from .distributions import abs_dp_histogram, ratio_histogram
from .stats import (
    dot,
    k3_per_token,
    kish_ess,
    mean_se,
    pearson,
    percentile_ladder,
    selection_wins,
    sorted_ladders,
    spearman,
    top_share,
)
from .tokens import Tokens

LADDERS = ("delta", "abs_delta", "k3", "abs_dp")  # the percentile ladders summary.json holds, in its order
FOLDS = {"abs_delta": np.abs, "k3": lambda d: k3_per_token(np.clip(d, -SAFETY_BOUND, SAFETY_BOUND))}  # ladders off δ's sort


def summary_metrics(tok: Tokens, th: Thresholds, ladders: tuple[str, ...] = LADDERS, pages: bool = True) -> dict:
    """The flat `metrics` object of summary.json, one family of metrics at a time.

    The per-token arrays several families read (|δ|, k3, per-sequence sums) are the batch's shared ones
    (`Tokens.once`); each family makes and drops its own other temporaries, so peak memory stays a small multiple
    of the batch (see benchmarks/bench_analyze.py). `check` asks for less (analysis.GATE): only the `ladders` named
    (none, or the |δ| one a history band reads), and without `pages` none of the numbers only pages and verl's
    section show (|Δp|, the probabilities' correlation, Spearman, perplexities, k2, χ² per sequence, top-1% mass).
    """
    seq_sum = tok.seq_sum_of("delta")[tok.present]
    m: dict = {"tokens": tok.n, "sequences": int(tok.present.sum()), "sequences_in_batch": tok.n_seqs}
    ladder, top = _ladders(tok, th, ladders, pages)
    _kl(tok, m, pages)
    _weights(tok, th, np.clip(seq_sum, -SAFETY_BOUND, SAFETY_BOUND), m, pages, top)
    _sizes(tok, th, m)
    for key, q in (("abs_delta_median", 50), ("abs_delta_p90", 90), ("abs_delta_p99", 99)):
        m[key] = ladder["abs_delta"][PERCENTILES.index(q)] if "abs_delta" in ladder else None
    _confident(tok, m)
    if pages:
        _perplexity_and_agreement(tok, m)
        _probabilities(tok, m, ladder, "abs_dp" in ladders)
    else:
        m["corr_logp"] = pearson(tok.rollout, tok.trainer)  # the diagnosis reads it
    m["seq_log_ratio_mean"], m["seq_log_ratio_mean_se"] = mean_se(seq_sum)
    m["seq_log_ratio_abs_max"] = float(np.abs(seq_sum).max())
    m["seq_log_ratio_abs_mean"], m["seq_log_ratio_abs_mean_se"] = mean_se(np.abs(seq_sum))
    m["percentiles"] = {"q": list(PERCENTILES), **{k: ladder[k] for k in LADDERS if k in ladder}}
    m["thresholds"] = {
        "ppo_clip": list(th.ppo_clip),
        "band_2x": [1 / th.band_2x, th.band_2x],
        "band_5x": [1 / th.band_5x, th.band_5x],
        "veto": th.veto,
        "log_ratio_clamp": SAFETY_BOUND,
    }
    return m


def _ladders(tok: Tokens, th: Thresholds, ladders: tuple[str, ...], pages: bool) -> tuple[dict[str, list[float]], float | None]:
    """The ladders of δ, |δ| and k3 asked for, and Σr of the largest 1% of ratios when the ladders were read off δ's
    sort (else None). Where sorting wins on this CPU (`selection_wins`) one sort of δ serves all three (|δ| and k3
    fall, then rise, with δ: `stats.sorted_ladders`), and the ratio chart's counts too; where selection wins each
    ladder is a selection of its own."""
    want = [k for k in ("delta", "abs_delta", "k3") if k in ladders]
    if not want:
        return {}, None
    if selection_wins(tok.n) or (len(want) == 1 and not pages):
        arrays = {"delta": lambda: tok.delta, "abs_delta": lambda: tok.abs_delta, "k3": tok.k3}
        return {k: percentile_ladder(arrays[k]()) for k in want}, None
    s = np.sort(tok.delta)
    signed, folded = sorted_ladders(s, {k: FOLDS[k] for k in want if k != "delta"})
    if pages:  # Tokens.once: the distributions' lane takes these counts rather than binning every token again
        tok.once("ratio_histogram", lambda: ratio_histogram(tok, th, s))
    top = float(np.exp(np.clip(s[tok.n - _top_k(tok.n):], -SAFETY_BOUND, SAFETY_BOUND)).sum())  # the largest δ, r
    return {**({"delta": signed} if "delta" in want else {}), **folded}, top


def _top_k(n: int) -> int:
    """How many tokens the top-1% mass counts."""
    return max(1, math.ceil(0.01 * n))


def _kl(tok: Tokens, m: dict, pages: bool) -> None:
    """bias, and the k1, k2, k3 estimates of KL(rollout ‖ trainer)."""
    m["bias"], m["bias_se"] = tok.mean_se_of("delta")
    m["kl_k1"], m["kl_k1_se"] = -m["bias"], m["bias_se"]  # token-mean(−δ)
    if pages:
        m["kl_k2"], m["kl_k2_se"] = tok.mean_se(0.5 * np.square(tok.delta))
    m["kl_k3"], m["kl_k3_se"] = tok.mean_se_of("k3")


def r_moments(tok: Tokens, r: np.ndarray | None = None) -> tuple[float, float]:
    """mean(r) and mean(r²) of the token ratios r = exp(log r), made once per batch (χ², ESS and verl's χ² read
    them); `r` when the caller already holds it."""
    def make() -> tuple[float, float]:
        w = np.exp(tok.log_r) if r is None else r
        return float(w.mean()), dot(w, w) / w.shape[0]
    return tok.once("r_moments", make)


def _weights(tok: Tokens, th: Thresholds, seq_log_r: np.ndarray, m: dict, pages: bool, top: float | None) -> None:
    """What the ratios do as importance weights: χ², phantom clipping, ESS, concentration.

    χ² is that of the self-normalised weights, mean(r²) / mean(r)² − 1: never negative (Cauchy-Schwarz),
    and 1/ESS − 1. verl's chi2 omits the normalisation (mean(r²) − 1), so on a finite batch whose mean r
    is below 1 it goes negative; its value is in the `verl` section. Standard errors by the delta method.
    The token ratios are bounded (|log r| ≤ SAFETY_BOUND), so r and r² are summed as they are; the ESS is
    mean(r)² / mean(r²), the same number in one pass less. `top`: Σr of the largest 1%, when the ladders sorted δ.
    """
    r = np.exp(tok.log_r)
    b, a = r_moments(tok, r)
    m["chi2_token"] = max(a / (b * b) - 1.0, 0.0)
    m["chi2_token_se"] = _chi2_se(tok, r, a, b) if pages else None  # the gate reads no SE of it
    low, high = th.ppo_clip
    m["phantom_clip"] = float(np.count_nonzero((r < low) | (r > high)) / tok.n)
    m["ess"] = b * b / a
    if pages:
        seq_w = np.exp(seq_log_r - float(seq_log_r.max()))  # scale-free: the normalised χ² does not see a common factor
        m["chi2_seq"], m["chi2_seq_se"] = _chi2(seq_w, mean_se)
    m["ess_seq"] = kish_ess(seq_log_r)
    if pages:  # the largest ratios are those of the largest δ (clamped): read off δ's sort where there is one
        m["top1pct_mass"] = top / (b * tok.n) if top is not None else top_share(r, _top_k(tok.n), b * tok.n)


def _chi2_se(tok: Tokens, r: np.ndarray, a: float, b: float) -> float:
    """The token χ²'s cluster-robust standard error: that of the mean of the influence r²/b² − 2a·r/b³, from the
    per-sequence sums of r and r² (no influence array of its own)."""
    s1 = np.add.reduceat(r, tok.starts)
    s2 = np.add.reduceat(np.square(r), tok.starts)
    c = 2.0 * a / b ** 3
    sums = s2 / (b * b) - c * s1
    mean = float(sums.sum()) / tok.n
    g = tok.starts.shape[0]
    if tok.n < 2 or g < 2:
        return _chi2(r, tok.mean_se)[1] or float("nan")
    resid = sums - mean * tok.counts[tok.present]
    return math.sqrt(dot(resid, resid) * g / (g - 1)) / tok.n


def _chi2(w: np.ndarray, mean_se_of) -> tuple[float, float | None]:
    """mean(w²)/mean(w)² − 1 and its standard error, linearised: the SE of the mean of
    w²/b² − 2a·w/b³ (a = mean w², b = mean w), with the same (cluster-robust or plain) estimator (None: no SE)."""
    a, b = dot(w, w) / w.shape[0], float(w.mean())
    chi2 = max(a / (b * b) - 1.0, 0.0)
    if mean_se_of is None:
        return chi2, None
    influence = np.square(w)
    influence *= 1.0 / (b * b)
    influence -= (2.0 * a / b ** 3) * w
    return chi2, mean_se_of(influence)[1]


def _sizes(tok: Tokens, th: Thresholds, m: dict) -> None:
    """How big |δ| is: its mean and maximum, the shares outside verl's bands, and the veto."""
    abs_d = tok.abs_delta
    m["abs_delta_mean"], m["abs_delta_mean_se"] = tok.mean_se_of("abs_delta")
    m["outside_2x"] = float(np.count_nonzero(abs_d > math.log(th.band_2x)) / tok.n)
    m["outside_5x"] = float(np.count_nonzero(abs_d > math.log(th.band_5x)) / tok.n)
    m["abs_delta_max"] = float(abs_d.max())
    m["token_mult_prob_error"], m["token_mult_prob_error_se"] = tok.mean_se(np.exp(np.minimum(abs_d, SAFETY_BOUND)))
    vetoed = tok.delta < math.log(th.veto)
    m["veto_token_fraction"] = float(np.count_nonzero(vetoed) / tok.n)
    m["veto_seq_fraction"] = float((np.bincount(tok.seq[vetoed], minlength=tok.n_seqs)[tok.present] > 0).mean())


def _confident(tok: Tokens, m: dict) -> None:
    """Confident disagreements: tokens the engine sampled with p ≥ CONFIDENT_P that the trainer puts more than
    CONFIDENT_GAP nats lower (spliced or garbled tokens), counted and per token. The far-below tokens are few, so the
    probability is read on them alone."""
    low = np.flatnonzero(tok.delta < -CONFIDENT_GAP)
    m["confident_disagree"] = int(np.count_nonzero(tok.rollout[low] >= math.log(CONFIDENT_P)))
    m["confident_disagree_rate"] = m["confident_disagree"] / tok.n


def _perplexity_and_agreement(tok: Tokens, m: dict) -> None:
    """verl's per-sequence perplexities, and the Pearson and Spearman correlations of the log-probs."""
    mean_ro = tok.seq_mean_of("rollout")
    mean_tr = tok.seq_mean_of("trainer")
    m["ppl_rollout"], m["ppl_rollout_se"] = mean_se(np.exp(-mean_ro))
    m["ppl_trainer"], m["ppl_trainer_se"] = mean_se(np.exp(-mean_tr))
    m["log_ppl_diff"], m["log_ppl_diff_se"] = mean_se(mean_ro - mean_tr)
    m["corr_logp"] = pearson(tok.rollout, tok.trainer)
    m["spearman_logp"], m["spearman_logp_tokens"] = spearman(tok.rollout, tok.trainer)


def _probabilities(tok: Tokens, m: dict, ladder: dict, abs_dp_ladder: bool) -> None:
    """|Δp| = |p_train − p_rollout| (verl's rollout_probs_diff) and the correlation of the probabilities."""
    p_ro, p_tr = np.exp(tok.rollout), np.exp(tok.trainer)
    m["corr_prob"] = pearson(p_ro, p_tr)
    p_tr -= p_ro
    abs_dp = np.abs(p_tr, out=p_tr)
    del p_ro
    m["abs_dp_mean"], m["abs_dp_mean_se"] = tok.mean_se(abs_dp)
    m["abs_dp_max"] = float(abs_dp.max())
    m["abs_dp_std"] = float(abs_dp.std(ddof=1)) if tok.n > 1 else 0.0
    # the chart's counts from these values (Tokens.once: the distributions' lane takes them), then the ladder, which
    # reorders them: sorted (the counts are then read off the sort) or partitioned, whichever is faster on this CPU
    in_order = not selection_wins(tok.n)
    if in_order:
        abs_dp.sort()
    tok.once("abs_dp_histogram", lambda: abs_dp_histogram(tok, abs_dp, in_order))
    if abs_dp_ladder:
        ladder["abs_dp"] = percentile_ladder(abs_dp, scratch=True, in_order=in_order)

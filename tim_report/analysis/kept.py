"""Kept sets: what the sampler's top-k / top-p / min-p kept of each token's distribution, and the ratio read both ways.

With truncated sampling the rollout's log-prob is renormalised over the token's kept set K (vLLM's
`processed_logprobs`), while a trainer that scores the full vocabulary does not renormalise. With the trainer's mass
on the kept set, S = Σ_{x ∈ K} π(x) (StepBatch.kept_log_mass = log S: `capture` computes it from the trainer's own
distribution; a framework that writes both its full and its renormalised score gives it as their difference):

    over the full vocabulary   δ   = log π(a) − log μ_K(a)          (what a trainer without replay computes)
    over the kept set          δ_K = log π(a) − log S − log μ_K(a)    (the trainer renormalised over K, as prime-rl
                                                                       and miles replay it)

so δ = δ_K + log S: truncation alone moves δ by log S ≤ 0 (the processed-log-probs finding reads it), and δ_K is the
engines' own mismatch, to be judged against the precision's noise band. The kept sets' sizes and the sampled tokens
that are not in their own kept set (a data problem: SkyRL #2083, vLLM's approximate top-k pivot) are counted here.
"""

from __future__ import annotations

import numpy as np

from ..catalogue import findings
from ..config import SAFETY_BOUND
from ..model import StepBatch
from .registry import Scene, detector
from .stats import cluster_mean_se, k3_per_token
from .tokens import Tokens


def sizes(batch: StepBatch, index: np.ndarray) -> np.ndarray | None:
    """[V] the kept-set size of each token at `index` (0: none recorded); None without kept sets."""
    if batch.kept_offsets is None:
        return None
    off = np.asarray(batch.kept_offsets, np.int64)
    return off[index + 1] - off[index]


def outside(batch: StepBatch, index: np.ndarray, size: np.ndarray) -> np.ndarray | None:
    """[V] the token has a kept set that does not hold the token itself; None without token ids or kept sets."""
    if batch.token_ids is None or batch.kept_ids is None or batch.kept_offsets is None:
        return None
    off = np.asarray(batch.kept_offsets, np.int64)
    ids = np.asarray(batch.kept_ids)
    owner = np.repeat(np.arange(index.shape[0]), size)  # each kept id of the tokens at `index`, by its token
    at = np.repeat(off[index] - np.concatenate([[0], np.cumsum(size)[:-1]]), size) + np.arange(owner.shape[0])
    found = np.zeros(index.shape[0], bool)
    found[owner[ids[at] == np.asarray(batch.token_ids)[index][owner]]] = True
    return (size > 0) & ~found


def masses(batch: StepBatch, tok: Tokens) -> np.ndarray | None:
    """[V] log S of each valid token (NaN where unknown); None when the batch carries none."""
    if batch.kept_log_mass is None:
        return None
    return np.asarray(batch.kept_log_mass, np.float64)[tok.index]


def _side_numbers(log_r: np.ndarray, seq: np.ndarray) -> dict:
    log_r = np.clip(log_r, -SAFETY_BOUND, SAFETY_BOUND)
    bias, bias_se = cluster_mean_se(log_r, seq)
    return {"kl_k3": float(k3_per_token(log_r).mean()), "mean_abs_delta": float(np.abs(log_r).mean()), "bias": bias,
            "bias_se": bias_se}


def kept_sets(batch: StepBatch, tok: Tokens, noise_kl_max: float, noise_abs_delta_max: float) -> dict | None:
    """The kept sets' sizes and the sampled tokens outside them, the trainer's mass on them, and the ratio over the
    full vocabulary against the ratio over the kept set (within the precision's noise ceilings or not); None when the
    batch carries neither kept sets nor masses."""
    size = sizes(batch, tok.index)
    log_s = masses(batch, tok)
    if size is None and log_s is None:
        return None
    out: dict = {"available": True, "tokens": tok.n, "trainer_support": str(batch.meta.get("trainer_support") or "full")}
    if size is not None:
        has = size > 0
        out.update(with_set=int(has.sum()), without_set=int((~has).sum()))
        if has.any():
            s = size[has]
            out.update(size_median=float(np.median(s)), size_mean=float(s.mean()), size_p90=float(np.quantile(s, 0.9)),
                       size_max=int(s.max()), singleton_share=float(np.mean(s == 1)))
        miss = outside(batch, tok.index, size)
        out["outside"] = None if miss is None else int(miss.sum())
        out["outside_share"] = None if miss is None or not has.any() else float(miss.sum() / has.sum())
    known = None if log_s is None else ~np.isnan(log_s)
    out["mass_tokens"] = 0 if known is None else int(known.sum())
    if log_s is not None and known is not None and known.any():
        ls, seq = log_s[known], tok.seq[known]
        log_mean, log_se = cluster_mean_se(ls, seq)
        mass = np.exp(ls)
        out.update(mass_mean=float(mass.mean()), mass_geo_mean=float(np.exp(log_mean)), mass_min=float(mass.min()),
                   mass_p10=float(np.quantile(mass, 0.1)), log_mass_mean=log_mean, log_mass_se=log_se)
        replayed = out["trainer_support"] == "kept"  # the trainer's log-probs are already renormalised over K
        base = tok.delta[known] + ls if replayed else tok.delta[known]
        full = _side_numbers(base, seq)
        kept = _side_numbers(base - ls, seq)
        out["full"], out["kept"] = full, kept
        out["kept"]["within_noise"] = bool(kept["kl_k3"] <= noise_kl_max and kept["mean_abs_delta"] <= noise_abs_delta_max)
        out["noise_kl_max"], out["noise_abs_delta_max"] = noise_kl_max, noise_abs_delta_max
    return out


def renormalised(batch: StepBatch, tok: Tokens) -> Tokens | None:
    """The valid tokens with the trainer renormalised over each kept set (trainer − log S), when every valid token's
    mass is known: the detectors of a one-sided transformation read the engines' own mismatch there, not truncation's."""
    log_s = masses(batch, tok)
    if log_s is None or np.isnan(log_s).any() or not tok.n or batch.meta.get("trainer_support") == "kept":
        return None
    delta = tok.delta - log_s
    log_r = np.clip(delta, -SAFETY_BOUND, SAFETY_BOUND)
    return Tokens(tok.rollout, tok.trainer - log_s, delta, log_r, tok.seq, tok.valid_index, tok.batch_offsets, tok.n_seqs)


def measured(s: Scene) -> dict | None:
    return kept_sets(s.batch, s.tok, s.dt.noise_kl_max, s.dt.noise_abs_delta_max)


@detector("sampled_outside_kept", beside=True, section=("kept_sets", measured))
def _outside(s: Scene) -> dict | None:
    """Sampled tokens missing from their own kept set: the trainer's replay of that set scores them −inf."""
    k = s.once(measured)
    if not k or not k.get("outside"):
        return None
    return findings.make("sampled_outside_kept", {"tokens": k["outside"], "share": k["outside_share"],
                                                  "tokens_with_set": k["with_set"],
                                                  "trainer_renormalised": k["trainer_support"] == "kept"}, s.dt)

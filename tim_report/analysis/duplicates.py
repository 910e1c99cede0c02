"""Identical completions in a group: copies the sampling settings do not allow (a seed shared across the group).

GRPO samples a group of completions per prompt and centres each reward on the group's mean: a group whose completions
are copies of one another has no reward spread and so no advantage (tt-metal #53077, torchtitan #3474: a seed shared
by the group). Two independent samples of the sampler's distribution q are the same sequence y with probability
Σ_y q(y)², which the batch itself estimates: E_{Y ~ q}[q(Y)] = Σ_y q(y)², and q(y_i) is the product of the sampler's
own (processed) token probabilities of completion i. So a group of n completions is expected to hold

    λ_g = C(n, 2) · mean_i q(y_i)        pairs of identical completions,

and the batch Σ_g λ_g. Observed pairs far above that (a Poisson upper tail below `DUPLICATE_P_MAX`) are copies the
sampling settings do not explain; a short, near-certain answer ("Yes.") repeated is what they do explain. q is taken
as the larger of the rollout's and the trainer's sequence probability, so a rollout side that is not the sampler's
never makes a repeat look less likely than it is.
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import findings
from ..config.sampling import DUPLICATE_P_MAX
from ..model import StepBatch
from .registry import Scene, detector


def _poisson_tail(k: int, lam: float) -> float:
    """P(X ≥ k) for X ~ Poisson(lam)."""
    if k <= 0:
        return 1.0
    if lam <= 0:
        return 0.0
    term = math.exp(-lam)
    below = term
    for i in range(1, k):
        term *= lam / i
        below += term
        if i > lam and term < 1e-17 * below:  # past the mode the terms only shrink: the rest cannot move the sum
            break
    return max(0.0, 1.0 - below)


def identical_completions(batch: StepBatch) -> dict | None:
    """Per group, the completions that copy another (same token ids), the pairs expected from the sampler's own
    probabilities, and the reward spread of the groups with copies; None without token ids or groups of two or more."""
    if batch.token_ids is None or batch.group is None or batch.n_seqs < 2:
        return None
    ids = np.asarray(batch.token_ids)
    off = batch.offsets
    seq = batch.seq_index()
    log_q = np.maximum(np.bincount(seq, weights=np.nan_to_num(batch.rollout_logp, nan=-np.inf, posinf=0.0),
                                   minlength=batch.n_seqs),
                       np.bincount(seq, weights=np.nan_to_num(batch.trainer_logp, nan=-np.inf, posinf=0.0),
                                   minlength=batch.n_seqs))
    names, group = np.unique(np.asarray(batch.group, dtype=str), return_inverse=True)
    keys = [ids[off[i]:off[i + 1]].astype(np.int64).tobytes() for i in range(batch.n_seqs)]
    groups = copies = pairs = 0
    expected = 0.0
    affected: list[int] = []
    whole: list[int] = []
    for g in range(len(names)):
        members = np.flatnonzero(group == g)
        n = len(members)
        if n < 2:
            continue
        groups += 1
        counts: dict[bytes, int] = {}
        for i in members:
            counts[keys[i]] = counts.get(keys[i], 0) + 1
        repeated = n - len(counts)
        expected += n * (n - 1) / 2 * float(np.mean(np.exp(np.minimum(log_q[members], 0.0))))
        if repeated:
            copies += repeated
            pairs += sum(c * (c - 1) // 2 for c in counts.values())
            affected.append(g)
            if len(counts) == 1:
                whole.append(g)
    if not groups:
        return None
    out = {"groups": groups, "groups_with_copies": len(affected), "group_share": len(affected) / groups,
           "groups_all_identical": len(whole), "copies": copies, "copy_share": copies / batch.n_seqs,
           "pairs": pairs, "expected_pairs": expected, "p_value": _poisson_tail(pairs, expected)}
    out.update(_reward_spread(batch, group, affected))
    return out


def _reward_spread(batch: StepBatch, group: np.ndarray, affected: list[int]) -> dict:
    """The mean within-group reward standard deviation of the groups with copies and of the others (what a GRPO
    advantage is made of: 0 means no advantage for the whole group)."""
    if batch.reward is None:
        return {"reward_std_with_copies": None, "reward_std_others": None}
    reward = np.asarray(batch.reward, np.float64)

    def spread(gs) -> float | None:
        stds = [float(np.std(reward[group == g])) for g in gs if (group == g).sum() > 1]
        return float(np.mean(stds)) if stds else None

    others = [g for g in np.unique(group) if g not in set(affected)]
    return {"reward_std_with_copies": spread(affected), "reward_std_others": spread(others)}


def _measured(s: Scene) -> dict | None:
    return identical_completions(s.batch)


@detector("identical_completions", beside=True)
def _identical(s: Scene) -> dict | None:
    """Copies within groups far beyond what the sampler's own probabilities allow."""
    d = s.once(_measured)
    if not d or not d["pairs"] or d["p_value"] >= DUPLICATE_P_MAX:
        return None
    return findings.make("identical_completions", {**d, "threshold_p_value": DUPLICATE_P_MAX}, s.dt)

"""The batch's numbers under verl's own names and formulas, to hold against a verl dashboard.

verl (rollout_corr_helper.compute_offpolicy_metrics, utils/debug/metrics.py) averages
perplexities per sequence, leaves k3 unclamped, clamps only the *sequence* log-ratio for
chi2_seq, does not self-normalise χ² (mean r² − 1, which can be negative), and uses the unbiased std
for probability differences. Where verl's formula is ours
the number is taken from `metrics` rather than computed again.
"""

from __future__ import annotations

import numpy as np

from ..config import SAFETY_BOUND
from .metrics import r_moments
from .tokens import Tokens


def verl_metrics(tok: Tokens, metrics: dict) -> dict:
    seq_log_r = np.clip(tok.seq_sum_of("delta")[tok.present], -SAFETY_BOUND, SAFETY_BOUND)
    mean_ro = tok.seq_mean_of("rollout")
    mean_tr = tok.seq_mean_of("trainer")
    log_ppl_diff = mean_ro - mean_tr
    if tok.log_r is tok.delta:  # nothing was clamped: verl's unclamped k3 is our k3
        k3 = metrics["kl_k3"]
    else:
        with np.errstate(over="ignore"):
            k3 = float((np.exp(tok.delta) - tok.delta - 1.0).mean())
    return {
        "rollout_corr/training_ppl": float(np.exp(-mean_tr).mean()),
        "rollout_corr/training_log_ppl": float((-mean_tr).mean()),
        "rollout_corr/kl": metrics["kl_k1"],
        "rollout_corr/k3_kl": k3,
        "rollout_corr/rollout_ppl": float(np.exp(-mean_ro).mean()),
        "rollout_corr/rollout_log_ppl": float((-mean_ro).mean()),
        "rollout_corr/log_ppl_diff": float(log_ppl_diff.mean()),
        "rollout_corr/log_ppl_abs_diff": float(np.abs(log_ppl_diff).mean()),
        "rollout_corr/log_ppl_diff_max": float(log_ppl_diff.max()),
        "rollout_corr/log_ppl_diff_min": float(log_ppl_diff.min()),
        "rollout_corr/ppl_ratio": float(np.exp(log_ppl_diff).mean()),
        "rollout_corr/chi2_token": r_moments(tok)[1] - 1.0,  # mean(r²) − 1: verl clamps the token log-ratio at ±20 too
        "rollout_corr/chi2_seq": float(np.exp(2.0 * seq_log_r).mean()) - 1.0,  # and the sequence log-ratio sum
        "training/rollout_probs_diff_valid": 1,
        "training/rollout_probs_diff_max": metrics["abs_dp_max"],
        "training/rollout_probs_diff_mean": metrics["abs_dp_mean"],
        "training/rollout_probs_diff_std": metrics["abs_dp_std"],
        "training/rollout_actor_probs_pearson_corr": metrics["corr_prob"],
    }

"""The batch's numbers under verl's own names and formulas, to hold against a verl dashboard.

verl (rollout_corr_helper.compute_offpolicy_metrics, utils/debug/metrics.py) averages
perplexities per sequence, leaves k3 unclamped, clamps only the *sequence* log-ratio for
chi2_seq, and uses the unbiased std for probability differences.
"""

from __future__ import annotations

import numpy as np

from .config import SAFETY_BOUND
from .metrics import pearson
from .tokens import Tokens


def verl_metrics(tok: Tokens) -> dict:
    d = tok.delta
    present = tok.seqs_present()
    count = tok.seq_count()[present]
    mean_ro = tok.seq_sum(tok.rollout)[present] / count
    mean_tr = tok.seq_sum(tok.trainer)[present] / count
    log_ppl_diff = mean_ro - mean_tr
    with np.errstate(over="ignore"):
        k3 = np.exp(d) - d - 1.0  # verl leaves this unclamped
    seq_sum = np.clip(tok.seq_sum(d)[present], -SAFETY_BOUND, SAFETY_BOUND)
    p_ro, p_tr = np.exp(tok.rollout), np.exp(tok.trainer)
    diff = np.abs(p_tr - p_ro)
    return {
        "rollout_corr/training_ppl": float(np.exp(-mean_tr).mean()),
        "rollout_corr/training_log_ppl": float((-mean_tr).mean()),
        "rollout_corr/kl": float((-d).mean()),
        "rollout_corr/k3_kl": float(k3.mean()),
        "rollout_corr/rollout_ppl": float(np.exp(-mean_ro).mean()),
        "rollout_corr/rollout_log_ppl": float((-mean_ro).mean()),
        "rollout_corr/log_ppl_diff": float(log_ppl_diff.mean()),
        "rollout_corr/log_ppl_abs_diff": float(np.abs(log_ppl_diff).mean()),
        "rollout_corr/log_ppl_diff_max": float(log_ppl_diff.max()),
        "rollout_corr/log_ppl_diff_min": float(log_ppl_diff.min()),
        "rollout_corr/ppl_ratio": float(np.exp(log_ppl_diff).mean()),
        "rollout_corr/chi2_token": float(np.square(np.exp(tok.log_r)).mean() - 1.0),
        "rollout_corr/chi2_seq": float(np.exp(2.0 * seq_sum).mean() - 1.0),
        "training/rollout_probs_diff_valid": 1,
        "training/rollout_probs_diff_max": float(diff.max()),
        "training/rollout_probs_diff_mean": float(diff.mean()),
        "training/rollout_probs_diff_std": float(diff.std(ddof=1)) if diff.shape[0] > 1 else 0.0,
        "training/rollout_actor_probs_pearson_corr": pearson(p_tr, p_ro),
    }

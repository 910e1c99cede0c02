"""Where the mismatch lives: by rollout probability, by position, by group, by environment, and how Σδ grows with
length."""

from __future__ import annotations

import math

import numpy as np

from ..catalogue.numbers import plain
from ..config import LENGTH_FIT_MAX_SAME_LENGTH, LENGTH_FIT_MIN_SPAN, PROB_EDGES
from .histograms import CHUNK, ProbBuckets, position_edges
from .tokens import Tokens


def _bucket_rows(sums: dict[str, np.ndarray], labels: list[str], extra: dict, n_tokens: int) -> list[dict]:
    """Per-bucket count, mean |δ| (± s.e.), mean δ, mean k3 and each bucket's share of Σ|δ| and Σk3."""
    n, s_abs, s_abs2, s_d, s_k3 = (sums[k] for k in ("n", "abs", "abs2", "delta", "k3"))
    tot_abs, tot_k3 = float(s_abs.sum()), float(s_k3.sum())
    rows = []
    for b in range(n.shape[0]):
        if n[b] == 0:
            continue
        mean = s_abs[b] / n[b]
        var = max(s_abs2[b] / n[b] - mean * mean, 0.0)
        rows.append({
            "bucket": labels[b],
            "tokens": int(n[b]),
            "token_share": float(n[b] / n_tokens),
            "abs_delta_mean": float(mean),
            "abs_delta_se": float(math.sqrt(var / (n[b] - 1))) if n[b] > 1 else None,
            "delta_mean": float(s_d[b] / n[b]),
            "k3_mean": float(s_k3[b] / n[b]),
            "abs_delta_share": float(s_abs[b] / tot_abs) if tot_abs > 0 else 0.0,
            "k3_share": float(s_k3[b] / tot_k3) if tot_k3 > 0 else 0.0,
            **{k: v[b] for k, v in extra.items()},
        })
    return rows


def bucket_tables(tok: Tokens) -> dict:
    """|δ| and k3 by rollout-probability bucket and by position bucket.

    One pass over 1M-token slices (cache-sized temporaries while other families run): by probability, a bucket code
    per token and weighted counts over it; by position, a sum per run of tokens that share a sequence and a position
    bucket (positions rise within a sequence, so each bucket is a run: no position per token).
    """
    n_p = ProbBuckets.size()
    pos_edges = np.asarray(position_edges(tok.max_pos()))
    n_pos = len(pos_edges) - 1
    run_start, run_bucket = position_runs(tok, pos_edges)
    values = {"abs": tok.abs_delta, "delta": tok.delta, "k3": tok.k3()}
    by_p = {k: np.zeros(n_p) for k in ("n", "abs", "abs2", "delta", "k3")}
    by_pos = {k: np.zeros(n_pos) for k in by_p}
    for lo in range(0, tok.n, CHUNK):
        hi = min(lo + CHUNK, tok.n)
        code = ProbBuckets.of(tok.rollout[lo:hi]).codes
        a, b = int(np.searchsorted(run_start, lo, "right")) - 1, int(np.searchsorted(run_start, hi, "left"))
        cut = np.concatenate([[0], run_start[a + 1:b] - lo])  # the runs (or their parts) in this slice
        bucket = run_bucket[a:b]
        part = {k: v[lo:hi] for k, v in values.items()}
        part["abs2"] = np.square(part["abs"])
        by_p["n"] += np.bincount(code, minlength=n_p)
        by_pos["n"] += np.bincount(bucket, weights=np.diff(np.append(cut, hi - lo)), minlength=n_pos)
        for k, v in part.items():
            by_p[k] += np.bincount(code, weights=v, minlength=n_p)
            by_pos[k] += np.bincount(bucket, weights=np.add.reduceat(v, cut), minlength=n_pos)
    p_labels = [ProbBuckets.label(i) for i in range(n_p)]
    pos_labels = [f"{pos_edges[i]}–{pos_edges[i + 1] - 1}" for i in range(n_pos)]
    return {
        "by_probability": _bucket_rows(by_p, p_labels, {"p_low": [float(e) for e in PROB_EDGES[:-1]],
                                                        "p_high": [float(e) for e in PROB_EDGES[1:]]}, tok.n),
        "by_position": _bucket_rows(by_pos, pos_labels, {"pos_low": [int(e) for e in pos_edges[:-1]],
                                                         "pos_high": [int(e) - 1 for e in pos_edges[1:]]}, tok.n),
    }


def position_runs(tok: Tokens, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of valid tokens of one sequence and one position bucket [edges[b], edges[b+1]) begins (sorted,
    none empty, together every token) and its bucket b."""
    starts = tok.starts
    ends = np.append(starts[1:], tok.n)
    first = tok.batch_offsets[tok.seq[starts]]  # each present sequence's position 0 in the batch's flat tokens
    flat = first[:, None] + edges[None, :-1]  # where each bucket begins, as a flat index [G, B]
    at = flat if tok.valid_index is None else np.searchsorted(tok.valid_index, flat)  # all valid: token i is flat i
    at = np.minimum(at, ends[:, None])
    stop = np.append(at[:, 1:], ends[:, None], axis=1)
    keep = stop > at
    return at[keep], np.broadcast_to(np.arange(edges.shape[0] - 1), at.shape)[keep]


def length_growth(tok: Tokens) -> dict:
    """Fit |Σδ| ∝ length^b over sequences: b ≈ 0.5 is a random walk (noise), b ≈ 1 is systematic drift."""
    present = tok.present
    length = tok.counts[present].astype(float)
    abs_sum = np.abs(tok.seq_sum_of("delta")[present])
    ok = (abs_sum > 0) & (length >= 1)
    x, y = np.log(length[ok]), np.log(abs_sum[ok])
    out: dict = {"sequences_used": int(ok.sum()), "model": "log|Σδ| = a + b·log(length)",
                 "reference": {"random_walk": 0.5, "systematic": 1.0}}
    reason = _cannot_fit(length[ok])
    if reason:
        out.update(exponent=None, exponent_se=None, intercept=None, reason=reason)
        return out
    A = np.vstack([np.ones_like(x), x]).T
    coef = np.linalg.lstsq(A, y, rcond=None)[0]
    resid = y - A @ coef
    dof = max(len(y) - 2, 1)
    cov = np.linalg.inv(A.T @ A) * float(resid @ resid) / dof
    out.update(exponent=float(coef[1]), exponent_se=float(math.sqrt(cov[1, 1])), intercept=float(coef[0]))
    return out


def _cannot_fit(length: np.ndarray) -> str | None:
    """Why the lengths cannot carry a growth fit (config.LENGTH_FIT_*), or None when they can."""
    if length.shape[0] < 3:
        return "needs at least 3 sequences with a non-zero Σδ"
    if length.max() < LENGTH_FIT_MIN_SPAN * length.min():
        return (f"the lengths span less than a factor of {plain(LENGTH_FIT_MIN_SPAN)} "
                f"({int(length.min())}–{int(length.max())} tokens), too little to see growth with length")
    values, counts = np.unique(length, return_counts=True)
    top = int(counts.max())
    if top > LENGTH_FIT_MAX_SAME_LENGTH * length.shape[0]:
        return (f"{top} of {length.shape[0]} sequences have the same length ({int(values[counts.argmax()])} tokens, "
                "a length cap?), so growth with length cannot be measured")
    return None


def group_codes(groups: np.ndarray | None, n_seqs: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Sequence → group code; without groups each sequence is its own unit."""
    if groups is None:
        return np.arange(n_seqs), np.array([str(i) for i in range(n_seqs)]), "sequence"
    names, codes = np.unique(groups, return_inverse=True)
    return codes, names, "group"


def sequence_sums(tok: Tokens, clip_low: float, clip_high: float, veto: float) -> dict[str, np.ndarray]:
    """Per sequence: PPO-clipped and vetoed token counts, Σ|δ|, Σk3 and min log r, the sums every unit table adds up.

    One pass over the tokens serves the group table and the environment table alike.
    """
    log_r = tok.log_r  # r outside [low, high] is log r outside [log low, log high]: no exp per token
    per_seq = {"clipped": tok.seq_count_of((log_r < math.log(clip_low)) | (log_r > math.log(clip_high)))}
    per_seq["vetoed"] = tok.seq_count_of(tok.delta < math.log(veto))
    per_seq["abs"] = tok.seq_sum_of("abs_delta")
    per_seq["k3"] = tok.seq_sum_of("k3")
    seq_min = np.full(tok.n_seqs, np.inf)
    seq_min[tok.seq[tok.starts]] = np.minimum.reduceat(tok.log_r, tok.starts)
    per_seq["min_log_r"] = seq_min
    return per_seq


def unit_table(tok: Tokens, per_seq: dict[str, np.ndarray], seq_code: np.ndarray, names: np.ndarray, unit: str) -> dict:
    """Per unit (group, environment): sequences, tokens and their share, mean |δ|, k3, its share of Σk3 and its
    multiple of the batch's, PPO-clipped fraction, vetoed tokens, min r. Sums are added up per unit on [N_seqs]
    arrays."""
    ng = len(names)
    n = np.bincount(seq_code, weights=tok.counts, minlength=ng)
    sums = {k: np.bincount(seq_code, weights=per_seq[k], minlength=ng) for k in ("clipped", "vetoed", "abs", "k3")}
    min_log_r = np.full(ng, np.inf)
    np.minimum.at(min_log_r, seq_code, per_seq["min_log_r"])
    seqs = np.bincount(seq_code, weights=tok.present, minlength=ng)
    keep = n > 0
    total_k3, total_n = float(sums["k3"].sum()), float(n.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        table = {
            "name": names[keep].tolist(),
            "sequences": seqs[keep].astype(int).tolist(),
            "tokens": n[keep].astype(int).tolist(),
            "abs_delta_mean": (sums["abs"] / n)[keep].tolist(),
            "k3_mean": (sums["k3"] / n)[keep].tolist(),
            "k3_share": (sums["k3"] / total_k3 if total_k3 > 0 else np.zeros(ng))[keep].tolist(),
            "token_share": (n / total_n if total_n > 0 else np.zeros(ng))[keep].tolist(),
            # the unit's KL k3 against the batch's (Σk3 / tokens): 3 means three times the batch's per-token KL
            "k3_vs_batch": ((sums["k3"] / n / (total_k3 / total_n))[keep].tolist() if total_k3 > 0
                            else [None] * int(keep.sum())),
            "clipped_fraction": (sums["clipped"] / n)[keep].tolist(),
            "vetoed_tokens": np.rint(sums["vetoed"][keep]).astype(int).tolist(),
            "min_ratio": np.exp(min_log_r)[keep].tolist(),
        }
    return {"unit": unit, **table}


def group_table(tok: Tokens, groups: np.ndarray | None, per_seq: dict[str, np.ndarray]) -> dict:
    """Per GRPO group (or per sequence without groups): the unit the routing decides on."""
    seq_code, names, unit = group_codes(groups, tok.n_seqs)
    return unit_table(tok, per_seq, seq_code, names, unit)


def env_table(tok: Tokens, env: np.ndarray | None, per_seq: dict[str, np.ndarray]) -> dict | None:
    """Per environment or task the dump names (prime-rl's `env_name`, NeMo-RL's task): where prime-rl logs
    `mismatch_kl/{env}`, tim-report used to pool them. None when the batch names no environment."""
    if env is None:
        return None
    names, codes = np.unique(np.asarray(env, dtype=str), return_inverse=True)
    return unit_table(tok, per_seq, codes, names, "environment")


UNIT_QUANTILES = (0, 10, 50, 90, 100)  # the distribution a bounded unit table keeps of every unit


def worst_units(table: dict, k: int) -> dict:
    """A unit table bounded to its `k` worst rows (quarantined first, then corrected, then by mean |δ|, as the page
    orders them) and the distribution of every unit's size and mismatch: at 16M tokens in singleton groups a row per
    sequence was 700 kB of summary.json. `units` says how many there were, `rows` how many are kept."""
    names = table.get("name") or []
    n = len(names)
    rank = {"quarantine": 0, "train_with_correction": 1, "train": 2}
    routes = table.get("route") or [None] * n
    order = sorted(range(n), key=lambda i: (rank.get(routes[i], 3), -(table["abs_delta_mean"][i] or 0.0), i))[:k]
    out = {key: ([v[i] for i in order] if isinstance(v, list) and len(v) == n else v) for key, v in table.items()}
    dist: dict[str, list | None] = {"q": list(UNIT_QUANTILES)}
    for key in ("tokens", "abs_delta_mean", "k3_mean", "clipped_fraction"):
        values = np.asarray([v for v in table[key] if v is not None], dtype=np.float64)
        dist[key] = np.percentile(values, UNIT_QUANTILES).tolist() if values.size else None
    return {**out, "units": n, "rows": len(order), "distribution": dist}

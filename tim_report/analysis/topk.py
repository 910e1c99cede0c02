"""The whole distribution, when captured: both sides' top-k log-probs compared position by position.

δ compares one sampled token. With each side's k most likely tokens per position (capture
--top-k-logprobs) we can ask what llama.cpp's --kl-divergence asks of a quantised model: does the most
likely token change, and how far apart are the two next-token distributions? Per position t, with
P = rollout (μ, the sampler's distribution) and Q = trainer (π), A and B their top-k sets, p_A, q_B the
known probabilities, m_P = 1 − Σ_A p and m_Q = 1 − Σ_B q the mass outside each top-k:

    shared   I = A ∩ B, where both probabilities are known; p_o = 1 − Σ_I p, q_o = 1 − Σ_I q
    kl_lower Σ_I p log(p/q) + p_o log(p_o/q_o): KL of P and Q with everything outside I lumped into one
             bucket; never above the true KL(P ‖ Q) (log-sum inequality), so an exact lower bound
    kl_union the estimate on U = A ∪ B: a token of B missing from A gets p̂ = min(min_A p, m_P / |B \\ A|)
             (below A's smallest, and together no more than A's outside mass), likewise q̂ for A \\ B;
             what is left of each outside mass is one "other" bucket; KL of the result
    tv       ½ Σ_x |p − q| lies in [tv_known + ½|p_o − q_o|, tv_known + ½(p_o + q_o)], tv_known = ½ Σ_I |p − q|:
             truncation can hide at most min(p_o, q_o) of total variation (`hidden_tv`)

KL(P ‖ Q) averaged over positions is what token-mean k3 estimates from one sample per position, so
`kl_union` and `kl_k3_sampled` agree in expectation when the top-k holds the mass; the tables by rollout
probability and by position put the two side by side, telling "the sampled token's probability moved"
from "the whole distribution moved".
"""

from __future__ import annotations

import numpy as np

from ..config import PROB_EDGES, TOPK_UNRESOLVED_WARN
from ..model import StepBatch
from .histograms import ProbBuckets, position_edges
from .stats import cluster_mean_se, percentile_ladder
from .tokens import Tokens

ROWS = 1 << 15  # positions per pass: [rows, k, k] id comparisons stay ~13 MB at k = 20
TINY = np.finfo(np.float64).tiny  # a zero probability on the Q side of a KL term (p > 0) counts as this

HOW_TO_GET = ("tim-report capture --top-k-logprobs K (on by default, K = 20) records both sides' K most likely tokens "
              "per position: vLLM's logprobs / prompt_logprobs, the transformers scorer's chunked top-k")
DEFINITION = ("per position: kl_union = KL(rollout ‖ trainer) on the union of the two top-k sets, a token missing from "
              "one side's top-k at min(that side's k-th probability, its outside mass / missing tokens), the rest of each "
              "side's mass in one 'other' bucket; kl_lower = the same with only the shared top-k kept apart (an exact "
              "lower bound); hidden_tv = min(p_o, q_o), the most total variation the truncation can hide")


def unavailable(reason: str) -> dict:
    return {"available": False, "reason": reason, "how_to_get": HOW_TO_GET}


def topk_analysis(batch: StepBatch, tok: Tokens) -> dict:
    """Top-1 agreement, union KL with its bounds, and where the disagreement sits; or why it cannot be said."""
    given = [batch.rollout_topk_ids, batch.rollout_topk_logp, batch.trainer_topk_ids, batch.trainer_topk_logp]
    arrays = [np.asarray(a) for a in given if a is not None]
    if len(arrays) < 4:
        return unavailable("the batch has no top-k log-probs of both sides (only `tim-report capture` records them)")
    rows = tok.index
    per = _per_position(*(a[rows] for a in arrays))
    ok = per.pop("ok")
    if not ok.any():
        return unavailable("no valid token has finite top-k log-probs on both sides")
    part = tok.subset(ok)
    per = {k: v[ok] for k, v in per.items()}
    k3 = part.k3()
    out: dict = {"available": True, "definition": DEFINITION, "tokens": int(ok.sum()),
                 "tokens_without_topk": int((~ok).sum()),
                 "k": {"rollout": int(arrays[0].shape[1]), "trainer": int(arrays[2].shape[1])}}
    differ = per["top1_differ"].astype(np.float64)
    out["top1_differ"], out["top1_differ_se"] = cluster_mean_se(differ, part.seq)
    out["top1_differ_count"] = int(per["top1_differ"].sum())
    out["kl_union"], out["kl_union_se"] = cluster_mean_se(per["kl_union"], part.seq)
    out["kl_union_max"] = float(per["kl_union"].max())
    out["kl_union_percentiles"] = percentile_ladder(per["kl_union"])
    out["kl_lower"], out["kl_lower_se"] = cluster_mean_se(per["kl_lower"], part.seq)
    out["kl_k3_sampled"], out["kl_k3_sampled_se"] = cluster_mean_se(k3, part.seq)
    out["tv_lower"] = float(per["tv_lower"].mean())
    out["tv_upper"] = float(per["tv_upper"].mean())
    out["hidden_tv"] = float((per["tv_upper"] - per["tv_lower"]).mean())
    out["hidden_tv_max"] = float((per["tv_upper"] - per["tv_lower"]).max())
    out["mass_outside_topk"] = {"rollout": float(per["out_p"].mean()), "trainer": float(per["out_q"].mean())}
    out["unresolved_mass"] = float(per["unresolved"].mean())
    out["loose"] = bool(out["unresolved_mass"] > TOPK_UNRESOLVED_WARN)
    out["by_probability"] = _by_probability(part, per, k3)
    out["by_position"] = _by_position(part, per, k3)
    return out


def _per_position(ids_a: np.ndarray, lp_a: np.ndarray, ids_b: np.ndarray, lp_b: np.ndarray) -> dict[str, np.ndarray]:
    """The per-position numbers, ROWS positions at a time (bounded temporaries)."""
    n = ids_a.shape[0]
    names = ("kl_union", "kl_lower", "tv_lower", "tv_upper", "out_p", "out_q", "unresolved")
    out = {k: np.zeros(n) for k in names}
    out["top1_differ"] = np.zeros(n, bool)
    out["ok"] = np.zeros(n, bool)
    for lo in range(0, n, ROWS):
        sl = slice(lo, lo + ROWS)
        for k, v in _chunk(ids_a[sl], lp_a[sl], ids_b[sl], lp_b[sl]).items():
            out[k][sl] = v
    return out


def _xlogy_ratio(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """p·log(p/q) with 0·log(0/q) = 0 and q floored at TINY where p > 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - np.log(np.maximum(q, TINY))), 0.0)


def _side(ids: np.ndarray, lp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One side's entries: present (id ≥ 0), probabilities (0 where absent), outside mass, smallest present p."""
    present = ids >= 0
    p = np.where(present, np.exp(lp.astype(np.float64)), 0.0)
    outside = np.maximum(1.0 - p.sum(axis=1), 0.0)
    p_min = np.where(present, p, np.inf).min(axis=1)
    return present, p, outside, np.where(np.isfinite(p_min), p_min, 0.0)


def _chunk(ids_a, lp_a, ids_b, lp_b) -> dict[str, np.ndarray]:
    pres_a, p, out_p, pmin_a = _side(ids_a, lp_a)
    pres_b, q, out_q, qmin_b = _side(ids_b, lp_b)
    ok = ~(np.isnan(lp_a) & pres_a).any(axis=1) & ~(np.isnan(lp_b) & pres_b).any(axis=1) & pres_a[:, 0] & pres_b[:, 0]
    eq = (ids_a[:, :, None] == ids_b[:, None, :]) & pres_a[:, :, None] & pres_b[:, None, :]  # [n, ka, kb]
    a_in_b, b_in_a = eq.any(axis=2), eq.any(axis=1)
    q_of_a = np.where(a_in_b, np.take_along_axis(q, eq.argmax(axis=2), axis=1), 0.0)  # Q's probability of A's entries in B
    # shared top-k and the lumped rest: the lower bound and the total-variation bracket
    p_shared, q_shared = np.where(a_in_b, p, 0.0), np.where(a_in_b, q_of_a, 0.0)
    p_o = np.maximum(1.0 - p_shared.sum(axis=1), 0.0)
    q_o = np.maximum(1.0 - q_shared.sum(axis=1), 0.0)
    kl_lower = _xlogy_ratio(p_shared, q_shared).sum(axis=1) + _xlogy_ratio(p_o, q_o)
    tv_known = 0.5 * np.abs(p_shared - q_shared).sum(axis=1)
    # the union: each side's missing tokens imputed below its k-th probability and within its outside mass
    a_only, b_only = pres_a & ~a_in_b, pres_b & ~b_in_a
    n_a_only, n_b_only = a_only.sum(axis=1), b_only.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q_hat = np.minimum(qmin_b, np.where(n_a_only > 0, out_q / np.maximum(n_a_only, 1), 0.0))
        p_hat = np.minimum(pmin_a, np.where(n_b_only > 0, out_p / np.maximum(n_b_only, 1), 0.0))
    q_for_a = np.where(a_in_b, q_of_a, q_hat[:, None])
    p_other = np.maximum(out_p - p_hat * n_b_only, 0.0)
    q_other = np.maximum(out_q - q_hat * n_a_only, 0.0)
    kl_union = (_xlogy_ratio(np.where(pres_a, p, 0.0), q_for_a).sum(axis=1)
                + _xlogy_ratio(np.where(b_only, p_hat[:, None], 0.0), q).sum(axis=1)
                + _xlogy_ratio(p_other, q_other))
    return {"ok": ok, "top1_differ": _top1(ids_a, p, pres_a) != _top1(ids_b, q, pres_b), "kl_union": np.maximum(kl_union, 0.0),
            "kl_lower": np.maximum(kl_lower, 0.0), "tv_lower": tv_known + 0.5 * np.abs(p_o - q_o),
            "tv_upper": tv_known + 0.5 * (p_o + q_o), "out_p": out_p, "out_q": out_q, "unresolved": np.maximum(p_o, q_o)}


def _top1(ids: np.ndarray, p: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Each position's most likely token (engines list best first; a file need not)."""
    best = np.where(present, p, -1.0).argmax(axis=1)
    return ids[np.arange(ids.shape[0]), best]


def _rows(codes: np.ndarray, size: int, labels: list[str], per: dict, k3: np.ndarray, extra: dict) -> list[dict]:
    """Per bucket: tokens, top-1 differ share, mean union KL and k3 of the sampled tokens, each one's share of its Σ."""
    n = np.bincount(codes, minlength=size)
    kl = np.bincount(codes, weights=per["kl_union"], minlength=size)
    k3s = np.bincount(codes, weights=k3, minlength=size)
    diff = np.bincount(codes, weights=per["top1_differ"].astype(np.float64), minlength=size)
    tot_kl, tot_k3 = float(kl.sum()), float(k3s.sum())
    out = []
    for b in range(size):
        if n[b] == 0:
            continue
        out.append({"bucket": labels[b], "tokens": int(n[b]), "top1_differ": float(diff[b] / n[b]),
                    "kl_union_mean": float(kl[b] / n[b]), "kl_union_share": float(kl[b] / tot_kl) if tot_kl > 0 else 0.0,
                    "k3_mean": float(k3s[b] / n[b]), "k3_share": float(k3s[b] / tot_k3) if tot_k3 > 0 else 0.0,
                    **{k: v[b] for k, v in extra.items()}})
    return out


def _by_probability(part: Tokens, per: dict, k3: np.ndarray) -> list[dict]:
    """By the sampled token's rollout probability: the buckets of the |δ| table, so the rows line up."""
    size = ProbBuckets.size()
    return _rows(ProbBuckets.of(part.rollout).codes, size, [ProbBuckets.label(b) for b in range(size)], per, k3,
                 {"p_low": [float(e) for e in PROB_EDGES[:-1]], "p_high": [float(e) for e in PROB_EDGES[1:]]})


def _by_position(part: Tokens, per: dict, k3: np.ndarray) -> list[dict]:
    """By position in the response: the buckets of the drift-by-position breakdown."""
    edges = np.asarray(position_edges(part.max_pos()))
    codes = np.searchsorted(edges, part.pos, side="right") - 1
    labels = [f"{edges[i]}–{edges[i + 1] - 1}" for i in range(len(edges) - 1)]
    return _rows(codes, len(labels), labels, per, k3,
                 {"pos_low": [int(e) for e in edges[:-1]], "pos_high": [int(e) - 1 for e in edges[1:]]})

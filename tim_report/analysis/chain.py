"""The sides as a chain: each adjacent link's mismatch and its share of the end-to-end mismatch (docs/chain.md).

A batch may carry, beside the sampler's (rollout) and the trainer's log-probs, the engine re-scoring its own tokens
(recompute), the trainer in the rollout's precision (shadow), the training forward (train) and sides of other names,
in a declared order (StepBatch.chain_order); sides `rescore` added are candidates for the weights that sampled, read
by analysis/lag/rescored.py, never links. Over the tokens every side scores validly, with δ_k = side_{k+1} − side_k
per link and δ_end = last − first,

    δ_end = Σ_k δ_k                      per token, exactly: every link's mean δ adds up to the end-to-end mean δ
    share_k = mean(δ_k · δ_end) / mean(δ_end²)   Σ_k share_k = 1 exactly

The share rule splits the end-to-end mean squared δ (the k2 KL estimator's 2×) into each link's own mean δ_k² plus
half of each cross term mean(2·δ_j·δ_k) it takes part in; a negative share is a link that undoes part of the
others. KL k3 and mean |δ| are given per link but do not add up (they are not linear in δ), so the share is not
read from them. The leading link is the one with the largest share; when the links cancel end to end (mean δ_end²
= 0 with links that differ) no share is defined and the link with the largest mean δ_k² leads.
"""

from __future__ import annotations

import numpy as np

from ..catalogue import chain as words
from ..catalogue import findings
from ..config import SAFETY_BOUND
from ..model import StepBatch
from .lag.rescored import rescored_names
from .registry import Scene, detector
from .stats import dot, k3_per_token
from .tokens import Tokens, third_side

RULE = ("share_k = mean(δ_k·δ_end) / mean(δ_end²): each link's own mean δ² plus half of every cross term it takes "
        "part in; the shares add up to 1 and the links' mean δ to the end-to-end mean δ")
PAIR = ("rollout", "trainer")


def chain_analysis(batch: StepBatch, tok: Tokens) -> dict | None:
    """The chain's links and shares; None for a batch of the two sides (with a shadow alone: the precision gap's
    section says the same split)."""
    rescored = set(rescored_names(batch))  # candidates for the weights that sampled (lag/rescored.py), not links
    names = [n for n in batch.chain_order() if n not in rescored]
    if not [n for n in names if n not in (*PAIR, "shadow")]:
        return None
    values, ok, left_out = [], np.ones(tok.n, bool), {}
    for name in names:
        if name in PAIR:
            values.append((name, tok.rollout if name == "rollout" else tok.trainer))
            continue
        found = third_side(batch.side(name), f"{name} side", batch.n_tokens, tok)
        if isinstance(found, str):
            left_out[name] = found
            continue
        full = np.full(tok.n, np.nan)
        full[found[1]] = found[0]
        ok &= found[1]
        values.append((name, full))
    if len(values) < 3:
        return {"available": False, "reason": "fewer than three sides score the valid tokens: "
                + "; ".join(left_out.values()), "sides": [n for n, _ in values], "left_out": left_out}
    if not ok.all():
        values = [(n, v[ok]) for n, v in values]
    seq, index = tok.seq[ok], tok.index[ok]
    out = _links(values, seq, index - tok.batch_offsets[seq], batch)
    out["left_out"] = left_out
    out["tokens_without_every_side"] = int((~ok).sum())
    return out


def _links(values: list[tuple[str, np.ndarray]], seq: np.ndarray, pos: np.ndarray, batch: StepBatch) -> dict:
    end = values[-1][1] - values[0][1]
    end_sq = float(dot(end, end)) / max(end.size, 1)
    links = []
    for (a, va), (b, vb) in zip(values, values[1:]):
        d = vb - va
        link = {"from": a, "to": b, "label": words.label(a, b), **numbers(d, seq, pos, batch)}
        link["share"] = float(dot(d, end)) / end.size / end_sq if end_sq > 0 else None
        links.append(link)
    end_numbers = {"from": values[0][0], "to": values[-1][0], "label": words.label(values[0][0], values[-1][0]),
                   **numbers(end, seq, pos, batch)}
    return {"available": True, "sides": [n for n, _ in values], "tokens": int(end.size), "rule": RULE,
            "links": links, "end_to_end": end_numbers, "leading": _leading(links),
            "additivity": {"bias_links": float(sum(x["bias"] for x in links)), "bias_end": end_numbers["bias"],
                           "shares": float(sum(x["share"] for x in links)) if end_sq > 0 else None}}


def numbers(d: np.ndarray, seq: np.ndarray, pos: np.ndarray, batch: StepBatch) -> dict:
    """One link's mismatch (δ = later side − earlier): the usual size numbers, and how many tokens differ at all."""
    n = max(d.size, 1)
    a = np.abs(d)
    differs = np.flatnonzero(d != 0)
    first = None
    if differs.size:
        i = int(differs[0])
        flat = int(batch.offsets[seq[i]] + pos[i])
        first = {"sequence": int(seq[i]), "position": int(pos[i]), "token": batch.token_strings(slice(flat, flat + 1))[0],
                 "delta": float(d[i])}
    return {"tokens": int(d.size), "bias": float(d.sum()) / n, "abs_mean": float(a.sum()) / n,
            "abs_max": float(a.max()) if d.size else 0.0, "mean_sq": float(dot(d, d)) / n,
            "kl_k3": float(k3_per_token(np.clip(d, -SAFETY_BOUND, SAFETY_BOUND)).sum()) / n,
            "differing": int(differs.size), "differing_share": differs.size / n, "first_differing": first}


def _leading(links: list[dict]) -> str | None:
    """The link with the largest share; with no share (the links cancel), the largest mean δ²; None: none differs."""
    if not any(x["differing"] for x in links):
        return None
    if links[0]["share"] is None:
        return max(links, key=lambda x: x["mean_sq"])["label"]
    return max(links, key=lambda x: x["share"])["label"]


def chain_finding_evidence(chain: dict) -> dict | None:
    """What the chain finding says: the leading link, its share, and the end-to-end size; None without a leader."""
    if not chain.get("available") or chain["leading"] is None:
        return None
    link = next(x for x in chain["links"] if x["label"] == chain["leading"])
    return {"leading": link["label"], "from": link["from"], "to": link["to"], "share": link["share"],
            "leading_kl_k3": link["kl_k3"], "leading_mean_sq": link["mean_sq"],
            "end_kl_k3": chain["end_to_end"]["kl_k3"], "path": words.path_label(chain["sides"])}


def _measured(s: Scene) -> dict | None:
    return chain_analysis(s.batch, s.tok)


@detector("chain_link", beside=True, section=("chain", _measured))
def _chain_finding(s: Scene) -> dict | None:
    """The link that carries the mismatch, beside the verdict (analyze moves the chain to summary.json's top level)."""
    chain = s.once(_measured)
    evidence = chain_finding_evidence(chain) if chain is not None else None
    return findings.make("chain_link", evidence, s.dt) if evidence is not None else None

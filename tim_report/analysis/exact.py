"""The exact gate (`check --exact`, `assert_logprobs_match(..., exact=True)`): pass only when no token differs.

For pipelines that should agree bitwise (batch-invariant kernels, aligned engines): over the batch's valid tokens,
every side on the chain's path (rollout and trainer, with recompute, train and named sides where the batch has
them; the shadow pass is another precision by design and is not held to it) must equal the one before it, or differ
by at most `atol`. A token a side does not score (NaN) differs. The gate names how many tokens differ, the largest
|δ|, the first differing token (its sequence, position and text) and, with a chain, the first link along it where
tokens differ. docs/chain.md cites the field's gates this one is the strict end of.
"""

from __future__ import annotations

import numpy as np

from ..catalogue.chain import label
from ..model import StepBatch
from .tokens import Tokens


def exact_gate(batch: StepBatch, tok: Tokens, atol: float = 0.0) -> dict:
    """Whether every link of the path agrees on every valid token (|δ| ≤ atol), and where it first does not."""
    names = [n for n in batch.chain_order() if n != "shadow"]
    index = tok.index
    values = [(n, tok.rollout if n == "rollout" else tok.trainer if n == "trainer"
               else np.asarray(batch.side(n), dtype=np.float64)[index]) for n in names]
    links: list[dict] = []
    any_diff, max_abs = np.zeros(tok.n, bool), 0.0
    for (a, va), (b, vb) in zip(values, values[1:]):
        d = np.abs(vb - va)
        differs = ~(d <= atol)  # NaN differs
        count = int(differs.sum())
        finite = d[np.isfinite(d)]
        link_max = float(finite.max()) if finite.size else 0.0
        max_abs = max(max_abs, link_max)
        links.append({"label": label(a, b), "from": a, "to": b, "differing": count, "max_abs": link_max,
                      "first": int(np.argmax(differs)) if count else None})
        any_diff |= differs
    count = int(any_diff.sum())
    first_link = next((x for x in links if x["differing"]), None)
    link_first = int(first_link["first"]) if first_link is not None and len(links) > 1 else None
    return {"atol": float(atol), "tokens": tok.n, "sides": names, "passed": count == 0, "differing": count,
            "share": count / tok.n if tok.n else 0.0, "max_abs": max_abs,
            "first": _where(batch, tok, values, int(np.argmax(any_diff)), atol) if count else None,
            "first_link": first_link["label"] if first_link is not None and len(links) > 1 else None,
            "first_link_token": _where(batch, tok, values, link_first, atol) if link_first is not None else None,
            "links": [{k: v for k, v in x.items() if k != "first"} for x in links]}


def _where(batch: StepBatch, tok: Tokens, values: list[tuple[str, np.ndarray]], i: int, atol: float) -> dict:
    """The i-th valid token: its sequence, position in the response, text, every side's log-prob, and δ on the first
    link that differs there."""
    flat = int(tok.index[i])
    seq = int(tok.seq[i])
    deltas = [float(vb[i] - va[i]) for (_, va), (_, vb) in zip(values, values[1:])]
    return {"sequence": seq, "position": flat - int(batch.offsets[seq]),
            "token": batch.token_strings(slice(flat, flat + 1))[0],
            "logp": {n: float(v[i]) for n, v in values},
            "delta": next((d for d in deltas if not abs(d) <= atol), deltas[0])}

"""The sequences a person should read: the K worst by mean |δ| and K seeded random others."""

from __future__ import annotations

import numpy as np

from ..config import SAFETY_BOUND, Thresholds
from ..model import StepBatch
from .stats import finite
from .tokens import Tokens


def select(tok: Tokens, th: Thresholds) -> list[tuple[int, str]]:
    present = np.flatnonzero(tok.present)
    mean_abs = tok.seq_mean_of("abs_delta")
    order = np.lexsort((present, -mean_abs))  # worst first, ties by index: deterministic
    worst = present[order[: th.samples_k]]
    rest = np.setdiff1d(present, worst)
    k = min(th.samples_k, rest.size)
    rand = np.sort(np.random.default_rng(th.seed).choice(rest, k, replace=False)) if k else np.array([], int)
    return [(int(i), "worst") for i in worst] + [(int(i), "random") for i in rand]


MAX_TOKEN_CHARS = 32  # a token string longer than this is cut (a page must stay bounded whatever the data)
MAX_TEXT_CHARS = 4000  # prompt and response text likewise


def _cut(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit} more characters]"


def sample_rows(batch: StepBatch, tok: Tokens, th: Thresholds) -> list[dict]:
    out = []
    for i, kind in select(tok, th):
        sl = batch.tokens_of(i)
        n = sl.stop - sl.start
        shown = slice(sl.start, sl.start + min(n, th.sample_max_tokens))
        ro = batch.rollout_logp[shown]
        tr = batch.trainer_logp[shown]
        with np.errstate(invalid="ignore", over="ignore"):
            diff = tr - ro
            r = np.exp(np.clip(diff, -SAFETY_BOUND, SAFETY_BOUND))
        text = [_cut(t, MAX_TOKEN_CHARS) for t in batch.token_strings(shown)]
        ids = batch.token_ids[shown].tolist() if batch.token_ids is not None else None
        lo, hi = tok.span(i)
        d = tok.delta[lo:hi]
        with np.errstate(over="ignore"):
            columns = [_finite_list(a) for a in (ro, tr, diff, np.exp(ro), np.exp(tr), r)]
        positions = np.arange(shown.start, shown.stop)
        valid = np.ones(positions.shape[0], bool) if tok.valid_index is None else np.isin(positions, tok.valid_index[lo:hi])
        mask, ok = batch.mask[shown].astype(bool).tolist(), valid.tolist()
        rows = [  # whole columns converted at once: a call per value was most of the analysis of a small step
            {"pos": j, "token": text[j], "token_id": int(ids[j]) if ids is not None else None,
             "rollout_logp": rl, "trainer_logp": tl, "diff": df, "p_rollout": pr, "p_trainer": pt, "r": rr,
             "mask": mask[j], "valid": ok[j]}
            for j, (rl, tl, df, pr, pt, rr) in enumerate(zip(*columns))
        ]
        out.append({
            "sequence": i,
            "kind": kind,
            "group": str(batch.group[i]) if batch.group is not None else None,
            "tokens": int(n),
            "valid_tokens": hi - lo,
            "abs_delta_mean": float(tok.abs_delta[lo:hi].mean()),
            "seq_log_ratio": float(d.sum()),
            "reward": finite(batch.reward[i]) if batch.reward is not None else None,
            "prompt": _cut(batch.prompt_string(i), MAX_TEXT_CHARS),
            "response": _cut(_response_text(batch, sl), MAX_TEXT_CHARS),
            "rows": rows,
            "rows_truncated": n > th.sample_max_tokens,
        })
    return out


def _finite_list(a: np.ndarray) -> list[float | None]:
    """The values as Python floats, None where not finite (what `stats.finite` gives each)."""
    return [v if keep else None for v, keep in zip(a.astype(np.float64).tolist(), np.isfinite(a).tolist())]


def _response_text(batch: StepBatch, sl: slice) -> str | None:
    if batch.token_text is not None:
        return "".join(str(t) for t in batch.token_text[sl])
    if batch.decoder is not None and batch.token_ids is not None:
        return batch.decoder([int(t) for t in batch.token_ids[sl]])
    return None

"""Which weights the engine used, lag bucket by lag bucket: each bucket's tokens against every checkpoint `rescore`
scored them with, and the trainer's own weights (docs/staleness.md, "Which weights did the engine use").

A checkpoint is a candidate for the weights that sampled the tokens, not a link of the chain (analysis/chain.py keeps
the pipeline's own sides). A mixed-lag batch was sampled by several versions, so one ranking over all its tokens names
whichever version sampled most of them; here each bucket of lag/versions.py (0, 1, 2, …, negative, unknown) is ranked
on its own. Over a bucket's valid tokens, for each candidate c,

    mean_sq(c) = mean (c − rollout)²

and the nearest is the smallest. A candidate ties with the nearest when their paired per-token difference of squared
δ is within NEAREST_TIE_SE standard errors of 0, clustered by sequence (identical sides always tie; a bucket of one
sequence has no such error, so its candidates tie). The bucket's labelled version is the trainer's version − the lag;
`looks_like_version` is the nearest's version, or the one version every tied candidate shares: "labelled v9, looks
like v5" is then a fact of the data that the stale-weights finding cites (`looks_like_evidence`).
"""

from __future__ import annotations

import math

import numpy as np

from ...config import NEAREST_TIE_SE, RESCORE_LABEL_RATIO, SAFETY_BOUND
from ...model import StepBatch
from ..registry import Scene
from ..stats import dot, k3_per_token
from ..tokens import Tokens, third_side
from .versions import UNKNOWN, _version, has_versions, token_lags, trainer_version

RULE = ("per lag bucket, the candidate with the smallest mean (candidate − rollout)² over the bucket's tokens; "
        f"candidates whose mean differs from it by at most {NEAREST_TIE_SE:g} standard errors (paired, clustered by "
        "sequence) tie")


def rescored_names(batch: StepBatch) -> list[str]:
    """The batch's sides that `rescore` added (named in meta["rescore"]), in the order they were added."""
    how = batch.meta.get("rescore")
    return [n for n in batch.sides if isinstance(how, dict) and n in how]


def weights_by_lag(batch: StepBatch, tok: Tokens) -> dict | None:
    """summary.json's `rescore`: the candidates and, per lag bucket, the one the rollout is nearest to; None when no
    checkpoint was rescored."""
    names = rescored_names(batch)
    if not names:
        return None
    how = batch.meta["rescore"]
    trainer, _ = trainer_version(batch.meta)
    values, ok, left_out = [], np.ones(tok.n, bool), {}
    for name in names:
        found = third_side(batch.sides[name], f"{name} side", batch.n_tokens, tok)
        if isinstance(found, str):
            left_out[name] = found
            continue
        full = np.full(tok.n, np.nan)
        full[found[1]] = found[0]
        ok &= found[1]
        values.append((name, full))
    values.append(("trainer", tok.trainer))
    versions = {n: _version(how[n].get("version")) if isinstance(how.get(n), dict) else None for n, _ in values}
    versions["trainer"] = trainer
    candidates = [{"side": n, "version": versions[n], **({"model": str(how[n].get("model")), "dtype": how[n].get("dtype")}
                                                        if isinstance(how.get(n), dict) else {})} for n, _ in values]
    lags = _lags(batch, tok, trainer)[ok]
    seq, rollout = tok.seq[ok], tok.rollout[ok]
    values = [(n, v[ok]) for n, v in values]
    rows = []
    for lag in _order(lags) if len(values) > 1 else []:  # the trainer alone is no ranking: `left_out` says why
        keep = lags == lag
        row = nearest(rollout[keep], [(n, v[keep]) for n, v in values], seq[keep], versions)
        labelled = trainer - lag if trainer is not None and lag != UNKNOWN else None
        looks = row.pop("looks_like_version")
        rows.append({"lag": "unknown" if lag == UNKNOWN else int(lag), "labelled_version": labelled, **row,
                     "looks_like_version": looks,
                     "as_labelled": looks == labelled if looks is not None and labelled is not None else None})
    return {"candidates": candidates, "trainer_version": trainer, "versions": has_versions(batch),
            "tokens": int(ok.sum()), "tokens_without_every_side": int((~ok).sum()), "left_out": left_out,
            "by_lag": rows, "rule": RULE}


def nearest(rollout: np.ndarray, values: list[tuple[str, np.ndarray]], seq: np.ndarray,
            versions: dict[str, int | None]) -> dict:
    """One bucket: every candidate's mean δ², mean |δ| and KL k3 against the rollout (nearest first), the nearest (None
    when others tie with it), the tied candidates, and the version the tokens look like."""
    rows: list[dict] = []
    sq = {}
    n = max(rollout.size, 1)
    for name, v in values:
        d = v - rollout
        sq[name] = d * d
        rows.append({"side": name, "version": versions.get(name), "mean_sq": float(dot(d, d)) / n,
                     "abs_mean": float(np.abs(d).sum()) / n,
                     "kl_k3": float(k3_per_token(np.clip(d, -SAFETY_BOUND, SAFETY_BOUND)).sum()) / n})
    rows.sort(key=lambda r: r["mean_sq"])
    best = rows[0]["side"]
    tied = [n for n, _ in values if n == best or _ties(sq[n] - sq[best], seq)]  # in the candidates' order
    shared = {versions.get(t) for t in tied}
    looks = shared.pop() if len(shared) == 1 else None
    return {"tokens": int(rollout.size), "sequences": int(np.unique(seq).size),
            "nearest": best if len(tied) == 1 else None, "tied": tied if len(tied) > 1 else [],
            "looks_like_version": looks, "by_side": rows}


def _ties(diff: np.ndarray, seq: np.ndarray) -> bool:
    """Whether a paired per-token difference is within NEAREST_TIE_SE standard errors of 0 (the error clustered by
    sequence: a sequence's tokens move together); an all-zero difference (identical sides) always ties, and so does
    any difference over one sequence (no error across sequences to read it against)."""
    n = diff.size
    if n == 0 or not diff.any():
        return True
    groups = np.unique(seq, return_inverse=True)[1]
    k = int(groups.max()) + 1
    if k < 2:
        return True
    mean = float(diff.mean())
    resid = np.bincount(groups, weights=diff - mean, minlength=k)
    se = math.sqrt(k / (k - 1) * float(dot(resid, resid))) / n
    return abs(mean) <= NEAREST_TIE_SE * se


def _lags(batch: StepBatch, tok: Tokens, trainer: int | None) -> np.ndarray:
    """Each valid token's lag (UNKNOWN without versions)."""
    if not has_versions(batch):
        return np.full(tok.n, UNKNOWN, np.int64)
    lag_tok, seq_lag = token_lags(batch, tok, trainer)
    return lag_tok if lag_tok is not None else seq_lag[tok.seq]


def _order(lags: np.ndarray) -> list[int]:
    """Lag 0 first, then 1, 2, …, then negative lags, then unknown."""
    present = [int(x) for x in np.unique(lags)]
    known = [x for x in present if x != UNKNOWN]
    return ([x for x in known if x >= 0] + [x for x in known if x < 0]
            + ([UNKNOWN] if UNKNOWN in present else []))


def measured(s: Scene) -> dict | None:
    """The batch's `rescore`, as analyze measured it (`given`) or measured here once."""
    return s.given["rescore"] if "rescore" in s.given else s.once(_measure)


def _measure(s: Scene) -> dict | None:
    return weights_by_lag(s.batch, s.tok)


def looks_like_evidence(s: Scene) -> dict:
    """What a rescore adds to the stale-weights finding's evidence: the lag-0 bucket's labelled version, its nearest
    checkpoint and the version its tokens look like, when that is not the label ({} otherwise)."""
    found = measured(s)
    row = next((r for r in (found or {}).get("by_lag", []) if r["lag"] == 0), None)
    if row is None or row["as_labelled"] is not False:
        return {}
    return {"labelled_version": row["labelled_version"], "rescored_nearest": row["nearest"],
            "rescored_looks_like_version": row["looks_like_version"]}


def mislabelled(s: Scene) -> dict | None:
    """The first bucket (lag 0 first) a rescore shows sampled by other weights than its label: its labelled version's
    own weights were scored (a checkpoint of that version, or the trainer's at lag 0), another candidate is nearest
    alone, and the labelled weights' KL k3 against the rollout is at least RESCORE_LABEL_RATIO × the nearest's. What
    `stale_weights` says at any lag, with no lag-0 floor to anchor on (a one-step-off step rescored). None otherwise:
    a nearest among checkpoints that leave the labelled version out is only the nearest of those tried."""
    for row in (measured(s) or {}).get("by_lag", []):
        if row["as_labelled"] is not False or row["nearest"] is None or not isinstance(row["lag"], int):
            continue
        own = [b["kl_k3"] for b in row["by_side"] if b["version"] == row["labelled_version"]]
        near = next(b for b in row["by_side"] if b["side"] == row["nearest"])
        if own and min(own) > 0 and min(own) >= RESCORE_LABEL_RATIO * near["kl_k3"]:
            return {"rescored_lag": row["lag"], "labelled_version": row["labelled_version"],
                    "rescored_nearest": row["nearest"], "rescored_looks_like_version": row["looks_like_version"],
                    "nearest_kl_k3": near["kl_k3"], "labelled_kl_k3": min(own), "tokens": row["tokens"],
                    "threshold": RESCORE_LABEL_RATIO}
    return None

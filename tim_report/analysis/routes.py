"""Routing agreement in mixture-of-experts models: do both sides send each token to the same experts?

About 10% of router decisions disagree per forward pass between engines and about 94% of tokens differ in at least
one layer (Megatron-LM #4256); a token routed to other experts is scored by other weights, so its log-prob moves
for a reason no precision fix removes. With both sides' routed experts (`rollout_routes`, `trainer_routes`: [T,
layers, k] expert ids, from `tim-report capture --routes` or a dump that carries both), per layer: the share of
tokens whose top-k expert set differs; per token: whether any layer flipped; and the mismatch of tokens with and
without a flip, so the page can say how much of the KL routing explains:

    explained = (Σk3 over flipped tokens − flipped × mean k3 of the unflipped) / Σk3, clipped to [0, 1]

(the KL flipped tokens carry beyond what the same tokens would carry at the unflipped tokens' level). Dumps with
one side's routes say what they hold and what is missing; an empty or misaligned routes array, one holding ids that
are no expert index (negative, or beyond int32: compared at their own width, never cast, so ids 2³² apart are not
taken for the same expert), or two sides identical on every token and layer (routing replay, R3, or one array
recorded twice), is said as such.
"""

from __future__ import annotations

import numpy as np

from ..catalogue import findings
from ..model import StepBatch
from .registry import Scene, detector
from .tokens import Tokens

MAX_EXPERT = 2**31 - 1  # an expert index: what int32 holds (capture writes int32; no model has 2³¹ experts)
HOW_TO_GET = ("tim-report capture --routes ... on a mixture-of-experts model records both sides' routed experts "
              "(rollout_routes, trainer_routes); a dump needs both sides' arrays")


def _unavailable(reason: str, **extra) -> dict:
    return {"available": False, "reason": reason, "how_to_get": HOW_TO_GET, **extra}


def _problem(routes: np.ndarray, n_tokens: int) -> str | None:
    if routes.ndim != 3:
        return f"has shape {list(routes.shape)}, not [tokens, layers, k]"
    if routes.size == 0:
        return f"is empty (shape {list(routes.shape)})"
    if routes.shape[0] != n_tokens:
        return f"has {routes.shape[0]} rows for {n_tokens} tokens: misaligned"
    if routes.dtype.kind not in "iu" or routes.min() < 0 or routes.max() > MAX_EXPERT:
        return (f"holds ids outside 0 … {MAX_EXPERT} (from {routes.min()} to {routes.max()}): not expert indices"
                if routes.dtype.kind in "iu" else f"holds {routes.dtype}, not integer expert ids")
    return None


def routing_agreement(batch: StepBatch, tok: Tokens) -> dict:
    """Per-layer flip shares, the share of tokens with any flip, and the mismatch with and without a flip."""
    sides = {"rollout": batch.rollout_routes, "trainer": batch.trainer_routes}
    held = [s for s, r in sides.items() if r is not None]
    dump_note = batch.meta.get("routed_experts")
    if not held:
        return _unavailable(f"the dump records the rollout side's routed experts only ({str(dump_note).split(' (')[0]}), "
                            "not the trainer's, so routing agreement cannot be measured" if dump_note
                            else "the batch has no routed experts", problem="one_side" if dump_note else None)
    if len(held) == 1:
        return _unavailable(f"the batch holds the {held[0]} side's routed experts only; the "
                            f"{'trainer' if held[0] == 'rollout' else 'rollout'} side's are missing", problem="one_side")
    ro, tr = (np.asarray(sides[s]) for s in ("rollout", "trainer"))
    for side, routes in (("rollout", ro), ("trainer", tr)):
        why = _problem(routes, batch.n_tokens)
        if why:
            return _unavailable(f"{side}_routes {why}", problem="empty" if routes.size == 0 else
                                "not_experts" if "expert" in why else "misaligned")
    if ro.shape != tr.shape:
        return _unavailable(f"rollout_routes has shape {list(ro.shape)}, trainer_routes {list(tr.shape)}: misaligned",
                            problem="misaligned")
    ro, tr = ro[tok.index].astype(np.int32), tr[tok.index].astype(np.int32)  # valid tokens; ids checked to fit
    differs = (np.sort(ro, axis=-1) != np.sort(tr, axis=-1)).any(axis=-1)  # [T, layers]: the top-k *set* differs
    flipped = differs.any(axis=-1)
    k3 = tok.k3()
    total = float(k3.sum())
    n_flip = int(flipped.sum())
    kl_flip = float(k3[flipped].mean()) if n_flip else None
    kl_same = float(k3[~flipped].mean()) if n_flip < tok.n else None
    explained = None
    if total > 0 and n_flip and kl_same is not None:
        explained = float(np.clip((float(k3[flipped].sum()) - n_flip * kl_same) / total, 0.0, 1.0))
    abs_d = tok.abs_delta
    return {
        "available": True, "tokens": tok.n, "layers": int(ro.shape[1]), "k": int(ro.shape[2]),
        "identical": n_flip == 0,
        "layer_flip_share": differs.mean(axis=0).tolist(),
        "decision_flip_share": float(differs.mean()),
        "any_flip_share": n_flip / tok.n if tok.n else 0.0,
        "kl_k3_flipped": kl_flip, "kl_k3_unflipped": kl_same,
        "abs_delta_flipped": float(abs_d[flipped].mean()) if n_flip else None,
        "abs_delta_unflipped": float(abs_d[~flipped].mean()) if n_flip < tok.n else None,
        "kl_explained": explained,
    }


def _measured(s: Scene) -> dict:
    return routing_agreement(s.batch, s.tok)


@detector("routing_flips", beside=True, section=("routing_agreement", _measured))
def _flips(s: Scene) -> dict | None:
    """Routing agreement beside the floor: a finding when both sides' routes were compared."""
    routes = s.once(_measured)
    if not routes.get("available"):
        return None
    keys = ("any_flip_share", "decision_flip_share", "kl_k3_flipped", "kl_k3_unflipped", "kl_explained", "identical",
            "layers", "k")
    return findings.make("routing_flips", {k: routes[k] for k in keys}, s.dt)


@detector("routes_unusable", beside=True)
def _unusable_routes(s: Scene) -> dict | None:
    """A routes array that cannot be compared (empty, misaligned, ids that are no expert index)."""
    routes = s.once(_measured)
    if routes.get("available") or routes.get("problem") not in ("empty", "misaligned", "not_experts"):
        return None
    return findings.make("routes_unusable", {"reason": routes["reason"]}, s.dt)

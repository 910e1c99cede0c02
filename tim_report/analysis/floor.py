"""The trainer's own floor: how far the trainer disagrees with itself on the same tokens.

A trainer recomputing log-probs under another batch composition (micro-batch size, padding, sequence order) does not
reproduce itself bit for bit (verl #6280: `pg_clipfrac` above zero on-policy until the log-prob micro-batch equals the
actor's; TRL #6789: the bf16 trainer alone, chunk 1 vs chunk 8, puts 8% of tokens outside the clip band). With a
second trainer scoring of the batch's tokens (`floor_logp`, from `tim-report capture --trainer-floor` or a dump's key)

    φ = trainer_logp − floor_logp      the trainer against itself
    δ = trainer_logp − rollout_logp    the rollout against the trainer

and the floor says how much of the mismatch the trainer's own noise already explains: its KL k3 against δ's, the
ESS it alone loses, the PPO clip and TIS triggers it alone fires, and whether a configured clip or TIS threshold sits
inside it (crossed by the trainer's noise alone).
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import findings
from ..config import SAFETY_BOUND, Thresholds
from ..model import StepBatch
from .registry import Scene, detector
from .stats import k3_per_token, kish_ess
from .tokens import Tokens, third_side

HOW_TO_GET = ("tim-report capture --trainer-floor ... : the trainer scores the sampled tokens a second time, one "
              "sequence per micro-batch in reverse order, and saves them as floor_logp (or pass an existing array "
              "with --key floor=NAME)")


def _unavailable(reason: str) -> dict:
    return {"available": False, "reason": reason, "how_to_get": HOW_TO_GET}


def trainer_floor(batch: StepBatch, tok: Tokens, th: Thresholds) -> dict:
    """The floor's KL, ESS loss, clip and TIS triggers, and each against the rollout-vs-trainer mismatch."""
    if batch.floor_logp is None:
        return _unavailable("the batch has no floor_logp (a second trainer scoring of the same tokens), so the "
                            "trainer's own noise cannot be told apart from the mismatch")
    found = third_side(batch.floor_logp, "floor_logp", batch.n_tokens, tok)
    if isinstance(found, str):
        return _unavailable(found)
    floor, ok = found
    part = tok.subset(ok)
    phi = np.clip(part.trainer - floor, -SAFETY_BOUND, SAFETY_BOUND)
    delta = np.clip(part.log_r, -SAFETY_BOUND, SAFETY_BOUND)
    lo, hi = math.log(th.ppo_clip[0]), math.log(th.ppo_clip[1])
    tis = math.log(th.tis_token_cap)
    floor_kl, kl = float(k3_per_token(phi).mean()), float(k3_per_token(delta).mean())
    floor_ess, ess = kish_ess(phi), kish_ess(delta)
    clip_phi, clip_delta = (phi < lo) | (phi > hi), (delta < lo) | (delta > hi)
    n_clip = int(clip_delta.sum())
    abs_phi = np.abs(phi)
    return {
        "available": True, "tokens": int(ok.sum()), "tokens_without_floor": int((~ok).sum()),
        "definition": "φ = trainer − floor (the trainer against itself under another batch composition)",
        "identical_fraction": float(np.mean(phi == 0.0)),
        "abs_mean": float(abs_phi.mean()), "abs_max": float(abs_phi.max()), "abs_p99": float(np.quantile(abs_phi, 0.99)),
        "kl_k3": floor_kl, "mismatch_kl_k3": kl,
        "kl_share": floor_kl / kl if kl > 0 else None,  # > 1: the mismatch is inside the trainer's own noise
        "ess": floor_ess, "mismatch_ess": ess, "ess_loss": 1 - floor_ess, "mismatch_ess_loss": 1 - ess,
        "ess_loss_share": (1 - floor_ess) / (1 - ess) if ess < 1 else None,
        "clip_fraction": float(clip_phi.mean()), "mismatch_clip_fraction": float(clip_delta.mean()),
        "clipped_explained": float((clip_phi & clip_delta).sum() / n_clip) if n_clip else None,
        "tis_fraction": float(np.mean(phi > tis)), "mismatch_tis_fraction": float(np.mean(delta > tis)),
        "clip_inside_floor": bool(clip_phi.any()), "tis_inside_floor": bool((phi > tis).any()),
        "clip_band": [th.ppo_clip[0], th.ppo_clip[1]], "tis_cap": th.tis_token_cap,
    }


def _measured(s: Scene) -> dict:
    return trainer_floor(s.batch, s.tok, s.th)


@detector("trainer_floor", beside=True, section=("trainer_floor", _measured))
def _floor_finding(s: Scene) -> dict | None:
    """The trainer's own floor beside the precision gap, and its finding among the others (by severity)."""
    floor = s.once(_measured)
    if not floor.get("available"):
        return None
    keys = ("kl_k3", "kl_share", "clip_fraction", "clipped_explained", "clip_inside_floor", "tis_fraction",
            "ess_loss_share", "clip_band", "abs_max")
    return findings.make("trainer_floor", {k: floor[k] for k in keys}, s.dt)

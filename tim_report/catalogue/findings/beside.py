"""The measurements beside the verdict (analysis/precision_gap.py, floor.py, routes.py, chain.py): they never move the
regime or lead the verdict.
"""

from __future__ import annotations

from ...config import FLOOR_CLIP_WARN, ROUTING_EXPLAINS_WARN
from .. import chain
from ..numbers import fmt, pct, times
from .entry import Finding, always


def _floor_share(share: float | None) -> str:
    """The floor's KL against the mismatch's: a share, or a multiple when the mismatch lies inside the floor."""
    if share is None:
        return ""
    if share > 1:
        return f", {times(share)} the mismatch's: the mismatch is within the trainer's own noise"
    return f", {pct(share)} of the mismatch's"


ENTRIES = (
    Finding(
        "precision_gap", always("info"),
        lambda w: (f"Precision alone (β) explains {pct(w['beta_share_sq'])} of the log-ratio (Σβ²/(Σα²+Σβ²)); PPO clips "
                   f"{pct(w['clip_fraction_beta'])} of tokens on β alone") if w["beta_share_sq"] is not None else
                  "Precision gap (β) is zero",
        lambda w: "the precision gap β between the trainer's weights in two precisions",
        lambda w: "β = trainer − shadow compares the trainer's own weights in two precisions, so it is pure numerical "
                  "precision; clipping on β alone (precision-only clipping) throws away gradient although the policy has "
                  "not moved.",
        lambda w: "If β dominates and clips a material share, align precision (fp16 both sides, fp32 LM head, same "
                  "attention kernels) rather than hunting a bug; if α dominates, the difference is engine / weights / context.",
        short="precision gap", meaning="precision alone explains part of the gap",
        evidence_names={"alpha_abs_mean": ("mean |α| (engine)", "num"), "beta_abs_mean": ("mean |β| (precision)", "num"),
                        "beta_bias": ("β bias (nats)", "num"), "beta_share_abs": ("β's share of Σ|log r|", "share"),
                        "beta_share_sq": ("β's share of Σ(log r)²", "share"),
                        "clip_fraction_beta": ("PPO-clipped on β alone", "share"),
                        "clip_fraction_total": ("PPO-clipped in all", "share"),
                        "corr_beta_advantage": ("correlation of β with advantage", "num")}),
    Finding(
        "trainer_floor", lambda w, dt: "warn" if w["clip_fraction"] >= FLOOR_CLIP_WARN else "info",
        lambda w: (f"The trainer's own floor: scoring the same tokens under another batch composition moves its log-probs "
                   f"by KL k3 {fmt(w['kl_k3'])}" + _floor_share(w["kl_share"])
                   + f"; PPO clips {pct(w['clip_fraction'])} of tokens on that alone"),
        lambda w: "the trainer's own noise floor (the same tokens scored twice by the trainer)",
        lambda w: ("Batch composition (micro-batch size, padding, sequence order) changes the reduction order of the "
                   "trainer's kernels, so its log-probs move by rounding alone. A mismatch at or below this floor is not "
                   "the rollout engine's doing"
                   + (f", and the clip band {fmt(w['clip_band'][0])}–{fmt(w['clip_band'][1])} sits inside the floor: "
                      f"{pct(w['clip_fraction'])} of tokens cross it on the trainer's noise alone ({pct(w['clipped_explained'])} "
                      "of the clipped tokens)." if w["clip_inside_floor"] else ".")),
        lambda w: ("Judge the rollout mismatch against this floor, not against zero. If the floor clips tokens, make the "
                   "log-prob micro-batch size equal the actor's (verl #6280) or use batch-invariant kernels before "
                   "tightening the clip or TIS thresholds; a floor near the mismatch means a rollout-side fix cannot help "
                   "much."),
        short="trainer floor", meaning="the trainer's own noise (another batch composition) crosses the clip band",
        glance=lambda e: "the trainer's own floor",
        evidence_names={"kl_share": ("floor's share of the KL", "x_or_share"),
                        "clip_fraction": ("PPO-clipped on the floor", "share"),
                        "clipped_explained": ("clipped tokens it explains", "share"),
                        "clip_inside_floor": ("clip band inside the floor", "bool"),
                        "tis_fraction": ("TIS-capped on the floor", "share"),
                        "ess_loss_share": ("its share of 1 − ESS", "x_or_share"), "clip_band": ("clip band", "num"),
                        "abs_max": ("max |φ|", "num")}),
    Finding(
        "routing_flips", lambda w, dt: "warn" if (w["kl_explained"] or 0) >= ROUTING_EXPLAINS_WARN else "info",
        lambda w: ("Routing is identical on both sides on every token and layer: routing replay (R3) or one routes "
                   "array recorded twice, so routing explains none of the mismatch") if w["identical"] else
                  (f"Routing: {pct(w['any_flip_share'])} of tokens go to other experts in at least one layer "
                   f"({pct(w['decision_flip_share'])} of the {w['layers']}-layer top-{w['k']} decisions); their KL k3 is "
                   f"{fmt(w['kl_k3_flipped'])} against {fmt(w['kl_k3_unflipped'])}, so routing explains "
                   f"{pct(w['kl_explained'])} of the KL"),
        lambda w: "tokens routed to different experts on the two sides",
        lambda w: ("A token whose router picks other experts is scored by other weights: near-tied router logits flip "
                   "under bf16 rounding or another kernel, and the flip moves the log-prob far more than rounding "
                   "alone. No precision fix of the rest removes it."),
        lambda w: ("If routing explains much of the KL, replay the rollout's routes in the trainer (routing replay, R3) "
                   "or keep the router in fp32; look at the layers with the most flips (the page's table)."),
        short="routing flips", meaning="tokens are routed to different experts on the two sides",
        glance=lambda e: f"routing flips ({pct(e.get('any_flip_share'))} of tokens)",
        evidence_names={"any_flip_share": ("tokens with a routing flip", "share"),
                        "decision_flip_share": ("routing decisions flipped", "share"),
                        "kl_k3_flipped": ("KL k3, flipped tokens", "num"), "kl_k3_unflipped": ("KL k3, the others", "num"),
                        "kl_explained": ("KL routing explains", "share"), "identical": ("identical routes", "bool"),
                        "layers": ("layers", "count"), "k": ("experts per token", "count")}),
    Finding(
        "routes_unusable", always("warn"),
        lambda w: f"The routed-experts arrays cannot be compared: {w['reason']}",
        lambda w: "routed-experts arrays that do not line up with the tokens",
        lambda w: ("A routes array should hold [tokens, layers, k] expert ids for exactly the tokens of the log-probs; an "
                   "empty or misaligned one was cut, padded or taken from another batch, and one holding ids no expert "
                   "has (negative, or beyond 2³¹ − 1) was not written as expert indices."),
        lambda w: "Check where the dump takes its routed experts (response-only vs whole sequence, padding) and that "
                  "both sides record the same tokens.",
        short="routes unusable", meaning="the routed-experts arrays do not line up with the tokens",
        evidence_names={"reason": ("why", "text")}),
    Finding("chain_link", always("info"), chain.finding_title, chain.finding_problem, chain.finding_cause,
            chain.finding_check, short="chain link", meaning="one link of the chain carries the mismatch"),
)

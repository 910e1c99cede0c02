"""An LM head kept in fp32 on one side only: what the batch's meta says each side did, and what the data say it cost.

Keeping the output projection in fp32 takes the bf16 rounding out of the logits, the largest single source of the
engine-vs-trainer mismatch (ScaleRL; MiniMax-M1), but only when both sides do it: with bf16 bodies on both sides the two
heads otherwise round to the same grid, and one fp32 head alone leaves the other side's rounding unmatched, so the
multiplicative error gets worse (NeMo-RL #3936: "enabling this on only one engine makes the multiplicative error
worse, since both otherwise round to the same grid"). The meta names it (`capture --lm-head-fp32 rollout|trainer`
writes `lm_head_fp32: {rollout, trainer}`; a framework's config, or `--meta lm_head_fp32=rollout`), the dtypes say the
bodies are the same low precision, and the data say what it cost: the token multiplicative error and the mismatch
against the precision's noise ceilings.
"""

from __future__ import annotations

from ..catalogue import findings
from ..model import StepBatch
from .registry import Scene, detector

LOW = ("bf16", "fp16")


def fp32_heads(meta: dict) -> dict[str, bool] | None:
    """{rollout, trainer} → whether that side's LM head is fp32 by the meta's `lm_head_fp32` (a dict of the two, or
    "rollout" | "trainer" | "both" | "none"); None when the meta does not say."""
    v = meta.get("lm_head_fp32")
    if isinstance(v, dict) and {"rollout", "trainer"} <= set(v):
        return {side: bool(v[side]) for side in ("rollout", "trainer")}
    if isinstance(v, str) and v.strip().lower() in ("rollout", "trainer", "both", "none"):
        v = v.strip().lower()
        return {side: v in (side, "both") for side in ("rollout", "trainer")}
    return None


def one_sided_head(batch: StepBatch) -> str | None:
    """The side whose LM head alone is fp32 while both bodies run the same low precision (one side's dtype not
    recorded is read as the other's: TRL records its trainer's, its vLLM engine serves the model's own); None
    otherwise (both heads fp32, neither, bodies of different precisions, or the meta does not say)."""
    heads = fp32_heads(batch.meta)
    dtypes = {str(batch.meta.get(f"{side}_dtype") or "").lower() for side in ("rollout", "trainer")} - {"", "none"}
    if heads is None or heads["rollout"] == heads["trainer"] or len(dtypes) != 1 or not dtypes <= set(LOW):
        return None
    return "rollout" if heads["rollout"] else "trainer"


@detector("lm_head_one_side")
def _one_side(s: Scene) -> dict | None:
    side = one_sided_head(s.batch)
    if side is None:
        return None
    m = s.metrics
    kl, kl_se = m["kl_k3"], m.get("kl_k3_se") or 0.0
    ad, ad_se = m["abs_delta_mean"], m.get("abs_delta_mean_se") or 0.0
    beyond = (kl - 2 * kl_se) > s.dt.noise_kl_max or (ad - 2 * ad_se) > s.dt.noise_abs_delta_max
    return findings.make("lm_head_one_side", {"fp32_side_is_trainer": side == "trainer",
                                              "body_dtype": str(s.batch.meta.get("rollout_dtype")
                                                                or s.batch.meta.get("trainer_dtype")),
                                              "token_mult_prob_error": m.get("token_mult_prob_error"), "kl_k3": kl,
                                              "abs_delta_mean": ad, "beyond_noise": beyond,
                                              "threshold_kl": s.dt.noise_kl_max,
                                              "threshold_abs_delta": s.dt.noise_abs_delta_max}, s.dt, side=side)

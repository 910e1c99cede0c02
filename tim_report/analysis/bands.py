"""Which published noise band a batch is read against: model class (dense / MoE) and precision, from meta.

An MoE in bf16 shows KL 1e-3 to 1e-1 where a dense model shows at most 1e-2 (config.PUBLISHED_BANDS), so
"3e-3: noise or bug?" depends on the model. The class comes from meta, in this order: `model_class`
(`--meta model_class=moe`), an expert count (`num_experts`, `num_local_experts`, `n_routed_experts` > 1),
routed-expert data in the dump (`routed_experts`), a model name that names an MoE ("moe", "mixtral",
"deepseek-v2/v3", an active-parameter tag like "A3B"); else dense. fp8 when either side's dtype says so.
"""

from __future__ import annotations

import re
from dataclasses import replace

from ..catalogue import verdicts
from ..config import PUBLISHED_BANDS, DiagnosisThresholds, PublishedBand

MOE_NAME = re.compile(r"moe|mixtral|deepseek-v[23]|(?<![a-z0-9])a\d+(\.\d+)?b(?![a-z0-9])")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def model_class(meta: dict) -> tuple[str, str]:
    """('dense' | 'moe', why)."""
    declared = str(meta.get("model_class") or "").lower()
    if declared in ("dense", "moe"):
        return declared, f"meta model_class={declared}"
    for key in EXPERT_KEYS:
        try:
            if int(meta.get(key) or 0) > 1:
                return "moe", f"meta {key}={int(meta[key])}"
        except (TypeError, ValueError):
            pass
    if meta.get("routed_experts"):
        return "moe", "the dump holds routed-expert data"
    name = str(meta.get("model") or meta.get("model_name") or "")
    if MOE_NAME.search(name.lower()):
        return "moe", f"the model name '{name[:80]}' names a mixture of experts"
    return "dense", "no MoE marker in meta (set --meta model_class=moe for a mixture of experts)"


def precision(meta: dict) -> tuple[str, str]:
    """('bf16' | 'fp8', why): fp8 when either side's dtype is an 8-bit float."""
    for key in ("rollout_dtype", "trainer_dtype"):
        v = str(meta.get(key) or "").lower()
        if "fp8" in v or "e4m3" in v or "e5m2" in v or "float8" in v:
            return "fp8", f"meta {key}={meta[key]}"
    return "bf16", "no fp8 side in meta (bf16, fp16 and fp32 read against the bf16 band)"


def choose_band(meta: dict) -> tuple[PublishedBand, str]:
    cls, why_cls = model_class(meta if isinstance(meta, dict) else {})
    prec, why_prec = precision(meta if isinstance(meta, dict) else {})
    return PUBLISHED_BANDS[(cls, prec)], f"{why_cls}; {why_prec}"


def apply_band(dt: DiagnosisThresholds, band: PublishedBand) -> DiagnosisThresholds:
    """The band's noise ceilings, where the caller left the defaults (a value set on purpose wins)."""
    default = DiagnosisThresholds()
    changes: dict = {}
    for name, value in (("noise_kl_max", band.kl_k3[1]), ("noise_abs_delta_max", band.abs_delta_mean_max)):
        if name not in dt.set_by_caller and getattr(dt, name) == getattr(default, name):
            changes[name] = value
    return replace(dt, **changes) if changes else dt


def band_summary(band: PublishedBand, why: str, kl: float, dt: DiagnosisThresholds) -> dict:
    """summary.json's diagnosis.band: which band, why, and one sentence placing this batch's KL in it."""
    lo, hi = band.kl_k3
    dense = PUBLISHED_BANDS[("dense", band.precision)]

    def where(b: PublishedBand) -> str:
        return "low" if kl < b.kl_k3[0] else "typical" if kl <= b.kl_k3[1] else "high"

    other = (dense.name, where(dense)) if band is not dense and where(dense) != where(band) else None
    return {"name": band.name, "model_class": band.model_class, "precision": band.precision, "kl_k3": [lo, hi],
            "abs_delta_mean_max": band.abs_delta_mean_max, "noise_kl_max": dt.noise_kl_max,
            "noise_abs_delta_max": dt.noise_abs_delta_max, "why": why, "source": band.source,
            "reading": verdicts.band_reading(kl, band.name, lo, hi, where(band), other)}

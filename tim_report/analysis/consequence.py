"""What a systematic finding does to training, in the units a trainer acts on, and which side it is on.

A finding's shape (δ ≤ 0 on every token, a slope on the log-prob) says there is a fault; whether it matters is a
question of size. `consequence` measures the fault's effect on this batch, at its own sequence lengths: the
per-token bias and mean |δ| against the precision's noise band, the share of tokens PPO would clip and TIS / IcePop
would truncate or mask because of it, and the sequence-level importance weight the bias alone gives at the mean and
90th-percentile length (with the length from which a sequence-level cap would fire). `material` is the rule the
catalogue's severity follows (an `error`, "Do not train", only when material); docs/diagnosis.md has the numbers.

`fault_side` answers which side is off for every finding that can have one: named, or "undetermined" with the
evidence and about how many tokens would decide it (the sampler identity E_q[p/q] = 1 tested for significance).

What differs between findings is declared by their catalogue entries, never by a table here: whether the effect is a
per-token offset (`Finding.offset`) and which side the finding's own evidence names (`Finding.side`).
"""

from __future__ import annotations

import math

import numpy as np

from ..catalogue import severity
from ..catalogue.findings import FINDINGS
from ..config import CONSEQUENCE_CAP, CONSEQUENCE_TOKEN_SHARE, DETECTOR_MAX_TOKENS, ENV_LEAD_MULTIPLE, DiagnosisThresholds
from .stats import cluster_mean_se
from .tokens import Tokens


def consequence(tok: Tokens, finding_id: str, dt: DiagnosisThresholds, ppo_clip: tuple[float, float],
                cap: float = CONSEQUENCE_CAP) -> dict:
    """The finding's effect on this batch: bias, spread, clip and mask shares due to it, sequence-level weights.

    For a finding whose effect is a per-token offset of δ (its entry's `offset`), "because of it" is what the offset
    adds to the shares (the same tokens with the bias removed are the baseline). For the others the finding is the
    whole mismatch: the batch's own shares are its doing (noise under a precision band clips well under 1% of tokens)."""
    offset = FINDINGS[finding_id].offset
    delta = tok.delta
    bias, bias_se = tok.mean_se_of("delta")
    abs_mean, abs_se = tok.mean_se_of("abs_delta")
    lo, hi = math.log(ppo_clip[0]), math.log(ppo_clip[1])
    log_cap = math.log(cap)

    def shares(d: np.ndarray) -> tuple[float, float]:
        return float(((d < lo) | (d > hi)).mean()), float((np.abs(d) > log_cap).mean())

    clip, outside = shares(delta)
    if offset:
        base_clip, base_outside = shares(delta - bias)
        clip, outside = max(0.0, clip - base_clip), max(0.0, outside - base_outside)
    lengths = tok.counts[tok.present].astype(np.float64)
    mean_len = float(lengths.mean()) if lengths.size else 0.0
    p90_len = float(np.percentile(lengths, 90)) if lengths.size else 0.0
    significant = bias_se > 0 and abs(bias) / bias_se >= dt.z
    reasons = []
    if max(clip, outside) >= CONSEQUENCE_TOKEN_SHARE:
        reasons.append("tokens")
    if abs(bias) >= dt.noise_abs_delta_max and significant:
        reasons.append("bias")
    if not offset and abs_mean - 2 * abs_se > dt.noise_abs_delta_max:
        reasons.append("spread")
    return {
        "bias": bias, "bias_se": bias_se, "abs_delta_mean": abs_mean, "band_abs_delta": dt.noise_abs_delta_max,
        "bias_share_of_band": abs(bias) / dt.noise_abs_delta_max if dt.noise_abs_delta_max > 0 else None,
        "ppo_clip_share": clip, "outside_cap_share": outside, "cap": cap, "ppo_clip": list(ppo_clip),
        "mean_length": mean_len, "p90_length": p90_len,
        "seq_weight_mean": _weight(bias, mean_len), "seq_weight_p90": _weight(bias, p90_len),
        "cap_length": log_cap / abs(bias) if bias else None,
        "material": bool(reasons), "material_by": reasons, "token_share_material": CONSEQUENCE_TOKEN_SHARE,
    }


def _weight(bias: float, length: float) -> float:
    return math.exp(max(-700.0, min(700.0, bias * length)))


def side_test(tok: Tokens, dt: DiagnosisThresholds, keep: np.ndarray | None = None) -> dict:
    """The sampler identity as a significance test: the sampler side's log mean ratio is 0 in expectation.

    Named when one side's log mean is within 3 SE of 0 while the other's is z ≥ `dt.z` away from it and the gap
    between them is as significant; otherwise undetermined, with the tokens that the gap measured here would need
    to reach z (None when no count would: a constant offset moves both means alike, and a side whose mean is
    significantly off 0 on both counts means neither side scored the sampling distribution)."""
    idx = np.flatnonzero(np.ones(tok.n, bool) if keep is None else keep)
    idx = idx[:: max(1, -(-idx.shape[0] // DETECTOR_MAX_TOKENS))]
    out: dict = {"sampler": None, "tokens": int(idx.shape[0]), "tokens_to_decide": None}
    if idx.shape[0] < dt.min_tokens:
        return out
    log_r, seq = tok.log_r[idx], tok.seq[idx]
    stats = {}
    for name, x in (("fwd", log_r), ("inv", -log_r)):
        top = float(x.max())
        m, se = cluster_mean_se(np.exp(x - top), seq)
        stats[name] = (top + math.log(m), se / m if m > 0 else math.inf)
    (fwd, fwd_se), (inv, inv_se) = stats["fwd"], stats["inv"]
    out.update(log_mean_ratio=fwd, log_mean_ratio_se=fwd_se, log_mean_inverse=inv, log_mean_inverse_se=inv_se)
    near, far = ("fwd", "inv") if abs(fwd) <= abs(inv) else ("inv", "fwd")
    (n_v, n_se), (f_v, f_se) = stats[near], stats[far]
    gap, gap_se = abs(f_v) - abs(n_v), math.hypot(n_se, f_se)
    if not (math.isfinite(gap_se) and gap_se > 0 and gap > 0):
        return out
    z = min(gap / gap_se, abs(f_v) / f_se if f_se > 0 else math.inf)  # one sequence: no spread, no SE
    out["z"] = z
    if abs(n_v) > 3 * n_se:
        return out  # neither side's log-probs are the sampler's (a processed or shifted side): no count decides it
    if z >= dt.z:
        out["sampler"] = "rollout" if near == "fwd" else "trainer"
    else:
        out["tokens_to_decide"] = int(math.ceil(out["tokens"] * (dt.z / z) ** 2))
    return out


def fault_side(finding: dict, test: dict) -> dict:
    """{"side": "rollout" | "trainer" | "undetermined", "basis": ..., ...}: the side at fault. The side the finding's
    own evidence names (its entry's `side`: a placeholder side, a declared processing, an off-by-one no log-prob can
    place) comes first; otherwise the sampler test (`side_test`) decides."""
    rule = FINDINGS[finding["id"]].side
    who = rule.who(finding["evidence"]) if rule is not None else None
    if rule is not None and who in ("rollout", "trainer"):
        return {"side": who, "basis": rule.basis}
    numbers = {k: test[k] for k in ("log_mean_ratio", "log_mean_inverse", "z", "tokens", "tokens_to_decide") if k in test}
    if rule is not None and who == "undetermined":
        return {"side": "undetermined", "basis": rule.basis, **numbers, "tokens_to_decide": None}
    if test.get("sampler"):
        return {"side": "trainer" if test["sampler"] == "rollout" else "rollout", "basis": "sampler_test", **numbers}
    return {"side": "undetermined", "basis": "sampler_test", **numbers}


def lead_env(by_env: dict | None, kl: float | None) -> str | None:
    """The environment that holds most of the mismatch (KL k3 at least ENV_LEAD_MULTIPLE× the batch's), or None."""
    if not by_env or kl is None or not kl > 0:
        return None
    names, k3 = by_env.get("name") or [], by_env.get("k3_mean") or []
    scored = [(k, str(n)) for n, k in zip(names, k3) if k is not None and math.isfinite(k)]
    if len(scored) < 2:
        return None
    k, name = max(scored)
    return name if k >= ENV_LEAD_MULTIPLE * kl else None


def glance_of(diagnosis: dict, by_env: dict | None, kl: float | None) -> str:
    """The diagnosis in one line: regime, leading finding with its side and place (catalogue.severity.glance)."""
    found = diagnosis.get("findings") or []
    lead = next((f for f in found if f.get("severity") != "info"), None)
    if lead is None:  # an info finding that explains the whole mismatch (declared truncated sampling) leads the glance too
        lead = next((f for f in found if FINDINGS[f["id"]].leads_as_info), None)
    return severity.glance(diagnosis.get("regime"), lead, lead_env(by_env, kl))

"""Diagnosis: is the mismatch numerical noise or a bug? (design §5)

`diagnose()` returns the `diagnosis` object of summary.json:

    {"regime": "identical" | "numerical_noise" | "elevated" | "systematic",
     "verdict": one plain sentence, "evidence": {name: number}, "what_to_check": text,
     "findings": [{"id", "severity": "info" | "warn" | "error", "title", "problem" (a noun phrase),
                   "evidence", "likely_cause", "what_to_check"}],
     "precision_gap": {...} or {"available": false, "reason", "how_to_get"},
     "band": the published noise band the batch is read against (model class, precision) and why,
     "thresholds": the DiagnosisThresholds used (noise ceilings from the band unless overridden)}

The detectors live in `detectors.py` (whole-batch faults) and `localise.py` (where the mismatch
sits: first token, an onset position, turn boundaries, mixed weight versions); this module runs them, decides the regime and writes the
verdict. docs/diagnosis.md explains each detector and shows the confusion matrix the
fault-injection tests produce (scripts/diagnosis_matrix.py).
"""

from __future__ import annotations

import numpy as np

from ..catalogue import findings as words
from ..catalogue import severity
from ..config import PPO_EPS_HIGH, PPO_EPS_LOW, SEVERITIES, DiagnosisThresholds
from ..model import StepBatch
from .bands import apply_band, band_summary, choose_band
from .consequence import consequence, fault_side, side_test
from .detectors import (
    declared_processing,
    detect_drift,
    detect_dummy_zero,
    detect_low_prob_tail,
    detect_one_side_broken,
    detect_processed,
    detect_shift,
    detect_temperature,
    sampler_side,
)
from .localise import (
    detect_first_token,
    detect_mixed_versions,
    detect_position_onset,
    detect_turn_boundary,
)
from .precision_gap import precision_gap
from .stats import cluster_mean_se, exp_or_inf
from .tokens import Tokens
from .usable import unusable_input


def diagnose(batch: StepBatch, tok: Tokens, metrics: dict, thresholds: DiagnosisThresholds | None = None,
             ppo_eps: tuple[float, float] = (PPO_EPS_LOW, PPO_EPS_HIGH)) -> dict:
    """The `diagnosis` object of summary.json for one batch (`metrics` is `summary_metrics`' result)."""
    band, why = choose_band(batch.meta)
    dt = apply_band(thresholds or DiagnosisThresholds(), band)
    gap = precision_gap(batch, tok, *ppo_eps)
    unusable = unusable_input(batch, tok, dt)  # an input problem leads: no verdict is drawn from what is left
    if unusable is None and _is_identical(tok, dt, metrics["abs_delta_max"]):
        regime = "identical"
        findings = [f for f in (detect_mixed_versions(batch, tok, dt),) if f]  # said even when nothing differs
    else:
        findings = ([unusable] if unusable else []) + _run_detectors(batch, tok, metrics, dt)
        if unusable is None:
            findings = _weighed(findings, tok, dt, ppo_eps, band.name)
        regime = _regime(findings, tok, metrics, dt)
        # the tail's advice depends on the regime: "expected for numerical noise" only where it is noise
        findings = [words.make(f["id"], f["evidence"], dt, regime=regime) if f["id"] == "low_prob_tail" else f
                    for f in findings]
    if gap.get("available"):
        findings.append(_gap_finding(gap, dt))
    findings.sort(key=lambda f: -SEVERITIES.index(f["severity"]))  # stable: detector order within a severity
    verdict, what_to_check = _verdict(regime, findings, metrics, bool(gap.get("available")), band.name)
    return {
        "regime": regime,
        "verdict": verdict,
        "evidence": _evidence(tok, metrics),
        "what_to_check": what_to_check,
        "findings": findings,
        "precision_gap": gap,
        "band": band_summary(band, why, metrics["kl_k3"], dt),
        "thresholds": dt.to_dict(),
    }


def _weighed(findings: list[dict], tok: Tokens, dt: DiagnosisThresholds, ppo_eps: tuple[float, float],
             band: str) -> list[dict]:
    """Each systematic finding with what it does to training and its side; an immaterial error becomes a warn."""
    clip = (1 - ppo_eps[0], 1 + ppo_eps[1])
    test = None
    out = []
    for f in findings:
        if f["id"] in severity.STATED + severity.SIDED and f["severity"] != "info":
            test = test or side_test(tok, dt)
            effect = consequence(tok, f["id"], dt, clip) if f["id"] in severity.STATED else None
            f = severity.weigh(f, effect, fault_side(f, test), band)
        out.append(f)
    return out


def _evidence(tok: Tokens, metrics: dict) -> dict:
    """The numbers behind every regime: size, spread, bias, agreement, and what they do to IS weights."""
    m = metrics
    return {"tokens": tok.n, "kl_k3": m["kl_k3"], "kl_k3_se": m.get("kl_k3_se") or 0.0, "abs_delta_mean": m["abs_delta_mean"],
            "abs_delta_max": m["abs_delta_max"], "bias": m["bias"], "corr_logp": m.get("corr_logp"),
            "ppl_ratio": exp_or_inf(abs(float(tok.trainer.mean()) - float(tok.rollout.mean()))), "ess": m.get("ess"),
            "phantom_clip": m.get("phantom_clip")}


def _is_identical(tok: Tokens, dt: DiagnosisThresholds, abs_delta_max: float) -> bool:
    if abs_delta_max <= dt.identical_atol:
        return True
    if abs_delta_max > dt.identical_atol + dt.identical_rtol * max(-float(tok.rollout.min()), -float(tok.trainer.min())):
        return False  # beyond the loosest per-token tolerance: no need to look token by token
    tol = dt.identical_atol + dt.identical_rtol * np.maximum(np.abs(tok.rollout), np.abs(tok.trainer))
    return bool(np.all(np.abs(tok.delta) <= tol))


def _run_detectors(batch: StepBatch, tok: Tokens, metrics: dict, dt: DiagnosisThresholds) -> list[dict]:
    """Every detector, most specific first; a finding that explains another's signal suppresses or softens it."""
    corr = metrics.get("corr_logp")
    bias, bias_se = metrics["bias"], metrics.get("bias_se") or 0.0
    dummy, dummy_hit = detect_dummy_zero(tok, dt)
    processed = detect_processed(tok, dt, corr, declared_processing(batch.meta))
    sampler = sampler_side(tok, dt, ~dummy_hit)  # whose log-probs the tokens were drawn from: the other side is off
    temperature = None if processed else detect_temperature(tok, dt, corr, ~dummy_hit, sampler)
    shift = detect_shift(tok, dt)
    # a shifted trainer decorrelates the log-probs by itself: no separate "broken side" claim then
    broken = None if shift else detect_one_side_broken(tok, dt, corr, ~dummy_hit, explained=bool(processed or temperature),
                                                        bias=(bias, bias_se), sampler=sampler)
    if shift and dummy and dummy["evidence"]["trainer_side"]:
        dummy = None  # a shifted trainer's exact zeros are its confident neighbours' log-probs, not placeholders
    findings = [f for f in (shift, dummy, processed, temperature, broken) if f]
    rest = tok.subset(~dummy_hit)  # placeholder zeros would dominate per-sequence sums
    if rest is not tok and rest.n:
        bias, bias_se = cluster_mean_se(rest.delta, rest.seq)
    cause = next((f["id"] for f in (processed, temperature, broken) if f), None)
    drift = detect_drift(rest, dt, bias, bias_se, cause) if rest.n else None
    # where it sits: only meaningful when no whole-batch fault (a shift, a one-sided transformation) explains it
    where = []
    if not (shift or processed or temperature or broken):
        turns = detect_turn_boundary(rest, batch.turn, dt)
        where = [detect_first_token(rest, dt), turns,
                 detect_position_onset(rest, dt, "turn_boundary" if turns else None)]
    return findings + [f for f in (*where, detect_mixed_versions(batch, rest, dt), drift, detect_low_prob_tail(tok, dt)) if f]


def _regime(findings: list[dict], tok: Tokens, metrics: dict, dt: DiagnosisThresholds) -> str:
    """systematic on an error finding or decorrelated log-probs; elevated on a warning or numbers beyond noise."""
    corr = metrics.get("corr_logp")
    kl, kl_se = metrics["kl_k3"], metrics.get("kl_k3_se") or 0.0
    ad, ad_se = metrics["abs_delta_mean"], metrics.get("abs_delta_mean_se") or 0.0
    ids = {f["id"] for f in findings}
    worst = max((SEVERITIES.index(f["severity"]) for f in findings), default=0)
    # a correlation of a handful of tokens says little: then it is not read at all
    usable = corr if corr is not None and tok.n >= dt.min_tokens else None
    low_corr = usable is not None and usable < dt.systematic_corr_max and not ({"shift", "dummy_zero"} & ids)
    beyond_noise = ((kl - 2 * kl_se) > dt.noise_kl_max or (ad - 2 * ad_se) > dt.noise_abs_delta_max
                    or (usable is not None and usable < dt.noise_corr_min))
    if worst == 2 or low_corr:
        return "systematic"
    if worst == 1 or beyond_noise:
        return "elevated"
    return "numerical_noise"


def _verdict(regime: str, findings: list[dict], metrics: dict, has_shadow: bool,
             band: str = "dense bf16") -> tuple[str, str]:
    """The verdict sentence and what to check, led by the first non-info finding (or by declared processing, an
    info finding that explains the whole mismatch)."""
    top = findings[0] if findings and findings[0]["severity"] != "info" else None
    explains = next((f for f in findings if f["id"] == "processed_logprobs"), None) if top is None else None
    return words.verdict(regime, metrics, top or explains, band, has_shadow)


def _gap_finding(gap: dict, dt: DiagnosisThresholds) -> dict:
    return words.make("precision_gap", {k: gap[k] for k in (
        "beta_share_sq", "beta_share_abs", "beta_bias", "beta_bias_se", "beta_abs_mean", "alpha_abs_mean", "clip_fraction_beta",
        "clip_fraction_total", "corr_beta_advantage")}, dt)

"""Diagnosis: is the mismatch numerical noise or a bug? (design §5)

`diagnose()` returns the `diagnosis` object of summary.json:

    {"regime": "identical" | "numerical_noise" | "staleness" | "elevated" | "systematic",
     "regime_basis": "lag_0" (the regime judged on the lag-0 tokens of a stale batch) | "lag" (no lag-0 tokens to
                     judge on: a mismatch beyond noise with no finding is the lag's, `staleness`): docs/staleness.md,
     "verdict": one plain sentence, "evidence": {name: number}, "what_to_check": text,
     "findings": [{"id", "severity": "info" | "warn" | "error", "title", "problem" (a noun phrase),
                   "evidence", "likely_cause", "what_to_check"}],
     "precision_gap": {...} or {"available": false, "reason", "how_to_get"},
     "trainer_floor": {...}, "routing_agreement": {...}  (the same shape),
     "band": the published noise band the batch is read against (model class, precision) and why,
     "thresholds": the DiagnosisThresholds used (noise ceilings from the band unless overridden)}

Every finding comes from a detector registered with `registry.detector` (usable.py the input gate, detectors.py
whole-batch faults, localise.py where the mismatch sits, and the measurements beside the verdict: precision_gap.py,
floor.py, routes.py); this module runs them all, here and only here, in the catalogue's order, decides the regime
and writes the verdict. docs/diagnosis.md explains each detector and shows the confusion matrix the
fault-injection tests produce (scripts/diagnosis_matrix.py).
"""

from __future__ import annotations

import numpy as np

from ..catalogue import findings as words
from ..catalogue import severity, verdicts
from ..config import SEVERITIES, DiagnosisThresholds, Thresholds
from ..model import StepBatch
from . import chain, confident, detectors, duplicates, floor, head, kept, localise, precision_gap, routes, usable  # noqa: F401  (importing one registers its detectors)
from .bands import apply_band, band_summary, choose_band
from .consequence import consequence, fault_side, side_test
from .lag import alignment, cache, digests  # noqa: F401  (register the version alignment, prefix-cache and sync detectors)
from .lag import findings as lag_findings  # registers the lag detectors
from .registry import DETECTORS, Scene
from .stats import exp_or_inf
from .tokens import Tokens


def diagnose(batch: StepBatch, tok: Tokens, metrics: dict, thresholds: DiagnosisThresholds | None = None,
             th: Thresholds | None = None, given: dict | None = None) -> dict:
    """The `diagnosis` object of summary.json for one batch (`metrics` is `summary_metrics`' result, `th` the
    analysis thresholds the measurements beside the verdict read: PPO's ε and clip band, the TIS cap; `given` what
    analyze measured on its second lane for a detector: the staleness split's numbers)."""
    band, why = choose_band(batch.meta)
    dt = apply_band(thresholds or DiagnosisThresholds(), band)
    scene = Scene(batch, tok, metrics, dt, th or Thresholds(), given=given or {})
    _raise(scene, words.INPUT_PROBLEM)  # an input problem leads: no verdict is drawn from what is left
    identical = not scene.found and _is_identical(tok, dt, metrics["abs_delta_max"])
    for id_ in words.FINDINGS:  # the catalogue's order: a detector may read the findings of those before it
        d = DETECTORS[id_]
        if id_ != words.INPUT_PROBLEM and not d.beside and (d.when_identical or not identical):
            _raise(scene, id_)
    if not identical and words.INPUT_PROBLEM not in scene.found:
        _weigh(scene, band.name)  # severity by consequence: an immaterial systematic fault is a warn
    judged = _by_severity(list(scene.found.values()))
    lag0 = None if identical else _numerical_floor(scene)
    lagged = None if identical or lag0 is not None else _lag_basis(scene)
    regime = "identical" if identical else _regime(judged, tok, metrics, dt, lag0, lagged is not None)
    for id_, f in scene.found.items():  # e.g. the tail's advice: "expected for numerical noise" only where it is noise
        if words.FINDINGS[id_].reads_regime:
            scene.found[id_] = words.make(id_, f["evidence"], dt, regime=regime)
    judged = _by_severity(list(scene.found.values()))
    sections = {d.section[0]: scene.once(d.section[1]) for d in DETECTORS.values() if d.section}
    for id_ in words.FINDINGS:  # beside the verdict: they never move the regime nor lead the verdict
        if DETECTORS[id_].beside:
            _raise(scene, id_)
    verdict, what_to_check = _verdict(regime, judged, metrics, bool(sections["precision_gap"].get("available")), band.name,
                                      lag0, lagged)
    basis = "lag_0" if lag0 is not None else "lag" if lagged is not None else None
    return {
        "regime": regime,
        **({"regime_basis": basis} if basis else {}),  # judged on lag 0's tokens, or read as the lag's
        "verdict": verdict,
        "evidence": _evidence(tok, metrics),
        "what_to_check": what_to_check,
        "findings": _by_severity(list(scene.found.values())),
        "band": band_summary(band, why, metrics["kl_k3"], dt),
        "thresholds": dt.to_dict(),
        **{k: v for k, v in sections.items() if v is not None},  # the chain's is None for a batch of two sides
    }


def _raise(scene: Scene, id_: str) -> None:
    """Run the detector of `id_`; its finding, if it fires, joins `scene.found`."""
    found = DETECTORS[id_].run(scene)
    if found is not None:
        scene.found[id_] = found


def _weigh(scene: Scene, band: str) -> None:
    """Each finding whose entry states its consequence gets it (and its side); a `weighed` one that is an error but
    immaterial on this batch becomes a warn (catalogue/severity.py, docs/diagnosis.md "Severity by consequence")."""
    test = None
    for id_, f in scene.found.items():
        kind = words.FINDINGS[id_].consequence
        if kind and f["severity"] != "info":
            test = test or side_test(scene.tok, scene.dt)
            effect = consequence(scene.tok, id_, scene.dt, scene.th.ppo_clip) if kind != "sided" else None
            scene.found[id_] = severity.weigh(f, effect, fault_side(f, test), band)


def _by_severity(findings: list[dict]) -> list[dict]:
    """Worst first; within a severity, the catalogue's order (the order the detectors ran in)."""
    order = {id_: i for i, id_ in enumerate(words.FINDINGS)}
    return sorted(findings, key=lambda f: (-SEVERITIES.index(f["severity"]), order[f["id"]]))


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
    return bool(np.all(tok.abs_delta <= tol))


def _numerical_floor(scene: Scene) -> dict | None:
    """Lag 0's reading (the staleness split's `floor`) when the numerical regime is judged on it rather than on the mix
    of lag and numerics: the batch names versions, staleness dominates, and lag 0 holds enough tokens to judge and is
    within its band (a lag 0 beyond it is stale weights, judged on the whole batch). None otherwise."""
    st = scene.once(lag_findings.measured)
    lag0 = (st or {}).get("floor")
    if not lag0 or st["dominant"] != "staleness" or not lag0["within"] or not lag0["enough"]:
        return None
    return lag0


def _lag_basis(scene: Scene) -> dict | None:
    """The staleness split when the numerics cannot be judged apart from the lag: the trainer's version is known, at
    least `min_tokens` tokens are at a known lag ≥ 1 and fewer than `min_tokens` at lag 0 (a one-step-off run: no
    lag-0 anchor). A mismatch beyond noise with no finding is then the lag's (`staleness`), not `elevated`: whether it is
    the lag's expected size is for the run's own history of that lag to say (analysis/lag/history.py). None otherwise."""
    st = scene.once(lag_findings.measured)
    if not st or st["trainer_version"] is None:
        return None
    known = [r for r in st["by_lag"] if isinstance(r["lag"], int)]
    older = sum(r["tokens"] for r in known if r["lag"] >= 1)
    lag0 = sum(r["tokens"] for r in known if r["lag"] == 0)
    return st if older >= scene.dt.min_tokens and lag0 < scene.dt.min_tokens else None


def _regime(findings: list[dict], tok: Tokens, metrics: dict, dt: DiagnosisThresholds, lag0: dict | None = None,
            lagged: bool = False) -> str:
    """systematic on an error finding or decorrelated log-probs; elevated on a warning or numbers beyond noise. With a
    `lag0` the numbers are lag 0's (what is numerical); the rest of the mismatch is the lag's, staleness. `lagged`
    (no lag-0 anchor, tokens at lag ≥ 1): numbers beyond noise with no finding are `staleness`."""
    if lag0 is None:
        corr = metrics.get("corr_logp")
        kl, kl_se = metrics["kl_k3"], metrics.get("kl_k3_se") or 0.0
        ad, ad_se = metrics["abs_delta_mean"], metrics.get("abs_delta_mean_se") or 0.0
    else:  # lag 0's numbers; the whole batch's correlation is the lag's as much as the engines': not read
        corr = None
        kl, kl_se = lag0["kl_k3"], lag0["kl_k3_se"] or 0.0
        ad, ad_se = lag0["mean_abs_delta"], lag0["mean_abs_delta_se"] or 0.0
    worst = max((SEVERITIES.index(f["severity"]) for f in findings), default=0)
    # a correlation of a handful of tokens says little: then it is not read at all
    read = corr if corr is not None and tok.n >= dt.min_tokens else None
    explained = any(DETECTORS[f["id"]].decorrelates for f in findings)  # a fault that decorrelates them by itself
    low_corr = read is not None and read < dt.systematic_corr_max and not explained
    beyond_noise = ((kl - 2 * kl_se) > dt.noise_kl_max or (ad - 2 * ad_se) > dt.noise_abs_delta_max
                    or (read is not None and read < dt.noise_corr_min))
    if worst == 2 or low_corr:
        return "systematic"
    if worst == 1:
        return "elevated"
    if lagged:  # no lag-0 anchor: the mismatch, beyond noise or not, cannot be told apart from the lag's
        return "staleness"
    return "elevated" if beyond_noise else "numerical_noise"


def _verdict(regime: str, findings: list[dict], metrics: dict, has_shadow: bool,
             band: str = "dense bf16", lag0: dict | None = None, lagged: dict | None = None) -> tuple[str, str]:
    """The verdict sentence and what to check, led by the first non-info finding (or by declared processing, an
    info finding that explains the whole mismatch); with a `lag0`, by lag 0's numerical reading; in the staleness
    regime, by the lags the tokens are at."""
    top = findings[0] if findings and findings[0]["severity"] != "info" else None
    explains = next((f for f in findings if words.FINDINGS[f["id"]].leads_as_info), None) if top is None else None
    return verdicts.verdict(regime, metrics, top or explains, band, has_shadow, lag0, lagged)

"""Analysis: StepBatch → Report. Pure numpy; no file formats, no rendering.

    analyze(batch)                 one batch → Report (metrics, breakdowns, routing, what-if, diagnosis, samples)
    compare.compare_batches(a, b)  two batches → the compare.json dict
    runs.index_summary(reports)    many Reports → what the index shows
    gate.evaluate(report, limits)  `tim-report check`'s limits and violations
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..catalogue import chain as chain_words
from ..catalogue import findings
from ..config import SEVERITIES, THREAD_MIN_TOKENS, DiagnosisThresholds, Thresholds
from ..model import Report, StepBatch
from . import breakdowns as bd
from .chain import chain_analysis, chain_finding_evidence
from .corrections import blocked_by_bug, routing, what_if
from .diagnosis import diagnose
from .distributions import distributions
from .floor import trainer_floor
from .metrics import summary_metrics
from .routes import routing_agreement
from .samples import sample_rows
from .tokens import valid_tokens
from .topk import topk_analysis
from .verl_metrics import verl_metrics

__all__ = ["DiagnosisThresholds", "Thresholds", "analyze"]


def analyze(batch: StepBatch, thresholds: Thresholds | None = None, run_id: str | None = None,
            diagnosis_thresholds: DiagnosisThresholds | None = None) -> Report:
    th = thresholds or Thresholds()
    tok, problems = valid_tokens(batch)
    # Two lanes: the summary metrics and the diagnosis (which reads them) here, the breakdowns, charts and
    # samples on a second thread. numpy releases the GIL in its loops, so a large batch uses two cores; one
    # lane each keeps at most two families' temporaries alive at once (peak memory, docs/performance.md).
    with ThreadPoolExecutor(max_workers=1) as pool:
        side = pool.submit(_side_families, batch, tok, th) if tok.n >= THREAD_MIN_TOKENS else None
        metrics = summary_metrics(tok, th)
        diagnosis = diagnose(batch, tok, metrics, diagnosis_thresholds, (th.ppo_eps_low, th.ppo_eps_high))
        families = side.result() if side is not None else _side_families(batch, tok, th)
    groups, envs = families.pop("by_group"), families.pop("by_env")
    route = routing(groups, th)
    groups["route"] = route.pop("routes")
    report = Report(
        run=run_info(batch, run_id),
        metrics=metrics,
        breakdowns={**families.pop("buckets"), "length_growth": families.pop("length_growth"), "by_group": groups,
                    **({"by_env": envs} if envs is not None else {})},
        routing=route,
        verl=verl_metrics(tok, metrics),
        data_problems=problems,
        diagnosis=diagnosis,
        **families,
    )
    dt = diagnosis_thresholds or DiagnosisThresholds()
    add_floor(report.diagnosis, trainer_floor(batch, tok, th), dt)
    add_routes(report.diagnosis, routing_agreement(batch, tok), dt)
    report.chain = chain_analysis(batch, tok)
    if report.chain is not None:
        add_chain(report.diagnosis, report.chain, dt)
    report.routing["blocked_by_bug"] = blocked_by_bug(report.diagnosis or {})
    report.run["thresholds"] = th.to_dict()
    return report


def _add_finding(diagnosis: dict, finding: dict) -> None:
    diagnosis["findings"].append(finding)
    diagnosis["findings"].sort(key=lambda f: -SEVERITIES.index(f["severity"]))


def add_floor(diagnosis: dict, floor: dict, dt: DiagnosisThresholds) -> None:
    """The trainer's own floor beside the precision gap, and its finding among the others (by severity)."""
    diagnosis["trainer_floor"] = floor
    if floor.get("available"):
        keys = ("kl_k3", "kl_share", "clip_fraction", "clipped_explained", "clip_inside_floor", "tis_fraction",
                "ess_loss_share", "clip_band", "abs_max")
        _add_finding(diagnosis, findings.make("trainer_floor", {k: floor[k] for k in keys}, dt))


def add_routes(diagnosis: dict, routes: dict, dt: DiagnosisThresholds) -> None:
    """Routing agreement beside the floor: a finding when both sides' routes were compared, or when a routes array
    cannot be (empty, misaligned)."""
    diagnosis["routing_agreement"] = routes
    if routes.get("available"):
        keys = ("any_flip_share", "decision_flip_share", "kl_k3_flipped", "kl_k3_unflipped", "kl_explained", "identical",
                "layers", "k")
        _add_finding(diagnosis, findings.make("routing_flips", {k: routes[k] for k in keys}, dt))
    elif routes.get("problem") in ("empty", "misaligned"):
        _add_finding(diagnosis, findings.make("routes_unusable", {"reason": routes["reason"]}, dt))


def add_chain(diagnosis: dict, chain: dict, dt: DiagnosisThresholds) -> None:
    """The chain names the link that carries the mismatch: a sentence of the verdict and a finding."""
    sentence = chain_words.verdict_sentence(chain)
    if sentence:
        diagnosis["verdict"] = f"{diagnosis['verdict']} {sentence}"
    evidence = chain_finding_evidence(chain)
    if evidence is not None:
        _add_finding(diagnosis, findings.make("chain_link", evidence, dt))


def _side_families(batch: StepBatch, tok, th: Thresholds) -> dict:
    """What does not need the summary metrics, one family after another."""
    per_seq = bd.sequence_sums(tok, *th.ppo_clip, th.veto)
    return {
        "by_group": bd.group_table(tok, batch.group, per_seq),
        "by_env": bd.env_table(tok, batch.env, per_seq),
        "buckets": bd.bucket_tables(tok),
        "length_growth": bd.length_growth(tok),
        "what_if": what_if(tok, th),
        "distributions": distributions(tok, th),
        "samples": sample_rows(batch, tok, th),
        "topk": topk_analysis(batch, tok),
    }


def run_info(batch: StepBatch, run_id: str | None) -> dict:
    meta = dict(batch.meta)
    return {
        "id": run_id or meta.get("run_id"),
        "source": meta.get("source"),
        "meta": meta,
        "notes": list(batch.notes),
        "available": {
            "token_ids": batch.token_ids is not None,
            "token_text": batch.token_text is not None or batch.decoder is not None,
            "groups": batch.group is not None,
            "reward": batch.reward is not None,
            "advantage": batch.advantage is not None,
            "shadow_logp": batch.shadow_logp is not None,
            "prompts": batch.prompt_ids is not None or batch.prompt_text is not None,
            "turns": batch.turn is not None,
            "weight_versions": batch.weight_version is not None,
            "env": batch.env is not None,
        },
        "weight_versions": weight_versions(batch),
    }


def weight_versions(batch: StepBatch) -> dict | None:
    """The distinct policy versions the batch's sequences came from (a sequence may name several, joined by ",").

    More than one means part of the mismatch is staleness (off-policy samples), not precision.
    """
    if batch.weight_version is None:
        return None
    distinct = sorted({v for joined in batch.weight_version for v in str(joined).split(",") if v},
                      key=lambda v: (not v.lstrip("-").isdigit(), int(v) if v.lstrip("-").isdigit() else 0, v))
    return {"count": len(distinct), "values": distinct[:10]}

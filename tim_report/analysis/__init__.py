"""Analysis: StepBatch → BatchReport. Pure numpy; no file formats, no rendering.

    analyze(batch)                    one batch → BatchReport (metrics, breakdowns, routing, what-if, diagnosis, samples)
    compare.compare_batches(a, b)     two batches → the compare.json dict
    run_index.index_summary(reports)  many Reports → what the index shows
    gate.evaluate(report, limits)     `tim-report check`'s limits and violations
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..catalogue import chain as chain_words
from ..config import THREAD_MIN_TOKENS, DiagnosisThresholds, Thresholds
from ..model import BatchReport, StepBatch
from . import breakdowns as bd
from .corrections import blocked_by_bug, routing, what_if
from .diagnosis import diagnose
from .distributions import distributions
from .metrics import summary_metrics
from .samples import sample_rows
from .tokens import valid_tokens
from .topk import topk_analysis
from .verl_metrics import verl_metrics

__all__ = ["DiagnosisThresholds", "Thresholds", "analyze"]


def analyze(batch: StepBatch, thresholds: Thresholds | None = None, run_id: str | None = None,
            diagnosis_thresholds: DiagnosisThresholds | None = None) -> BatchReport:
    th = thresholds or Thresholds()
    tok, problems = valid_tokens(batch)
    # Two lanes: the summary metrics and the diagnosis (which reads them) here, the breakdowns, charts and
    # samples on a second thread. numpy releases the GIL in its loops, so a large batch uses two cores; one
    # lane each keeps at most two families' temporaries alive at once (peak memory, docs/performance.md).
    with ThreadPoolExecutor(max_workers=1) as pool:
        side = pool.submit(_side_families, batch, tok, th) if tok.n >= THREAD_MIN_TOKENS else None
        metrics = summary_metrics(tok, th)
        diagnosis = diagnose(batch, tok, metrics, diagnosis_thresholds, th)
        families = side.result() if side is not None else _side_families(batch, tok, th)
    groups, envs = families.pop("by_group"), families.pop("by_env")
    route = routing(groups, th)
    groups["route"] = route.pop("routes")
    report = BatchReport(
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
    report.chain = report.diagnosis.pop("chain", None)  # summary.json's own `chain`, not the diagnosis's
    if report.chain is not None and (sentence := chain_words.verdict_sentence(report.chain)):
        report.diagnosis["verdict"] = f"{report.diagnosis['verdict']} {sentence}"  # the verdict names the leading link
    report.routing["blocked_by_bug"] = blocked_by_bug(report.diagnosis or {})
    report.run["thresholds"] = th.to_dict()
    return report


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

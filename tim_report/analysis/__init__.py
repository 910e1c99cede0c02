"""Analysis: StepBatch → Report. Pure numpy; no file formats, no rendering.

    analyze(batch)                 one batch → Report (metrics, breakdowns, routing, what-if, diagnosis, samples)
    compare.compare_batches(a, b)  two batches → the compare.json dict
    runs.index_summary(reports)    many Reports → what the index shows
    gate.evaluate(report, limits)  `tim-report check`'s limits and violations
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from ..config import DiagnosisThresholds, Thresholds
from ..model import Report, StepBatch
from . import breakdowns as bd
from .corrections import blocked_by_bug, routing, what_if
from .diagnosis import diagnose
from .distributions import distributions
from .metrics import summary_metrics
from .samples import sample_rows
from .tokens import valid_tokens
from .verl_metrics import verl_metrics

__all__ = ["DiagnosisThresholds", "Thresholds", "analyze"]


def analyze(batch: StepBatch, thresholds: Thresholds | None = None, run_id: str | None = None,
            diagnosis_thresholds: DiagnosisThresholds | None = None) -> Report:
    th = thresholds or Thresholds()
    tok, problems = valid_tokens(batch)
    # The families read `tok` and never write it; numpy releases the GIL in its loops, so on a batch large
    # enough to matter they run side by side on the machine's cores (same numbers in any order).
    with ThreadPoolExecutor(max_workers=_workers(tok.n)) as pool:
        groups = pool.submit(bd.group_table, tok, batch.group, 1 - th.ppo_eps_low, 1 + th.ppo_eps_high, th.veto)
        metrics = pool.submit(summary_metrics, tok, th)
        buckets = pool.submit(bd.bucket_tables, tok)
        length = pool.submit(bd.length_growth, tok)
        whatif = pool.submit(what_if, tok, th)
        dists = pool.submit(distributions, tok, th)
        samples = pool.submit(sample_rows, batch, tok, th)
        diagnosis = pool.submit(lambda: diagnose(batch, tok, metrics.result(), diagnosis_thresholds,
                                                 (th.ppo_eps_low, th.ppo_eps_high)))
        groups = groups.result()
        route = routing(groups, th)
        groups["route"] = route.pop("routes")
        report = Report(
            run=run_info(batch, run_id),
            metrics=metrics.result(),
            breakdowns={**buckets.result(), "length_growth": length.result(), "by_group": groups},
            routing=route,
            what_if=whatif.result(),
            verl=verl_metrics(tok, metrics.result()),
            data_problems=problems,
            distributions=dists.result(),
            samples=samples.result(),
        )
        report.diagnosis = diagnosis.result()
    report.routing["blocked_by_bug"] = blocked_by_bug(report.diagnosis)
    report.run["thresholds"] = th.to_dict()
    return report


def _workers(n_tokens: int) -> int:
    """Threads pay off above ~1M tokens; below, one thread keeps small batches as cheap as before."""
    return min(4, os.cpu_count() or 1) if n_tokens >= 1_000_000 else 1


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

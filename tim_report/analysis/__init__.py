"""Analysis: StepBatch → BatchReport. Pure numpy; no file formats, no rendering.

    analyze(batch)                    one batch → BatchReport (metrics, breakdowns, routing, what-if, diagnosis, samples)
    compare.compare_batches(a, b)     two batches → the compare.json dict
    run_index.index_summary(reports)  many Reports → what the index shows
    gate.evaluate(report, limits)     `tim-report check`'s limits and violations
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..catalogue import chain as chain_words
from ..catalogue import rescore as rescore_words
from ..catalogue import staleness as lag_words
from ..catalogue import sync as sync_words
from ..config import GROUP_TABLE_ROWS, THREAD_MIN_TOKENS, DiagnosisThresholds, Thresholds
from ..model import BatchReport, StepBatch, version_int
from . import breakdowns as bd
from .consequence import glance_of
from .corrections import blocked_by_bug, routing, what_if
from .diagnosis import diagnose
from .distributions import distributions
from .lag.digests import sync_records
from .lag.rescored import weights_by_lag
from .lag.split import split
from .lag.versions import has_versions, trainer_version
from .metrics import LADDERS, summary_metrics
from .samples import sample_rows
from .tokens import valid_tokens
from .topk import topk_analysis
from .verl_metrics import verl_metrics

__all__ = ["GATE", "GATE_HISTORY", "DiagnosisThresholds", "Scope", "Thresholds", "analyze"]


@dataclass(frozen=True)
class Scope:
    """How much of a Report to compute. `build` needs all of it; `check` reads the gated metrics, the diagnosis,
    the routing and, with a history, an index row's |δ| median: at 16M tokens the rest (the ladders, the tables and
    charts only pages show, samples, top-k, verl's section) is most of the time (docs/performance.md)."""

    ladders: tuple[str, ...] = LADDERS
    pages: bool = True


GATE = Scope(ladders=(), pages=False)  # what `check` reads
GATE_HISTORY = Scope(ladders=("abs_delta",), pages=False)  # and the |δ| median, p90, p99 a history band reads


def analyze(batch: StepBatch, thresholds: Thresholds | None = None, run_id: str | None = None,
            diagnosis_thresholds: DiagnosisThresholds | None = None, scope: Scope = Scope()) -> BatchReport:
    """The BatchReport of one batch; with a narrower `scope` (`check`'s GATE) what it leaves out is absent: the
    breakdowns hold only the group and environment tables, `verl`, `what_if`, `distributions`, `samples` and
    `topk` are empty."""
    th = thresholds or Thresholds()
    tok, problems = valid_tokens(batch)
    side_families = _side_families if scope.pages else _unit_tables
    # Two lanes: the summary metrics and the diagnosis (which reads them) here, the breakdowns, charts and
    # samples on a second thread. numpy releases the GIL in its loops, so a large batch uses two cores; one
    # lane each keeps at most two families' temporaries alive at once (peak memory, docs/performance.md).
    with ThreadPoolExecutor(max_workers=1) as pool:
        big = tok.n >= THREAD_MIN_TOKENS
        # the staleness split first on the second lane (the diagnosis reads it), then the families
        stale = pool.submit(split, batch, tok, th) if big and has_versions(batch) else None
        side = pool.submit(side_families, batch, tok, th) if big else None
        metrics = summary_metrics(tok, th, scope.ladders, scope.pages)
        given = {"data_problems": problems, **({"staleness": stale.result()} if stale is not None else {})}
        if (weights := weights_by_lag(batch, tok)) is not None:
            given["rescore"] = weights  # which weights sampled each lag bucket: the stale-weights finding cites it
        diagnosis = diagnose(batch, tok, metrics, diagnosis_thresholds, th, given)
        verl = verl_metrics(tok, metrics) if scope.pages else {}  # on this lane, while the other may still run
        families = side.result() if side is not None else side_families(batch, tok, th)
    groups, envs = families.pop("by_group"), families.pop("by_env")
    if not scope.pages:
        families.update(what_if=[], distributions={})
    route = routing(groups, th)
    groups["route"] = route.pop("routes")
    groups = bd.worst_units(groups, GROUP_TABLE_ROWS)
    report = BatchReport(
        run=run_info(batch, run_id),
        metrics=metrics,
        breakdowns={**families.pop("buckets", {}), **({"length_growth": families.pop("length_growth")}
                                                     if scope.pages else {}),
                    "by_group": groups, **({"by_env": envs} if envs is not None else {})},
        routing=route,
        verl=verl,
        data_problems=problems,
        diagnosis=diagnosis,
        **families,
    )
    report.chain = report.diagnosis.pop("chain", None)  # summary.json's own `chain`, not the diagnosis's
    if report.chain is not None and (sentence := chain_words.verdict_sentence(report.chain)):
        report.diagnosis["verdict"] = f"{report.diagnosis['verdict']} {sentence}"  # the verdict names the leading link
    report.staleness = report.diagnosis.pop("staleness", None)  # summary.json's own `staleness`
    report.sync = report.diagnosis.pop("sync", None)  # summary.json's own `sync`: the weight digests' round trip
    if report.sync is not None:
        report.sync["line"] = sync_words.sync_line(report.sync)
    basis = report.diagnosis.get("regime_basis")
    if basis != "lag" and (sentence := lag_words.verdict_sentence(report.staleness)) is not None:
        report.diagnosis["verdict"] = f"{report.diagnosis['verdict']} {sentence}"  # which dominates: staleness or numerics
    if basis in ("lag_0", "lag") and (cost := lag_words.cost_sentence(report.staleness or {})):
        report.diagnosis["verdict"] += f" {cost}"  # judged on lag 0, or read as the lag's: what the lag costs
    report.rescore = given.get("rescore")
    if (sentence := rescore_words.verdict_sentence(report.rescore)) is not None:
        report.diagnosis["verdict"] += f" {sentence}"  # which weights the engine used, lag bucket by lag bucket
    leads = any(f["severity"] != "info" for f in report.diagnosis.get("findings") or [])
    if not leads and (check := lag_words.staleness_check(report.staleness)) is not None:
        report.diagnosis["what_to_check"] = check  # beyond noise by staleness alone: the lag, not an engine, to look at
    report.routing["blocked_by_bug"] = blocked_by_bug(report.diagnosis or {})
    report.diagnosis["glance"] = glance_of(report.diagnosis, envs, metrics.get("kl_k3"))
    lag_glance = lag_words.glance(report.staleness)
    if lag_glance and not leads:
        report.diagnosis["glance"] += f": {lag_glance}"  # what the mismatch is when no finding leads: staleness or not
    if (sync_glance := sync_words.glance(report.sync)) is not None:
        report.diagnosis["glance"] += f"; {sync_glance}"  # the weight sync checked exactly, and it held
    report.run["thresholds"] = th.to_dict()
    return report


def _unit_tables(batch: StepBatch, tok, th: Thresholds) -> dict:
    """The group table (the routing decides on it) and the environment table (an index row's KL per environment)."""
    per_seq = bd.sequence_sums(tok, *th.ppo_clip, th.veto)
    return {"by_group": bd.group_table(tok, batch.group, per_seq), "by_env": bd.env_table(tok, batch.env, per_seq)}


def _side_families(batch: StepBatch, tok, th: Thresholds) -> dict:
    """What does not need the summary metrics, one family after another."""
    return {
        **_unit_tables(batch, tok, th),
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
        "notes": list(batch.notes) + ([lag_words.invalid_trainer_note(meta["trainer_version"])]
                                      if trainer_version(meta)[1] == "invalid" else [])
        + [sync_words.invalid_note(side, problem) for side, problem in sync_records(meta)["problems"].items()],
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
            "token_versions": batch.token_version is not None,
            "cached_tokens": batch.cached_tokens is not None,
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
                      key=lambda v: (version_int(v) is None, version_int(v) or 0, v))
    return {"count": len(distinct), "values": distinct[:10]}

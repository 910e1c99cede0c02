"""Aggregation across runs: the index's runs table, engine-pair matrix, precision matrix and trend.

Pure functions over `Report` objects or their summary dicts (summary.json loaded back). Both the HTML
index and the markdown index render from `index_summary()`'s output; renderers compute nothing.

Aggregation follows the seed table: runs with the same (rollout engine, trainer engine) pair are one
row with their count, the plain mean over runs of ESS, phantom clipping, mean Σδ and mean |δ|, the
worst (largest) max |δ|, the total token count, and a colour from the mean ESS (config.HEALTH).
Means skip runs where a metric is missing; a row with none gets None.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..catalogue import metrics as catalogue
from ..catalogue import staleness as lag_words
from ..catalogue.findings.lag import ENGINE_CAUSES, STALE
from ..config import HEALTH_ORDER, health, step_health
from ..model import learning_rate, model_label
from .lag.history import run_reads
from .run_verdict import run_verdict
from .stats import finite
from .sweep import length_sweep
from .trend import trend


def _parts(r: Any) -> tuple[dict, dict, dict, dict, dict]:
    """(run, metrics, routing, diagnosis, data problems) of a Report or of its summary dict."""
    if isinstance(r, dict):
        return (r.get("run") or {}, r.get("metrics") or {}, r.get("routing") or {}, r.get("diagnosis") or {},
                r.get("data_problems") or {})
    return r.run or {}, r.metrics or {}, r.routing or {}, r.diagnosis or {}, r.data_problems or {}


def _mean(values: Iterable[Any]) -> float | None:
    xs = [v for v in (finite(x) for x in values) if v is not None]
    return math.fsum(xs) / len(xs) if xs else None


def _max(values: Iterable[Any]) -> float | None:
    xs = [v for v in (finite(x) for x in values) if v is not None]
    return max(xs) if xs else None


def _label(x: Any) -> str:
    return str(x) if x not in (None, "") else "?"


def _text(x: Any) -> str | None:
    return str(x) if x not in (None, "") else None


def _step(meta: dict) -> int | float | None:
    s = meta.get("step")
    if isinstance(s, bool) or not isinstance(s, (int, float)):
        return None
    return s if math.isfinite(s) else None


def run_row(report: Any) -> dict:
    """One run's row of the index (model.run_row_fields): identity, the catalogue's row metrics, routing counts, verdict and
    colour."""
    run, m, routing, diag, problems = _parts(report)
    meta = run.get("meta") or {}
    counts = routing.get("counts") or {}
    return {
        "id": str(run.get("id") or "run"),
        "model": _text(model_label(meta)),
        "rollout_engine": _label(meta.get("rollout_engine")), "rollout_dtype": _label(meta.get("rollout_dtype")),
        "trainer_engine": _label(meta.get("trainer_engine")), "trainer_dtype": _label(meta.get("trainer_dtype")),
        "device": _text(meta.get("device")), "step": _step(meta), "max_new_tokens": _max_new_tokens(meta),
        **{key: m.get(key) if finite(m.get(key)) is not None else None for key in catalogue.ROW},
        "routing": {k: counts.get(k) for k in ("train", "train_with_correction", "quarantine")},
        "routing_unit": routing.get("unit") or "group",
        "regime": diag.get("regime"), "verdict": diag.get("verdict"), "glance": diag.get("glance"),
        "side": _lead_side(diag),
        "findings": [str(f.get("id")) for f in diag.get("findings") or [] if f.get("severity") in ("warn", "error")],
        "blocked_by_bug": bool(routing.get("blocked_by_bug")),
        "excluded_tokens": problems.get("excluded_tokens") or 0,
        "input_problems": sum((problems.get("input") or {}).values()),
        "input_problem_kinds": sorted(k for k, v in (problems.get("input") or {}).items() if v),
        "data_problems": (problems.get("excluded_tokens") or 0) + sum((problems.get("input") or {}).values()),
        "health": step_health(finite(m.get("ess")), diag.get("regime"), bool(routing.get("blocked_by_bug"))),
        "env_kl_k3": env_kl_k3(report),
        **lag_fields(report),
        "weight_digests": weight_digests(report),
    }


def weight_digests(report: Any) -> list[dict]:
    """The step's weight digests, each with its side ([] without any): what the run view's sync check reads across
    steps (analysis/lag/digests.run_sync_findings)."""
    st = (report.get("sync") if isinstance(report, dict) else getattr(report, "sync", None)) or {}
    return [{"side": side, **r} for side in ("engine", "trainer") for r in st.get(side) or []]


def lag_fields(report: Any) -> dict:
    """The step's lag mix (token share by lag: "0", "1", …, "unknown"), each lag's KL k3, the lag-0 KL k3's standard
    error (cluster-robust over sequences) and the staleness share, from its staleness split ({} and None when the step
    names no version)."""
    st = (report.get("staleness") if isinstance(report, dict) else getattr(report, "staleness", None)) or {}
    rows = [r for r in st.get("by_lag") or [] if isinstance(r, dict)]
    lag0 = next((r for r in rows if r.get("lag") == 0), {})
    run, _, _, _, _ = _parts(report)
    return {"lag_mix": {str(r.get("lag")): finite(r.get("share")) for r in rows},
            "lag_kl_k3": {str(r.get("lag")): finite(r.get("kl_k3")) for r in rows},
            "lag_kl_k3_se": {str(r.get("lag")): finite(r.get("kl_k3_se")) for r in rows},
            "floor_kl_k3_se": finite(lag0.get("kl_k3_se")), "staleness_share": finite(st.get("share")),
            "trainer_version": finite(st.get("trainer_version")),
            "lr": learning_rate((run.get("meta") or {}).get("lr")), "lag_reading": None, "step_regime": None}




def _lead_side(diag: dict) -> str | None:
    """The side the leading warn / error finding is on: rollout, trainer, undetermined, or None (no such finding)."""
    lead = next((f for f in diag.get("findings") or [] if f.get("severity") in ("warn", "error")), None)
    side = (lead or {}).get("side")
    return str(side.get("side")) if isinstance(side, dict) and side.get("side") else None


def env_kl_k3(report: Any) -> dict:
    """KL k3 of each environment the batch names ({} when it names none): what prime-rl logs as mismatch_kl/{env}."""
    e = (getattr(report, "breakdowns", None) or {}).get("by_env") or {}
    return {str(n): finite(k) for n, k in zip(e.get("name") or [], e.get("k3_mean") or [])}


def env_trend(rows: list[dict]) -> list[dict] | None:
    """Per environment over the run's steps: first, last and worst step's KL k3, worst first. None without two
    stepped rows that name environments."""
    stepped = sorted((r for r in rows if r.get("step") is not None and r.get("env_kl_k3")), key=lambda r: r["step"])
    if len(stepped) < 2:
        return None
    series: dict[str, list[tuple]] = {}
    for r in stepped:
        for name, k3 in r["env_kl_k3"].items():
            if k3 is not None:
                series.setdefault(name, []).append((r["step"], k3, r["id"]))
    out = []
    for name, pts in series.items():
        worst = max(pts, key=lambda p: p[1])
        out.append({"env": name, "steps": len(pts), "first_step": pts[0][0], "first": pts[0][1], "last_step": pts[-1][0],
                    "last": pts[-1][1], "worst_step": worst[0], "worst": worst[1], "worst_run": worst[2],
                    "last_over_first": pts[-1][1] / pts[0][1] if pts[0][1] > 0 else None})
    return sorted(out, key=lambda e: -e["worst"]) or None


def _max_new_tokens(meta: dict) -> int | None:
    """The generation length cap a capture recorded (meta.sampling.max_new_tokens): a length sweep's axis."""
    v = (meta.get("sampling") or {}).get("max_new_tokens") if isinstance(meta.get("sampling"), dict) else None
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 else None


def known(row: dict) -> bool:
    """Both engines and both dtypes are named: the run can be grouped with others of its kind."""
    return "?" not in (row["rollout_engine"], row["rollout_dtype"], row["trainer_engine"], row["trainer_dtype"])


def engines_own(row: dict) -> bool:
    """The step's mismatch is the engines' own (no warn or error finding, not systematic): what an engine pair's or a
    precision cell's means are taken over. A code bug (an off-by-one, a template) says nothing of the engines' health."""
    return not row.get("findings") and row.get("regime") != "systematic"


def _split(rs: list[dict]) -> tuple[list[dict], list[str]]:
    """The steps the means are over (their mismatch is the engines'), and the ids of those with a finding."""
    return [r for r in rs if engines_own(r)], [r["id"] for r in rs if not engines_own(r)]


def engine_pairs(rows: list[dict]) -> list[dict]:
    """The seed table: one row per (rollout engine and dtype, trainer engine and dtype), in order of first appearance.

    Only runs whose engines and dtypes are known are grouped: averaging a healthy run with a broken one
    because neither names its engine would say nothing true about either. The means are over the runs whose
    mismatch is the engines' own (`engines_own`); those with a finding are counted beside them (`with_findings`).
    """
    groups: dict[tuple[str, str, str, str], list[dict]] = {}
    for r in rows:
        if known(r):
            groups.setdefault((r["rollout_engine"], r["rollout_dtype"], r["trainer_engine"], r["trainer_dtype"]), []).append(r)
    out = []
    for (ro, rd, tr, td), every in groups.items():
        rs, flagged = _split(every)
        mean_ess = _mean(r["ess"] for r in rs)
        tokens = [r["tokens"] for r in rs if finite(r["tokens"]) is not None]
        out.append({
            "rollout_engine": ro, "rollout_dtype": rd, "trainer_engine": tr, "trainer_dtype": td,
            "count": len(rs), "runs": [r["id"] for r in rs], "with_findings": flagged,
            "mean_ess": mean_ess, "mean_clipped": _mean(r["phantom_clip"] for r in rs),
            "mean_seq_log_ratio": _mean(r["seq_log_ratio_mean"] for r in rs),
            "mean_abs_delta": _mean(r["abs_delta_mean"] for r in rs),
            "worst_abs_delta_max": _max(r["abs_delta_max"] for r in rs),
            "tokens": sum(int(t) for t in tokens) if tokens else None,
            "health": health(mean_ess),
        })
    return out


def precision_matrix(rows: list[dict]) -> dict | None:
    """Rollout dtype × trainer dtype: mean over runs of median |δ| and KL k3 (over the runs whose mismatch is the
    engines' own; those with a finding counted beside); None when every run has one dtype pair."""
    cells: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if "?" not in (r["rollout_dtype"], r["trainer_dtype"]):
            cells.setdefault((r["rollout_dtype"], r["trainer_dtype"]), []).append(r)
    if len(cells) < 2:
        return None
    rollout = sorted({k[0] for k in cells})
    trainer = sorted({k[1] for k in cells})
    out_cells = []
    for ro in rollout:
        line: list[dict | None] = []
        for tr in trainer:
            every = cells.get((ro, tr))
            if not every:
                line.append(None)
                continue
            rs, flagged = _split(every)
            mean_ess = _mean(r["ess"] for r in rs)
            line.append({"rollout_dtype": ro, "trainer_dtype": tr, "count": len(rs), "runs": [r["id"] for r in rs],
                         "with_findings": flagged,
                         "mean_abs_delta_median": _mean(r["abs_delta_median"] for r in rs),
                         "mean_kl_k3": _mean(r["kl_k3"] for r in rs), "mean_ess": mean_ess, "health": health(mean_ess)})
        out_cells.append(line)
    return {"rollout_dtypes": rollout, "trainer_dtypes": trainer, "cells": out_cells}


def index_summary(reports: Iterable[Any]) -> dict:
    """Everything the index shows, from Reports or their summary dicts."""
    return index_from_rows([run_row(r) for r in reports])


def in_run(rows: list[dict]) -> list[dict]:
    """Each row as its run reads it (analysis/lag/history.py): its `lag_reading` (its lag against the run's own history
    of that lag; None without versions), and where the engine did not hold the weights the step's tokens are labelled
    with (a lag beyond its own history, or an engine that never took an update), the step is the run's: regime
    systematic, led by `stale_weights`, red, not to be trained on, its own regime kept as `step_regime`. The step's page
    reads the batch alone; the index, the run verdict, `watch` and `check --history` read these rows."""
    readings, _ = run_reads(rows)
    out = []
    for r in rows:
        reading = readings.get(r["id"])
        row = {**r, "lag_reading": reading}
        if reading and reading["status"] == "climbing" and not r["findings"]:
            row["glance"] = lag_words.climbing_glance(r["regime"], reading)  # not a fault yet: watched, said
        named = STALE in r["findings"] or ENGINE_CAUSES.intersection(r["findings"])  # the step names the cause itself
        if reading and reading["status"] in ("beyond", "never") and not named:
            row.update(step_regime=r["regime"], regime="systematic", findings=[STALE, *r["findings"]],
                       glance=lag_words.run_glance(reading), side="rollout", health="red", blocked_by_bug=True)
        out.append(row)
    return out


def index_from_rows(rows: list[dict]) -> dict:
    """Everything the index shows: runs (as their run reads them: `in_run`), health counts, engine pairs, precision
    matrix (or None), the run's verdict over its steps (or None), trend and change points (or None). Rows are enough,
    so a build that reuses cached steps needs only their rows."""
    rows = in_run(rows)
    counts = {h: sum(1 for r in rows if r["health"] == h) for h in HEALTH_ORDER}
    regimes: dict[str, int] = {}
    for r in rows:
        regimes[r["regime"] or "unknown"] = regimes.get(r["regime"] or "unknown", 0) + 1
    verdict = run_verdict(rows)
    return {"runs": rows, "health_counts": counts, "regimes": dict(sorted(regimes.items())),
            "engine_pairs": engine_pairs(rows), "unpaired_runs": [r["id"] for r in rows if not known(r)],
            "precision": precision_matrix(rows), "run": verdict, "envs": env_trend(rows),
            "sweep": length_sweep(rows),
            "trend": trend(rows, verdict["findings"] if verdict else None)}

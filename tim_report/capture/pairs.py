"""What the passes of a capture produced, and the StepBatch of each (rollout, trainer) pair over the same tokens.

`Prepared` is the prompts and seeds, `Scores` what each engine's pass left (the sampler's tokens and log-probs, its
kept sets and its weight-version spans where it returned them, every scorer's log-probs, top-k and routes, the
trainer's mass on the kept sets), and `assemble` puts one pair's arrays and meta together: every pair whose passes
all ran (an engine that fails leaves the pairs completed before it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model import UNKNOWN_VERSION, StepBatch, version_int
from .engines import EngineKey
from .options import CaptureOptions
from .spec import ENGINE_NAMES, EngineSpec, kept_counts_offsets
from .stale import labels

FLOOR_COMPOSITION = ("the trainer pass packs length-sorted sequences into right-padded micro-batches; the floor pass "
                     "scores one sequence per micro-batch (no padding), in reverse order")
KEPT_HOW = ("each sampled token's kept set: the vocabulary ids the sampler's top-k / top-p left finite in the very "
            "distribution the token was drawn from ({sampler}); kept_log_mass: log of the trainer's probability mass on "
            "it, from the trainer's own fp32 log-softmax")


@dataclass
class Prepared:
    """The prompts as token ids, one entry per sequence (`n_samples` copies each), with their seeds."""

    tokenizer: Any  # a transformers tokenizer
    prompt_ids: list[list[int]]  # per prompt
    prompt_text: list[str]  # per prompt, as the model sees it
    templated: bool
    seq_prompt: list[int]  # per sequence: its prompt's index
    seeds: list[int]  # per sequence
    max_model_len: int
    device: str
    sampler: list[str | None]  # per sequence: the checkpoint that samples it (None: --model)
    lag: list[int]  # per sequence: its sampler's lag (all 0 without --stale)

    @property
    def seq_ids(self) -> list[list[int]]:
        return [self.prompt_ids[i] for i in self.seq_prompt]


@dataclass
class Scores:
    completions: list[list[int]] = field(default_factory=list)
    rollout: dict[EngineSpec, list[np.ndarray]] = field(default_factory=dict)
    trainer: dict[EngineSpec, list[np.ndarray]] = field(default_factory=dict)
    shadow: dict[tuple[EngineSpec, str], list[np.ndarray]] = field(default_factory=dict)  # (trainer spec, rollout dtype)
    floor: dict[EngineSpec, list[np.ndarray]] = field(default_factory=dict)  # the trainer's second scoring
    recompute: list[np.ndarray] | None = None  # the rollout engine's re-score of the sampled tokens
    routes: dict[tuple[str, EngineSpec], list[np.ndarray]] = field(default_factory=dict)  # ("rollout" | "trainer", spec)
    topk: dict[tuple[str, EngineSpec], list] = field(default_factory=dict)  # ("rollout" | "trainer", spec) → TopK per sequence
    versions: dict[str, str] = field(default_factory=dict)
    kept: list | None = None  # per sequence the sampler's kept sets (ids, a size per token); None: not recorded
    kept_mass: dict[EngineSpec, list] = field(default_factory=dict)  # trainer spec → per sequence [n] log-mass on them
    token_versions: list | None = None  # per sequence the version label of each token (vLLM's WeightVersionSpans)
    cached: list = field(default_factory=list)  # per sequence, the prompt tokens its sampler served from a prefix cache


def keep(out: Scores, kind: str, spec: EngineSpec, key: EngineKey, lp: list[np.ndarray], routes: list | None) -> None:
    """File one scoring pass under its kind (a shadow pass under the trainer spec and the dtype it ran in), and the
    routed experts it recorded."""
    if kind == "rollout":
        out.rollout[spec] = lp
    elif kind == "trainer":
        out.trainer[spec] = lp
    elif kind == "floor":
        out.floor[spec] = lp
    else:
        out.shadow[(spec, key.dtype)] = lp
    if routes is not None:
        out.routes[(kind, spec)] = routes


def assemble(opts: CaptureOptions, prep: Prepared, scores: Scores, shadow_skipped: dict[tuple[EngineSpec, EngineSpec], str],
             base_meta: dict) -> dict[tuple[EngineSpec, EngineSpec], StepBatch]:
    """One StepBatch per (rollout, trainer) pair over the same sampled tokens: every pair whose passes are all done."""
    completions = scores.completions
    if not completions or not all(completions):  # a sampler failed before every sequence was sampled: no pair
        return {}
    lengths = np.asarray([len(c) for c in completions], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    token_ids = np.asarray([t for c in completions for t in c], dtype=np.int64)
    token_text = prep.tokenizer.batch_decode([[int(t)] for t in token_ids]) if len(token_ids) else []
    prompt_arrays = [np.asarray(p, dtype=np.int64) for p in prep.seq_ids]
    prompt_text = [prep.prompt_text[i] for i in prep.seq_prompt]
    group = np.asarray([f"p{i}" for i in prep.seq_prompt], dtype=str)
    gen_spec = opts.rollouts[0]
    out: dict[tuple[EngineSpec, EngineSpec], StepBatch] = {}
    for r, t in opts.pairs():
        shadow_missing = opts.shadow and (r, t) not in shadow_skipped and (t, r.dtype) not in scores.shadow
        floor_missing = opts.trainer_floor and t.engine == "hf" and t not in scores.floor
        if r not in scores.rollout or t not in scores.trainer or shadow_missing or floor_missing:
            continue
        meta = dict(base_meta)
        meta.update({
            "rollout_engine": ENGINE_NAMES[r.engine], "rollout_engine_version": scores.versions.get(r.engine),
            "rollout_dtype": r.dtype,
            "trainer_engine": ENGINE_NAMES[t.engine], "trainer_engine_version": scores.versions.get(t.engine),
            "trainer_dtype": t.dtype,
            "rollout_logp": "sampler (processed log-probs)" if r == gen_spec else
                            f"re-scored teacher-forced by {r} on the tokens {gen_spec} sampled",
            "lm_head_fp32": {"rollout": opts.lm_head("rollout"), "trainer": opts.lm_head("trainer")},
        })
        shadow = None
        if opts.shadow:
            if (r, t) in shadow_skipped:
                meta["shadow"] = {"available": False, "reason": shadow_skipped[(r, t)]}
            else:
                shadow = np.concatenate(scores.shadow[(t, r.dtype)]) if len(completions) else np.zeros(0)
                meta["shadow"] = {"engine": ENGINE_NAMES[t.engine], "dtype": r.dtype,
                                  "lm_head_fp32": opts.lm_head("trainer")}
        floor = None
        if opts.trainer_floor:
            if t in scores.floor:
                floor = np.concatenate(scores.floor[t]) if len(completions) else np.zeros(0)
                meta["trainer_floor"] = {"composition": FLOOR_COMPOSITION}
            else:
                meta["trainer_floor"] = {"available": False, "reason": f"the {t.engine} trainer engine has no floor pass"}
        topk = topk_arrays(scores, r, t)
        sides = {}
        if scores.recompute is not None and r == gen_spec:  # the sampler's pair: its own tokens re-scored
            sides["recompute"] = np.concatenate(scores.recompute) if len(completions) else np.zeros(0)
            meta["recompute"] = {"engine": ENGINE_NAMES[opts.recompute.engine] if opts.recompute else None,
                                 "dtype": opts.recompute.dtype if opts.recompute else None,
                                 "how": "the sampled sequences re-scored in one prefill (prompt log-probs), no sampling, "
                                        "no top-p / top-k"}
        versions = (np.asarray(labels(prep.lag, meta["trainer_version"]), dtype=str) if opts.stale else None)
        out[(r, t)] = StepBatch(
            rollout_logp=np.concatenate(scores.rollout[r]),
            trainer_logp=np.concatenate(scores.trainer[t]),
            offsets=offsets, mask=np.ones(len(token_ids), bool), token_ids=token_ids,
            token_text=list(token_text), prompt_ids=prompt_arrays, prompt_text=prompt_text, group=group,
            shadow_logp=shadow, floor_logp=floor, sides=sides, meta=meta, weight_version=versions, **topk,
            **route_arrays(scores, r, t, meta), **kept_arrays(scores, t, meta, gen_spec),
            token_version=token_versions(scores, meta),
            cached_tokens=np.asarray(scores.cached, np.int64) if None not in scores.cached else None)
    return out


def route_arrays(scores: Scores, r: EngineSpec, t: EngineSpec, meta: dict) -> dict[str, Any]:
    """Each side's [T, layers, k] routed experts where its scoring pass recorded them (a sampler's are not)."""
    out: dict[str, Any] = {}
    for side, spec in (("rollout", r), ("trainer", t)):
        rows = scores.routes.get((side, spec))
        if rows is not None:
            out[f"{side}_routes"] = np.concatenate(rows).astype(np.int32)
    if out:
        meta["routes"] = {"recorded": sorted(out), "how": "the router's top-k at every scored position, per layer"}
    return out


def topk_arrays(scores: Scores, r: EngineSpec, t: EngineSpec) -> dict[str, Any]:
    """The pair's [T, k] top-k arrays (StepBatch fields), when both sides recorded them."""
    found = {"rollout": scores.topk.get(("rollout", r)), "trainer": scores.topk.get(("trainer", t))}
    sides = {side: rows for side, rows in found.items() if rows is not None}
    if len(sides) < 2:
        return {}
    out: dict[str, Any] = {}
    for side, rows in sides.items():
        out[f"{side}_topk_ids"] = np.concatenate([x.ids for x in rows]).astype(np.int32)
        out[f"{side}_topk_logp"] = np.concatenate([x.logp for x in rows]).astype(np.float32)
    return out


def kept_arrays(scores: Scores, t: EngineSpec, meta: dict, sampler: EngineSpec) -> dict[str, Any]:
    """The sampler's kept sets as CSR over the pair's tokens, and the trainer's log-mass on them where it measured it."""
    if scores.kept is None:
        return {}
    ids = np.concatenate([np.asarray(k[0], np.int32) for k in scores.kept])
    offsets = kept_counts_offsets(np.concatenate([np.asarray(k[1], np.int64) for k in scores.kept]))
    out: dict[str, Any] = {"kept_ids": ids, "kept_offsets": offsets}
    if t in scores.kept_mass:
        out["kept_log_mass"] = np.concatenate(scores.kept_mass[t]).astype(np.float64)
    meta["kept_sets"] = {"recorded_by": str(sampler), "trainer_mass": t in scores.kept_mass,
                         "how": KEPT_HOW.format(sampler=sampler)}
    return out


def token_versions(scores: Scores, meta: dict) -> np.ndarray | None:
    """Each token's version from the engine's own weight-version spans (vLLM ≥ 0.32): the lag split reads them per
    token; a label that is not an integer version is unknown."""
    if scores.token_versions is None or any(v is None for v in scores.token_versions):
        return None
    found = [version_int(str(v)) for seq in scores.token_versions for v in seq]
    meta["weight_version_source"] = "the engine's per-token weight-version spans (vLLM CompletionOutput.weight_versions)"
    return np.asarray([UNKNOWN_VERSION if v is None else v for v in found], np.int64)


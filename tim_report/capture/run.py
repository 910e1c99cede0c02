"""Capture orchestration: sample once with the first rollout spec, score the same tokens for every pair.

Order of work (and of failure): every input is checked before a model is loaded (model folder,
prompt file, engine specs, the environment: vLLM importable, no companion package that breaks transformers
or vLLM, option combinations), so bad input exits 2 with nothing written. Then:

1. tokenizer + prompts → prompt token ids (chat template unless disabled), `n_samples` copies each,
   one seed per sequence (numpy SeedSequence of `--seed`);
2. the first rollout spec samples the completions and returns the processed log-probs it sampled with;
3. every other (engine, dtype, lm-head) needed is loaded once, one at a time (trainers first, so that a pair
   is complete as early as possible), and scores the same tokens: further rollout specs (processed log-probs:
   temperature + top-k/top-p), trainer specs (temperature only, as a trainer does), and with `shadow` the
   trainer's engine in each rollout's dtype; with `top_k_logprobs` K > 0 the sampler and every rollout and
   trainer scorer also record the K most likely tokens at each position (the shadow pass does not);
4. one StepBatch per (rollout, trainer) pair. When an engine fails, EngineFailed carries the pairs that were
   complete before it (`kept`), so the caller can keep them.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..config import TOPK_MAX
from ..errors import BadInput
from ..model import StepBatch
from .engines import EngineFailed, EngineKey, one_line, open_engine
from .environment import check_environment
from .model_path import config_numbers, locate_model, model_meta, resolve_model
from .options import CaptureOptions
from .prompts import read_prompts, render_prompts
from .spec import ENGINE_NAMES, EngineSpec
from .stale import check_stale, deal, labels, samplers, trainer_version

ProgressFactory = Callable[[str, int], contextlib.AbstractContextManager]
MATRIX_DTYPES = ("bf16", "fp16", "fp32")


def pair_filename(rollout: EngineSpec, trainer: EngineSpec) -> str:
    return f"{rollout.slug}__{trainer.slug}.npz"


def matrix_specs(specs: list[EngineSpec]) -> list[EngineSpec]:
    """Every engine named, in bf16, fp16 and fp32 (first spec first: it samples the tokens)."""
    out = list(dict.fromkeys(specs[:1]))
    for s in specs:
        for d in MATRIX_DTYPES:
            if EngineSpec(s.engine, d) not in out:
                out.append(EngineSpec(s.engine, d))
    return out


@contextlib.contextmanager
def _no_progress(_label: str, _total: int):
    yield lambda n=1: None


# ---------------------------------------------------------------------------- checks


def _lm_head(opts: CaptureOptions, side: str) -> bool:
    return opts.lm_head_fp32 in (side, "both")


def check_options(opts: CaptureOptions) -> None:
    """Every input checked before a model is loaded; `opts.model_dir` set to the folder `--model` stands for (a GGUF
    converted once into the cache, model_path.resolve_model)."""
    locate_model(opts.model)  # what the user named, before any default of ours (vLLM) is checked
    read_prompts(opts.prompts)
    opts.sampling.check()
    if not opts.rollouts or not opts.trainers:
        raise BadInput("--rollout/--trainer", "need at least one of each")
    if not 0 <= opts.top_k_logprobs <= TOPK_MAX:
        raise BadInput("--top-k-logprobs", f"{opts.top_k_logprobs} must be between 0 (off) and {TOPK_MAX}")
    if opts.max_prompts is not None and opts.max_prompts < 1:
        raise BadInput("--max-prompts", "must be ≥ 1")
    s = opts.sampling
    plain = s.temperature == 1.0 and not s.truncates
    scorers = [(f"--rollout {r}", r) for r in opts.rollouts[1:]] + [(f"--trainer {t}", t) for t in opts.trainers]
    if opts.shadow:
        scorers += [(f"--shadow (trainer {t} in {r.dtype})", t.with_dtype(r.dtype)) for r in opts.rollouts for t in opts.trainers]
    for label, spec in scorers:
        if spec.engine == "vllm" and not plain:
            raise BadInput(label, "vLLM can only score given tokens at --temperature 1 without --top-p/--top-k "
                                  "(its prompt log-probs are raw); use hf on this side")
    recompute = _recompute_scorer(opts)
    first = "--rollout vllm:bf16 (the default)" if opts.default_rollout else "--rollout"
    check_environment([(first, opts.rollouts[0])] + scorers + recompute)
    for side, specs in (("rollout", opts.rollouts), ("trainer", opts.trainers)):
        if _lm_head(opts, side) and any(sp.engine == "vllm" for sp in specs):
            raise BadInput("--lm-head-fp32", f"vLLM cannot keep the LM head in fp32: pass --lm-head-fp32 "
                                             f"{'trainer' if side == 'rollout' else 'rollout'} or use hf on the {side} side")
    if opts.device not in ("auto", "cpu", "cuda") and not opts.device.startswith("cuda:"):
        raise BadInput("--device", f"'{opts.device}' is not auto, cpu or cuda")
    opts.model_dir = str(resolve_model(opts.model, notice=_say))
    if opts.stale:  # each older checkpoint as a folder too (a GGUF converted once), then checked against the model
        opts.stale = {lag: str(resolve_model(path, notice=_say)) for lag, path in opts.stale.items()}
    check_stale(opts.folder, opts.stale, len(opts.rollouts), opts.recompute is not None)


def _say(line: str) -> None:
    print(f"tim-report: {line}", file=sys.stderr, flush=True)


def _recompute_scorer(opts: CaptureOptions) -> list[tuple[str, EngineSpec]]:
    """`--recompute`'s engine for the environment check; vLLM re-scores only at temperature 1 (raw prompt log-probs)."""
    if opts.recompute is None:
        return []
    if opts.recompute.engine == "vllm" and opts.sampling.temperature != 1.0:
        raise BadInput("--recompute", "vLLM re-scores given tokens only at --temperature 1 (its prompt log-probs are "
                                      "raw); use hf for the re-score, or sample at temperature 1")
    return [("--recompute", opts.recompute)]


def _device(opts: CaptureOptions) -> str:
    import torch

    if opts.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if opts.device.startswith("cuda") and not torch.cuda.is_available():
        raise BadInput("--device", "CUDA is not available on this machine")
    return opts.device


def _device_label(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return f"cuda ({torch.cuda.get_device_name(device)})"
    return "cpu"


# ---------------------------------------------------------------------------- engines


def _config_hash(model: Path) -> str:
    return hashlib.sha256((model / "config.json").read_bytes()).hexdigest()[:16]


# ---------------------------------------------------------------------------- capture


def capture(opts: CaptureOptions, progress: ProgressFactory | None = None) -> dict[tuple[EngineSpec, EngineSpec], StepBatch]:
    """Run the capture; returns one StepBatch per (rollout, trainer) pair, in `opts.pairs()` order.

    An engine failure raises EngineFailed (one line naming the engine and dtype) whose `kept` holds the pairs
    captured before it."""
    check_options(opts)
    prep = _prepare(opts)
    jobs, shadow_skipped = _plan(opts)
    scores = _Scores()
    try:
        _run(jobs, opts, prep, progress or _no_progress, scores)
    except EngineFailed as exc:
        exc.kept = _assemble(opts, prep, scores, shadow_skipped)
        raise
    return _assemble(opts, prep, scores, shadow_skipped)


@dataclass
class _Prepared:
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


def _prepare(opts: CaptureOptions) -> _Prepared:
    prompts = read_prompts(opts.prompts)
    if opts.max_prompts:
        prompts = prompts[: opts.max_prompts]
    device = _device(opts)
    if any(sp.dtype == "fp8" for sp in opts.rollouts + opts.trainers):
        import torch

        if not torch.cuda.is_available():
            raise BadInput("vllm:fp8", "fp8 needs vLLM on a GPU (this machine has none)")
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(opts.folder, trust_remote_code=False)
    except Exception as exc:
        raise BadInput(opts.model, f"transformers cannot load the tokenizer ({one_line(exc)})") from None
    ctx, _ = config_numbers(opts.folder)
    p_ids, p_text, templated = render_prompts(prompts, tokenizer, opts.chat_template, opts.prompts, ctx, opts.model)
    s = opts.sampling
    longest = max(len(p) for p in p_ids)
    if longest + s.max_new_tokens > ctx:
        raise BadInput("--max-new-tokens", f"{s.max_new_tokens} new tokens after a {longest}-token prompt exceed the "
                                            f"model's context of {ctx}")
    seq_prompt = [i for i in range(len(p_ids)) for _ in range(s.n_samples)]
    seeds = [int(x) for x in np.random.SeedSequence(opts.seed).generate_state(len(seq_prompt))]
    found = samplers(opts.model, opts.stale)
    dealt = deal(len(p_ids), len(found))
    sampler = [None if found[dealt[i]][1] == opts.model else found[dealt[i]][1] for i in seq_prompt]
    return _Prepared(tokenizer, p_ids, p_text, templated, seq_prompt, seeds,
                     min(ctx, longest + s.max_new_tokens + 1), device, sampler, [found[dealt[i]][0] for i in seq_prompt])


Job = tuple[str, EngineSpec, "EngineSpec | None"]  # (generate | rollout | trainer | floor | shadow, spec, rollout spec of a shadow)


FLOOR_COMPOSITION = ("the trainer pass packs length-sorted sequences into right-padded micro-batches; the floor pass "
                     "scores one sequence per micro-batch (no padding), in reverse order")


def _plan(opts: CaptureOptions) -> tuple[dict[EngineKey, list[Job]], dict[tuple[EngineSpec, EngineSpec], str]]:
    """What each engine must do, so each (engine, dtype, lm-head) is loaded once; and the shadow passes skipped.

    The sampler first, then the trainers (each completes a pair with the sampler's rollout), then the other
    rollouts: an engine failing late leaves as many complete pairs as it can."""
    gen_spec = opts.rollouts[0]
    jobs: dict[EngineKey, list[Job]] = {}
    for _lag, model in samplers(opts.model, opts.stale):  # each sampler once: --model, then the --stale checkpoints
        key = EngineKey(gen_spec.engine, gen_spec.dtype, _lm_head(opts, "rollout"), None if model == opts.model else model)
        jobs.setdefault(key, [("generate", gen_spec, None)])
    if opts.recompute is not None:  # beside the sampler: the same engine is loaded once when the spec is the same
        rc = opts.recompute
        jobs.setdefault(EngineKey(rc.engine, rc.dtype, _lm_head(opts, "rollout")), []).append(("recompute", rc, None))
    for t in opts.trainers:
        jobs.setdefault(EngineKey(t.engine, t.dtype, _lm_head(opts, "trainer")), []).append(("trainer", t, None))
        if opts.trainer_floor and t.engine == "hf":
            jobs[EngineKey(t.engine, t.dtype, _lm_head(opts, "trainer"))].append(("floor", t, None))
    for r in opts.rollouts[1:]:
        jobs.setdefault(EngineKey(r.engine, r.dtype, _lm_head(opts, "rollout")), []).append(("rollout", r, None))
    shadow_skipped: dict[tuple[EngineSpec, EngineSpec], str] = {}
    if opts.shadow:
        for r in opts.rollouts:
            for t in opts.trainers:
                if t.engine == "hf" and r.dtype == "fp8":
                    shadow_skipped[(r, t)] = "the hf engine has no fp8"
                    continue
                key = EngineKey(t.engine, r.dtype, _lm_head(opts, "trainer"))
                entry = ("shadow", t, r)
                if entry not in jobs.setdefault(key, []):
                    jobs[key].append(entry)
    return jobs, shadow_skipped


@dataclass
class _Scores:
    completions: list[list[int]] = field(default_factory=list)
    rollout: dict[EngineSpec, list[np.ndarray]] = field(default_factory=dict)
    trainer: dict[EngineSpec, list[np.ndarray]] = field(default_factory=dict)
    shadow: dict[tuple[EngineSpec, str], list[np.ndarray]] = field(default_factory=dict)  # (trainer spec, rollout dtype)
    floor: dict[EngineSpec, list[np.ndarray]] = field(default_factory=dict)  # the trainer's second scoring
    recompute: list[np.ndarray] | None = None  # the rollout engine's re-score of the sampled tokens
    routes: dict[tuple[str, EngineSpec], list[np.ndarray]] = field(default_factory=dict)  # ("rollout" | "trainer", spec)
    topk: dict[tuple[str, EngineSpec], list] = field(default_factory=dict)  # ("rollout" | "trainer", spec) → TopK per sequence
    versions: dict[str, str] = field(default_factory=dict)


def _keep(out: _Scores, kind: str, spec: EngineSpec, key: EngineKey, lp: list[np.ndarray], routes: list | None) -> None:
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


def _run(jobs: dict[EngineKey, list[Job]], opts: CaptureOptions, prep: _Prepared, progress: ProgressFactory,
         out: _Scores) -> None:
    """Load each engine once, one at a time, and do its jobs into `out`: the first samples, the others score the
    same tokens. Any failure of an engine (loading it or running it) is EngineFailed."""
    s = opts.sampling
    seq_ids, n_seq = prep.seq_ids, len(prep.seq_prompt)
    if opts.engine_log and any(key.engine == "vllm" for key in jobs):
        Path(opts.engine_log).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.engine_log).write_text("")
    for key, todo in jobs.items():
        engine, doing = None, "starting"
        try:
            with progress(f"loading {key}", 0):  # often the longest stage (vLLM's start): said before it, not after
                engine = open_engine(key, opts, prep.device, prep.max_model_len)
            out.versions[key.engine] = engine.version
            for kind, spec, _rollout in todo:
                if kind == "generate":
                    doing = "sampling"
                    _generate(engine, key, spec, opts, prep, progress, out)
                    continue
                if kind == "recompute":  # untruncated, at the sampling temperature: what the trainer should compute
                    doing = "re-scoring the sampled tokens"
                    with progress(f"recompute ({spec})", n_seq) as advance:
                        out.recompute = engine.score(seq_ids, out.completions, s.temperature, 0, 1.0, progress=advance)
                    continue
                label = {"rollout": f"scoring rollout ({spec})", "trainer": f"scoring trainer ({spec})",
                         "floor": f"trainer floor ({spec})", "shadow": f"shadow ({spec.engine} in {key.dtype})"}[kind]
                doing = {"rollout": "re-scoring the rollout", "trainer": "scoring as the trainer",
                         "floor": "scoring the trainer floor", "shadow": f"scoring the shadow pass of {spec}"}[kind]
                processed = kind == "rollout"  # a rollout engine's log-probs are after top-k / top-p; a trainer's are not
                topk = opts.top_k_logprobs if kind in ("rollout", "trainer") else 0
                extra = {"alone": True} if kind == "floor" else {}
                if opts.routes and key.engine == "hf" and kind in ("rollout", "trainer"):
                    extra["routes"] = True
                with progress(label, n_seq) as advance:
                    lp = engine.score(seq_ids, out.completions, s.temperature, s.top_k if processed else 0,
                                      s.top_p if processed else 1.0, progress=advance, topk=topk, **extra)
                if topk:
                    out.topk[(kind, spec)] = [x[1] for x in lp]
                    lp = [x[0] for x in lp]
                _keep(out, kind, spec, key, lp, getattr(engine, "last_routes", None) if extra.get("routes") else None)
        except Exception as exc:
            log = f" (its log: {opts.engine_log})" if opts.engine_log and key.engine == "vllm" else ""
            raise EngineFailed(key, doing, one_line(exc) + log) from None
        finally:
            if engine is not None:
                engine.close()


def _generate(engine, key: EngineKey, spec: EngineSpec, opts: CaptureOptions, prep: _Prepared,
              progress: ProgressFactory, out: _Scores) -> None:
    """Sample the sequences this engine's checkpoint is dealt (every one without --stale) into `out`, in place."""
    s, n_seq = opts.sampling, len(prep.seq_prompt)
    mine = [i for i in range(n_seq) if prep.sampler[i] == key.model]
    if not mine:
        return
    label = f"generating ({spec}{', ' + Path(key.model).name if key.model else ''})"
    with progress(label, len(mine)) as advance:
        gen = engine.generate([prep.seq_ids[i] for i in mine], [prep.seeds[i] for i in mine], s.temperature, s.top_k,
                              s.top_p, s.max_new_tokens, progress=advance, topk=opts.top_k_logprobs)
    if not out.completions:
        out.completions = [[] for _ in range(n_seq)]
    rollout = out.rollout.setdefault(spec, [np.zeros(0)] * n_seq)
    topk = out.topk.setdefault(("rollout", spec), [None] * n_seq) if opts.top_k_logprobs else None
    for i, g in zip(mine, gen):
        out.completions[i], rollout[i] = g[0], g[1]
        if topk is not None:
            topk[i] = g[2]


def _base_meta(opts: CaptureOptions, prep: _Prepared) -> dict:
    meta = {
        "source": "tim-report capture",
        **model_meta(Path(opts.folder)),
        "model_config_sha256": _config_hash(Path(opts.folder)),
        "device": _device_label(prep.device),
        "sampling": opts.sampling.to_meta(),
        "seed": opts.seed,
        "chat_template": prep.templated,
        "prompts": {"file": Path(opts.prompts).name, "count": len(prep.prompt_ids), "n_samples": opts.sampling.n_samples},
        "sampled_by": str(opts.rollouts[0]),
        "top_k_logprobs": opts.top_k_logprobs,
    }
    if opts.stale:
        meta["trainer_version"] = trainer_version(opts.stale, opts.trainer_version)
        meta["stale"] = {"samplers": {str(lag): path for lag, path in samplers(opts.model, opts.stale)},
                         "how": "capture --stale: prompts dealt to the samplers in turn; each sequence labelled with "
                                "the trainer's version minus its sampler's lag"}
    try:
        from importlib.metadata import version

        meta["tim_report_version"] = version("tim-report")
    except Exception:
        pass
    import torch

    meta["torch_version"] = str(torch.__version__)
    return meta


def _assemble(opts: CaptureOptions, prep: _Prepared, scores: _Scores,
              shadow_skipped: dict[tuple[EngineSpec, EngineSpec], str]) -> dict[tuple[EngineSpec, EngineSpec], StepBatch]:
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
    base_meta = _base_meta(opts, prep)
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
            "lm_head_fp32": {"rollout": _lm_head(opts, "rollout"), "trainer": _lm_head(opts, "trainer")},
        })
        shadow = None
        if opts.shadow:
            if (r, t) in shadow_skipped:
                meta["shadow"] = {"available": False, "reason": shadow_skipped[(r, t)]}
            else:
                shadow = np.concatenate(scores.shadow[(t, r.dtype)]) if len(completions) else np.zeros(0)
                meta["shadow"] = {"engine": ENGINE_NAMES[t.engine], "dtype": r.dtype,
                                  "lm_head_fp32": _lm_head(opts, "trainer")}
        floor = None
        if opts.trainer_floor:
            if t in scores.floor:
                floor = np.concatenate(scores.floor[t]) if len(completions) else np.zeros(0)
                meta["trainer_floor"] = {"composition": FLOOR_COMPOSITION}
            else:
                meta["trainer_floor"] = {"available": False, "reason": f"the {t.engine} trainer engine has no floor pass"}
        topk = _topk_arrays(scores, r, t)
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
            **_route_arrays(scores, r, t, meta))
    return out


def _route_arrays(scores: _Scores, r: EngineSpec, t: EngineSpec, meta: dict) -> dict[str, Any]:
    """Each side's [T, layers, k] routed experts where its scoring pass recorded them (a sampler's are not)."""
    out: dict[str, Any] = {}
    for side, spec in (("rollout", r), ("trainer", t)):
        rows = scores.routes.get((side, spec))
        if rows is not None:
            out[f"{side}_routes"] = np.concatenate(rows).astype(np.int32)
    if out:
        meta["routes"] = {"recorded": sorted(out), "how": "the router's top-k at every scored position, per layer"}
    return out


def _topk_arrays(scores: _Scores, r: EngineSpec, t: EngineSpec) -> dict[str, Any]:
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

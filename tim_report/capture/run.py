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
from .pairs import Prepared, Scores, assemble, keep
from .prompts import read_prompts, render_prompts
from .spec import EngineSpec
from .stale import check_stale, deal, samplers, trainer_version

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
    _check_kept(opts)
    recompute = _recompute_scorer(opts)
    first = "--rollout vllm:bf16 (the default)" if opts.default_rollout else "--rollout"
    check_environment([(first, opts.rollouts[0])] + scorers + recompute)
    for side, specs in (("rollout", opts.rollouts), ("trainer", opts.trainers)):
        if opts.lm_head(side) and any(sp.engine == "vllm" for sp in specs):
            raise BadInput("--lm-head-fp32", f"vLLM cannot keep the LM head in fp32: pass --lm-head-fp32 "
                                             f"{'trainer' if side == 'rollout' else 'rollout'} or use hf on the {side} side")
    if opts.device not in ("auto", "cpu", "cuda") and not opts.device.startswith("cuda:"):
        raise BadInput("--device", f"'{opts.device}' is not auto, cpu or cuda")
    opts.model_dir = str(resolve_model(opts.model, notice=_say))
    if opts.stale:  # each older checkpoint as a folder too (a GGUF converted once), then checked against the model
        opts.stale = {lag: str(resolve_model(path, notice=_say)) for lag, path in opts.stale.items()}
    check_stale(opts.folder, opts.stale, len(opts.rollouts), opts.recompute is not None)


VLLM_KEPT_CPU = ("vLLM returns each token's kept set (return_sampling_mask) only with Model Runner V2, which needs Triton "
                 "and a GPU; this machine has none: sample with --rollout hf:DTYPE, which records them, or drop --kept-set")


def records_kept(opts: CaptureOptions, spec: EngineSpec) -> bool:
    """Whether the sampler records each token's kept set: asked for (--kept-set), or by default where the sampler
    computes it itself (hf); never when sampling keeps the whole vocabulary."""
    if opts.kept_sets is False or not opts.sampling.truncates:
        return False
    return opts.kept_sets is True or spec.engine == "hf"


def _check_kept(opts: CaptureOptions) -> None:
    """--kept-set needs truncated sampling; from vLLM, a GPU (Model Runner V2), a top-k bound and no vLLM re-score on
    the sampler's engine (its scoring requests cannot run with sampling masks on)."""
    if not opts.kept_sets:
        return
    if not opts.sampling.truncates:
        raise BadInput("--kept-set", "sampling keeps the whole vocabulary (no --top-p below 1, no --top-k): there is no "
                                     "kept set to record")
    sampler = opts.rollouts[0]
    if sampler.engine != "vllm":
        return
    import torch

    if not torch.cuda.is_available():
        raise BadInput("--kept-set", VLLM_KEPT_CPU)
    if opts.sampling.top_k <= 0:
        raise BadInput("--kept-set", "vLLM returns kept sets only under a --top-k bound (prime-rl uses 512)")
    if opts.recompute == sampler or sampler in opts.trainers or sampler in opts.rollouts[1:]:
        raise BadInput("--kept-set", f"{sampler} cannot also score tokens while it returns kept sets: re-score with "
                                     "another engine or dtype")


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
    scores = Scores()
    base_meta = _base_meta(opts, prep)
    try:
        _run(jobs, opts, prep, progress or _no_progress, scores)
    except EngineFailed as exc:
        exc.kept = assemble(opts, prep, scores, shadow_skipped, base_meta)
        raise
    return assemble(opts, prep, scores, shadow_skipped, base_meta)


def _prepare(opts: CaptureOptions) -> Prepared:
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
    return Prepared(tokenizer, p_ids, p_text, templated, seq_prompt, seeds,
                     min(ctx, longest + s.max_new_tokens + 1), device, sampler, [found[dealt[i]][0] for i in seq_prompt])


Job = tuple[str, EngineSpec, "EngineSpec | None"]  # (generate | rollout | trainer | floor | shadow, spec, rollout spec of a shadow)


def _plan(opts: CaptureOptions) -> tuple[dict[EngineKey, list[Job]], dict[tuple[EngineSpec, EngineSpec], str]]:
    """What each engine must do, so each (engine, dtype, lm-head) is loaded once; and the shadow passes skipped.

    The sampler first, then the trainers (each completes a pair with the sampler's rollout), then the other
    rollouts: an engine failing late leaves as many complete pairs as it can."""
    gen_spec = opts.rollouts[0]
    jobs: dict[EngineKey, list[Job]] = {}
    for _lag, model in samplers(opts.model, opts.stale):  # each sampler once: --model, then the --stale checkpoints
        key = EngineKey(gen_spec.engine, gen_spec.dtype, opts.lm_head("rollout"), None if model == opts.model else model)
        jobs.setdefault(key, [("generate", gen_spec, None)])
    if opts.recompute is not None:  # beside the sampler: the same engine is loaded once when the spec is the same
        rc = opts.recompute
        jobs.setdefault(EngineKey(rc.engine, rc.dtype, opts.lm_head("rollout")), []).append(("recompute", rc, None))
    for t in opts.trainers:
        jobs.setdefault(EngineKey(t.engine, t.dtype, opts.lm_head("trainer")), []).append(("trainer", t, None))
        if opts.trainer_floor and t.engine == "hf":
            jobs[EngineKey(t.engine, t.dtype, opts.lm_head("trainer"))].append(("floor", t, None))
    for r in opts.rollouts[1:]:
        jobs.setdefault(EngineKey(r.engine, r.dtype, opts.lm_head("rollout")), []).append(("rollout", r, None))
    shadow_skipped: dict[tuple[EngineSpec, EngineSpec], str] = {}
    if opts.shadow:
        for r in opts.rollouts:
            for t in opts.trainers:
                if t.engine == "hf" and r.dtype == "fp8":
                    shadow_skipped[(r, t)] = "the hf engine has no fp8"
                    continue
                key = EngineKey(t.engine, r.dtype, opts.lm_head("trainer"))
                entry = ("shadow", t, r)
                if entry not in jobs.setdefault(key, []):
                    jobs[key].append(entry)
    return jobs, shadow_skipped


def _run(jobs: dict[EngineKey, list[Job]], opts: CaptureOptions, prep: Prepared, progress: ProgressFactory,
         out: Scores) -> None:
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
                extra: dict[str, Any] = {"alone": True} if kind == "floor" else {}
                if opts.routes and key.engine == "hf" and kind in ("rollout", "trainer"):
                    extra["routes"] = True
                if kind == "trainer" and key.engine == "hf" and out.kept is not None:
                    extra["kept"] = out.kept  # the trainer's mass on the sampler's kept sets, from its own pass
                with progress(label, n_seq) as advance:
                    lp = engine.score(seq_ids, out.completions, s.temperature, s.top_k if processed else 0,
                                      s.top_p if processed else 1.0, progress=advance, topk=topk, **extra)
                if topk:
                    out.topk[(kind, spec)] = [x[1] for x in lp]
                    lp = [x[0] for x in lp]
                keep(out, kind, spec, key, lp, getattr(engine, "last_routes", None) if extra.get("routes") else None)
                if "kept" in extra:
                    out.kept_mass[spec] = engine.last_kept_mass
        except Exception as exc:
            log = f" (its log: {opts.engine_log})" if opts.engine_log and key.engine == "vllm" else ""
            raise EngineFailed(key, doing, one_line(exc) + log) from None
        finally:
            if engine is not None:
                engine.close()


def _generate(engine, key: EngineKey, spec: EngineSpec, opts: CaptureOptions, prep: Prepared,
              progress: ProgressFactory, out: Scores) -> None:
    """Sample the sequences this engine's checkpoint is dealt (every one without --stale) into `out`, in place."""
    s, n_seq = opts.sampling, len(prep.seq_prompt)
    mine = [i for i in range(n_seq) if prep.sampler[i] == key.model]
    if not mine:
        return
    label = f"generating ({spec}{', ' + Path(key.model).name if key.model else ''})"
    with progress(label, len(mine)) as advance:
        gen = engine.generate([prep.seq_ids[i] for i in mine], [prep.seeds[i] for i in mine], s.temperature, s.top_k,
                              s.top_p, s.max_new_tokens, progress=advance, topk=opts.top_k_logprobs,
                              kept=records_kept(opts, spec))
    if not out.completions:
        out.completions, out.cached = [[] for _ in range(n_seq)], [None] * n_seq
    rollout = out.rollout.setdefault(spec, [np.zeros(0)] * n_seq)
    topk = out.topk.setdefault(("rollout", spec), [None] * n_seq) if opts.top_k_logprobs else None
    if gen and gen[0].kept is not None and out.kept is None:
        out.kept = [None] * n_seq
    if gen and gen[0].versions is not None and out.token_versions is None:
        out.token_versions = [None] * n_seq
    for i, g in zip(mine, gen):
        out.completions[i], rollout[i], out.cached[i] = g.token_ids, g.logp, g.cached
        if topk is not None:
            topk[i] = g.topk
        if out.kept is not None:
            out.kept[i] = g.kept
        if out.token_versions is not None:
            out.token_versions[i] = g.versions


def _base_meta(opts: CaptureOptions, prep: Prepared) -> dict:
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
        "top_k_logprobs": opts.top_k_logprobs, "prefix_caching": opts.prefix_caching,
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



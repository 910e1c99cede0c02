"""Capture orchestration: sample once with the first rollout spec, score the same tokens for every pair.

Order of work (and of failure): every input is checked before a model is loaded (model folder,
prompt file, engine specs, vLLM importable, option combinations), so bad input exits 2 with
nothing written. Then:

1. tokenizer + prompts → prompt token ids (chat template unless disabled), `n_samples` copies each,
   one seed per sequence (numpy SeedSequence of `--seed`);
2. the first rollout spec samples the completions and returns the processed log-probs it sampled with;
3. every other (engine, dtype, lm-head) needed is loaded once, one at a time, and scores the same tokens:
   further rollout specs (processed log-probs: temperature + top-k/top-p), trainer specs (temperature
   only, as a trainer does), and with `shadow` the trainer's engine in each rollout's dtype;
4. one StepBatch per (rollout, trainer) pair.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..batch import StepBatch
from ..errors import BadInput
from .prompts import read_prompts, render_prompts
from .spec import ENGINE_NAMES, EngineSpec, Sampling
from .vllm_engine import require_vllm

ProgressFactory = Callable[[str, int], contextlib.AbstractContextManager]
MATRIX_DTYPES = ("bf16", "fp16", "fp32")


@dataclass
class CaptureOptions:
    model: str
    prompts: str
    rollouts: list[EngineSpec]
    trainers: list[EngineSpec]
    sampling: Sampling = field(default_factory=Sampling)
    seed: int = 0
    shadow: bool = False
    lm_head_fp32: str | None = None  # None | "rollout" | "trainer" | "both"
    chat_template: bool = True
    device: str = "auto"  # hf engine device: auto | cpu | cuda
    max_prompts: int | None = None
    kv_cache_gib: int = 1  # vLLM CPU KV cache (VLLM_CPU_KVCACHE_SPACE)
    logit_chunk_mb: int = 256  # hf scoring: full-vocabulary fp32 logits held at once

    def pairs(self) -> list[tuple[EngineSpec, EngineSpec]]:
        return [(r, t) for r in self.rollouts for t in self.trainers]


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
    model = Path(opts.model)
    if not model.exists():
        raise BadInput(opts.model, "no such model folder")
    if not model.is_dir() or not (model / "config.json").is_file():
        raise BadInput(opts.model, "not a transformers model folder (no config.json)")
    opts.sampling.check()
    if not opts.rollouts or not opts.trainers:
        raise BadInput("--rollout/--trainer", "need at least one of each")
    if opts.max_prompts is not None and opts.max_prompts < 1:
        raise BadInput("--max-prompts", "must be ≥ 1")
    s = opts.sampling
    plain = s.temperature == 1.0 and not s.truncates
    scorers = [(f"--rollout {r}", r) for r in opts.rollouts[1:]] + [(f"--trainer {t}", t) for t in opts.trainers]
    if opts.shadow:
        scorers += [(f"--shadow (trainer {t} in {r.dtype})", t.with_dtype(r.dtype)) for r in opts.rollouts for t in opts.trainers]
    for label, spec in [("--rollout", opts.rollouts[0])] + scorers:
        if spec.engine == "vllm":
            require_vllm(label)
    for label, spec in scorers:
        if spec.engine == "vllm" and not plain:
            raise BadInput(label, "vLLM can only score given tokens at --temperature 1 without --top-p/--top-k "
                                  "(its prompt log-probs are raw); use hf on this side")
    for side, specs in (("rollout", opts.rollouts), ("trainer", opts.trainers)):
        if _lm_head(opts, side) and any(sp.engine == "vllm" for sp in specs):
            raise BadInput("--lm-head-fp32", f"vLLM cannot keep the LM head in fp32: pass --lm-head-fp32 "
                                             f"{'trainer' if side == 'rollout' else 'rollout'} or use hf on the {side} side")
    if opts.device not in ("auto", "cpu", "cuda") and not opts.device.startswith("cuda:"):
        raise BadInput("--device", f"'{opts.device}' is not auto, cpu or cuda")


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


@dataclass(frozen=True)
class EngineKey:
    engine: str
    dtype: str
    lm_head_fp32: bool


def _open(key: EngineKey, opts: CaptureOptions, device: str, max_model_len: int):
    if key.engine == "vllm":
        from .vllm_engine import VLLMEngine

        return VLLMEngine(opts.model, key.dtype, opts.seed, max_model_len, kv_cache_gib=opts.kv_cache_gib)
    from .hf import HFEngine

    return HFEngine(opts.model, key.dtype, device=device, lm_head_fp32=key.lm_head_fp32,
                    logit_chunk_mb=opts.logit_chunk_mb)


def _config_hash(model: Path) -> str:
    return hashlib.sha256((model / "config.json").read_bytes()).hexdigest()[:16]


def _max_len(model: Path) -> int:
    import json

    cfg = json.loads((model / "config.json").read_text())
    return int(cfg.get("max_position_embeddings") or cfg.get("n_positions") or 2048)


# ---------------------------------------------------------------------------- capture


def capture(opts: CaptureOptions, progress: ProgressFactory | None = None) -> dict[tuple[EngineSpec, EngineSpec], StepBatch]:
    """Run the capture; returns one StepBatch per (rollout, trainer) pair, in `opts.pairs()` order."""
    progress = progress or _no_progress
    check_options(opts)
    prompts = read_prompts(opts.prompts)
    if opts.max_prompts:
        prompts = prompts[: opts.max_prompts]
    device = _device(opts)
    model = Path(opts.model)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(opts.model)
    ctx = _max_len(model)
    p_ids, p_text, templated = render_prompts(prompts, tokenizer, opts.chat_template, opts.prompts, ctx)
    s = opts.sampling
    longest = max(len(p) for p in p_ids)
    if longest + s.max_new_tokens > ctx:
        raise BadInput("--max-new-tokens", f"{s.max_new_tokens} new tokens after a {longest}-token prompt exceed the "
                                            f"model's context of {ctx}")

    n = s.n_samples
    seq_prompt = [i for i in range(len(p_ids)) for _ in range(n)]
    seq_ids = [p_ids[i] for i in seq_prompt]
    seeds = [int(x) for x in np.random.SeedSequence(opts.seed).generate_state(len(seq_ids))]
    max_model_len = min(ctx, longest + s.max_new_tokens + 1)

    # what each engine must do: (kind, spec) with kind in generate / rollout / trainer / shadow
    gen_spec = opts.rollouts[0]
    jobs: dict[EngineKey, list[tuple[str, EngineSpec, EngineSpec | None]]] = {}
    gen_key = EngineKey(gen_spec.engine, gen_spec.dtype, _lm_head(opts, "rollout"))
    jobs[gen_key] = [("generate", gen_spec, None)]
    for r in opts.rollouts[1:]:
        jobs.setdefault(EngineKey(r.engine, r.dtype, _lm_head(opts, "rollout")), []).append(("rollout", r, None))
    for t in opts.trainers:
        jobs.setdefault(EngineKey(t.engine, t.dtype, _lm_head(opts, "trainer")), []).append(("trainer", t, None))
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

    completions: list[list[int]] = []
    rollout_lp: dict[EngineSpec, list[np.ndarray]] = {}
    trainer_lp: dict[EngineSpec, list[np.ndarray]] = {}
    shadow_lp: dict[tuple[EngineSpec, str], list[np.ndarray]] = {}  # (trainer spec, rollout dtype)
    versions: dict[str, str] = {}
    n_seq = len(seq_ids)
    for key, todo in jobs.items():
        engine = _open(key, opts, device, max_model_len)
        versions[key.engine] = engine.version
        try:
            for kind, spec, other in todo:
                if kind == "generate":
                    with progress(f"generating ({spec})", n_seq) as advance:
                        gen = engine.generate(seq_ids, seeds, s.temperature, s.top_k, s.top_p, s.max_new_tokens, advance)
                    completions = [g[0] for g in gen]
                    rollout_lp[spec] = [g[1] for g in gen]
                    continue
                label = {"rollout": f"scoring rollout ({spec})", "trainer": f"scoring trainer ({spec})",
                         "shadow": f"shadow ({spec.engine} in {key.dtype})"}[kind]
                processed = kind == "rollout"
                with progress(label, n_seq) as advance:
                    lp = engine.score(seq_ids, completions, s.temperature, s.top_k if processed else 0,
                                      s.top_p if processed else 1.0, advance)
                if kind == "rollout":
                    rollout_lp[spec] = lp
                elif kind == "trainer":
                    trainer_lp[spec] = lp
                else:
                    shadow_lp[(spec, key.dtype)] = lp
        finally:
            engine.close()
            del engine

    # ---- assemble
    lengths = np.asarray([len(c) for c in completions], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    token_ids = np.asarray([t for c in completions for t in c], dtype=np.int64)
    token_text = tokenizer.batch_decode([[int(t)] for t in token_ids]) if len(token_ids) else []
    prompt_arrays = [np.asarray(p, dtype=np.int64) for p in seq_ids]
    prompt_text = [p_text[i] for i in seq_prompt]
    group = np.asarray([f"p{i}" for i in seq_prompt], dtype=str)
    base_meta = {
        "source": "tim-report capture",
        "model": opts.model,
        "model_config_sha256": _config_hash(model),
        "device": _device_label(device),
        "sampling": s.to_meta(),
        "seed": opts.seed,
        "chat_template": templated,
        "prompts": {"file": Path(opts.prompts).name, "count": len(p_ids), "n_samples": n},
        "sampled_by": str(gen_spec),
    }
    try:
        from importlib.metadata import version

        base_meta["tim_report_version"] = version("tim-report")
    except Exception:
        pass
    import torch

    base_meta["torch_version"] = str(torch.__version__)

    out: dict[tuple[EngineSpec, EngineSpec], StepBatch] = {}
    for r, t in opts.pairs():
        meta = dict(base_meta)
        meta.update({
            "rollout_engine": ENGINE_NAMES[r.engine], "rollout_engine_version": versions.get(r.engine),
            "rollout_dtype": r.dtype,
            "trainer_engine": ENGINE_NAMES[t.engine], "trainer_engine_version": versions.get(t.engine),
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
                shadow = np.concatenate(shadow_lp[(t, r.dtype)]) if n_seq else np.zeros(0)
                meta["shadow"] = {"engine": ENGINE_NAMES[t.engine], "dtype": r.dtype,
                                  "lm_head_fp32": _lm_head(opts, "trainer")}
        out[(r, t)] = StepBatch(
            rollout_logp=np.concatenate(rollout_lp[r]),
            trainer_logp=np.concatenate(trainer_lp[t]),
            offsets=offsets, mask=np.ones(len(token_ids), bool), token_ids=token_ids,
            token_text=list(token_text), prompt_ids=prompt_arrays, prompt_text=prompt_text, group=group,
            shadow_logp=shadow, meta=meta)
    return out

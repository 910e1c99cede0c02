"""bisect's cost against two plain forwards, and its memory against the number of prompts.

    python benchmarks/bench_bisect.py [--prompts 8] [--len 256] [--threads 1] [--repeat 3]

Two models: the shipped models/tiny-llama6 (hidden 64, where Python overhead dominates) and a random Llama of a
more realistic shape (8 layers, hidden 512, vocab 32,768; made in memory). For each: the time of two plain forwards
(the fp32 reference's and the bf16 candidate's `model(ids).logits`, prompt by prompt) beside `bisect_models` on the
same prompts with a separate floor model (a patched candidate: three setups, the dearer case). Then the peak RSS
growth of bisect over 4 and over 4 × `--prompts` prompts, each in a fresh process: sites are reduced to
statistics as captured, so it should not grow with the prompts. Results go to docs/performance.md by hand.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHAPES = {"tiny-llama6": None,
          "llama-8x512": dict(vocab_size=32768, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                              num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096)}


def models(name: str):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if SHAPES[name] is None:
        ref = AutoModelForCausalLM.from_pretrained(REPO / "models" / name, dtype=torch.float32).eval()
    else:
        torch.manual_seed(0)
        ref = LlamaForCausalLM(LlamaConfig(**SHAPES[name])).eval()
    floor = copy.deepcopy(ref).to(torch.bfloat16).eval()
    cand = copy.deepcopy(floor)
    cand.model.layers[1].mlp.act_fn = torch.nn.GELU()  # a patch: the floor is a third model
    return ref, cand, floor


def prompts(n: int, length: int, vocab: int):
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randint(3, vocab, (n, length), generator=g)


def timed(fn, repeat: int) -> float:
    """Best CPU seconds of this process over `repeat` runs (one thread: steadier than wall time on a shared machine)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def cost(name: str, args) -> dict:
    import torch

    import tim_report

    torch.set_num_threads(args.threads)
    ref, cand, floor = models(name)
    ids = prompts(args.prompts, args.len, ref.config.vocab_size)

    def plain():
        with torch.inference_mode():
            for row in ids:
                ref(row[None])
                cand(row[None])

    def bisect():
        tim_report.bisect_models(ref, cand, ids, floor_model=floor)

    t_plain, t_bisect = timed(plain, args.repeat), timed(bisect, args.repeat)
    return {"model": name, "plain": t_plain, "bisect": t_bisect, "ratio": t_bisect / t_plain}


def memory(name: str, n: int, length: int, threads: int) -> float:
    """Peak RSS growth (MB) of one bisect over n prompts, in this fresh process."""
    import torch

    import tim_report

    torch.set_num_threads(threads)
    ref, cand, floor = models(name)
    ids = prompts(n, length, ref.config.vocab_size)
    tim_report.bisect_models(ref, cand, ids[:1], floor_model=floor)  # warm: first-call allocations
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tim_report.bisect_models(ref, cand, ids, floor_model=floor)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--memory-of", nargs=2, metavar=("MODEL", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_of:
        print(json.dumps(memory(args.memory_of[0], int(args.memory_of[1]), args.len, args.threads)))
        return
    print(f"{args.prompts} prompts of {args.len} tokens, {args.threads} thread(s), CPU seconds, best of {args.repeat}\n")
    print("| model | two plain forwards | bisect (3 setups, replay) | ratio |\n|---|---:|---:|---:|")
    for name in SHAPES:
        r = cost(name, args)
        print(f"| {name} | {r['plain']:.2f} s | {r['bisect']:.2f} s | {r['ratio']:.1f}× |")
    print("\n| model | peak RSS growth, 4 prompts | 4 × more prompts |\n|---|---:|---:|")
    for name in SHAPES:
        mb = [json.loads(subprocess.run([sys.executable, __file__, "--memory-of", name, str(n), "--len", str(args.len),
                                         "--threads", str(args.threads)], check=True, capture_output=True,
                                        text=True).stdout.strip().splitlines()[-1])
              for n in (4, 4 * args.prompts)]
        print(f"| {name} | {mb[0]:.0f} MB | {mb[1]:.0f} MB |")


if __name__ == "__main__":
    main()

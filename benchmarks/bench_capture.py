"""Capture performance: trainer scoring vs a bare forward pass, memory peak, generation throughput.

    python benchmarks/bench_capture.py [--seqs 32] [--prompt-len 32] [--new 224] [--repeat 3] [--no-vllm]

Scoring (`HFEngine.score`: decoder forward, LM head on the scored positions in row chunks, fp32
log-softmax, gather) is timed against a bare `model(input_ids, attention_mask).logits` of the same
padded batch (target: ≤ 1.3x). Two models: the shipped models/tiny-qwen2 (vocab 2048) and a
random-init copy of its shape with a 32,768-token vocabulary, where full-vocabulary logits dominate
memory. Each measurement runs in a fresh process; memory is the peak RSS growth over the process
after loading the model (ru_maxrss). Generation: tokens/s of vLLM (CPU build) and of the hf sampler
for the same prompts. Results go to docs/performance.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "tiny-qwen2"


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def batch(args, vocab: int):
    import numpy as np

    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(3, vocab, args.prompt_len)) for _ in range(args.seqs)]
    comps = [list(rng.integers(3, vocab, args.new)) for _ in range(args.seqs)]
    return [[int(t) for t in p] for p in prompts], [[int(t) for t in c] for c in comps]


def one(args) -> dict:
    """One measurement in this (fresh) process."""
    import torch

    torch.set_num_threads(args.threads)
    from tim_report.capture.hf import TORCH_DTYPES, HFEngine

    eng = HFEngine(args.model, args.dtype, logit_chunk_mb=args.chunk_mb)
    prompts, comps = batch(args, eng.vocab)
    base_rss = rss_mb()
    if args.one == "score":
        fn = lambda: eng.score(prompts, comps)
    else:
        ids = torch.tensor([p + c for p, c in zip(prompts, comps)])
        am = torch.ones_like(ids)

        def fn():
            with torch.inference_mode():
                return eng.model(input_ids=ids, attention_mask=am).logits

    fn()  # warm-up
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times), "peak_rss_growth_mb": rss_mb() - base_rss, "vocab": eng.vocab,
            "dtype": str(TORCH_DTYPES[args.dtype]).replace("torch.", ""), "tokens": args.seqs * (args.prompt_len + args.new)}


def gen(args) -> dict:
    import numpy as np

    from tim_report.capture.hf import HFEngine

    rng = np.random.default_rng(0)
    prompts = [[int(t) for t in rng.integers(3, 2048, args.prompt_len)] for _ in range(args.seqs)]
    seeds = list(range(args.seqs))
    if args.one == "gen-vllm":
        from tim_report.capture.vllm_engine import VLLMEngine

        t0 = time.perf_counter()
        eng = VLLMEngine(args.model, args.dtype, 0, max_model_len=args.prompt_len + args.new + 1)
        start = time.perf_counter() - t0
    else:
        eng = HFEngine(args.model, args.dtype)
        start = 0.0
    t0 = time.perf_counter()
    out = eng.generate(prompts, seeds, 1.0, 0, 1.0, args.new)
    dt = time.perf_counter() - t0
    eng.close()
    n = sum(len(g[0]) for g in out)
    return {"seconds": dt, "engine_start_s": start, "new_tokens": n, "tokens_per_s": n / dt}


def run_child(extra: list[str]) -> dict:
    cmd = [sys.executable, __file__, *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def big_vocab_model(folder: Path, vocab: int = 32768) -> str:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    cfg = AutoConfig.from_pretrained(MODEL)
    cfg.vocab_size = vocab
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(MODEL).save_pretrained(folder)
    return str(folder)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqs", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk-mb", type=int, default=256)
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--model", default=str(MODEL), help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="fp32", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one in ("score", "forward"):
        print(json.dumps(one(args)))
        return 0
    if args.one in ("gen-vllm", "gen-hf"):
        print(json.dumps(gen(args)))
        return 0

    common = ["--seqs", str(args.seqs), "--prompt-len", str(args.prompt_len), "--new", str(args.new),
              "--repeat", str(args.repeat), "--threads", str(args.threads), "--chunk-mb", str(args.chunk_mb)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = [("tiny-qwen2 (V=2048)", str(MODEL)), ("same shape, V=32768", big_vocab_model(Path(tmp) / "big"))]
        for label, path in models:
            for dtype in ("fp32", "bf16"):
                s = run_child(common + ["--one", "score", "--model", path, "--dtype", dtype])
                f = run_child(common + ["--one", "forward", "--model", path, "--dtype", dtype])
                rows.append((label, dtype, s, f))
    print(f"batch: {args.seqs} sequences x ({args.prompt_len} prompt + {args.new} scored) tokens, "
          f"{args.threads} threads, logit chunk {args.chunk_mb} MB")
    print("| model | dtype | score s | bare forward s | ratio | score peak MB | forward peak MB | scored tok/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label, dtype, s, f in rows:
        print(f"| {label} | {dtype} | {s['seconds']:.3f} | {f['seconds']:.3f} | {s['seconds'] / f['seconds']:.2f}x | "
              f"{s['peak_rss_growth_mb']:.0f} | {f['peak_rss_growth_mb']:.0f} | {args.seqs * args.new / s['seconds']:,.0f} |")
    gen_common = ["--seqs", str(args.seqs), "--prompt-len", str(args.prompt_len), "--new", str(args.new)]
    print("\n| generation | dtype | new tokens | seconds | tokens/s | engine start s |")
    print("|---|---|---:|---:|---:|---:|")
    for kind in (("gen-hf",) if args.no_vllm else ("gen-vllm", "gen-hf")):
        g = run_child(gen_common + ["--one", kind, "--dtype", "bf16"])
        print(f"| {kind[4:]} | bf16 | {g['new_tokens']} | {g['seconds']:.1f} | {g['tokens_per_s']:.0f} | {g['engine_start_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What `weight_digest` costs a training loop, on tiny-qwen2 and SmolLM2-135M, beside the least a sync does: casting
every tensor to the engine's dtype (the baseline, measured in the same run).

Per model, fp32 weights digested in bf16, best of `--repeat`: wall and CPU seconds (user + system) of the cast alone,
of a digest, and of a digest with `since=` (the changed share, counted against the previous version's digest after
one real AdamW step), and the bytes a digest keeps for the next one's changed share (its strided sample).
Target: a digest within 4× the cast alone (it is the cast plus one sha256 pass over the cast bytes), and at most
8 KiB kept per tensor (config.sync.DIGEST_SAMPLE elements of bf16). One torch thread, so CPU seconds are work.

    python benchmarks/bench_digest.py [--models tiny,smollm2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def best(fn, repeat: int) -> tuple[float, float, object]:
    """(wall, cpu) seconds of the fastest of `repeat` calls, and its result."""
    runs = []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        runs.append((time.perf_counter() - w, time.process_time() - c, out))
    return min(runs, key=lambda r: r[1])


def load(name: str):
    import torch
    from transformers import AutoModelForCausalLM

    from tim_report.capture.model_path import resolve_model

    folder = ROOT / "models" / "tiny-qwen2" if name == "tiny" else resolve_model("smollm2")
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


def measure(name: str, repeat: int) -> str:
    """One model's row of the table."""
    import torch

    import tim_report

    model = load(name)
    params = dict(model.named_parameters())

    def cast() -> int:
        return sum(t.detach().to(torch.bfloat16).numel() for t in params.values())

    cast()  # warm: the allocator and torch's kernels, for both
    cw, cc, _ = best(cast, repeat)
    dw, dc, d0 = best(lambda: tim_report.weight_digest(model, "bf16", version=0), repeat)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    x = torch.randint(0, model.config.vocab_size, (2, 64))
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    sw, sc, d1 = best(lambda: tim_report.weight_digest(model, "bf16", since=d0, version=1), repeat)
    kept = sum(p[2].nbytes for p in d1._parts.values())
    return (f"| {name} | {d1.elements:,} | {d1.tensors} | {cw:.3f} s wall, {cc:.3f} s CPU | {dw:.3f} s, {dc:.3f} s CPU "
            f"| {sw:.3f} s, {sc:.3f} s CPU | {sc / cc:.1f}× | {kept / 2**20:.2f} MiB ({d1.sampled:,} of {d1.elements:,} elements) "
            f"| {100 * d1.changed_share:.2f}% |")


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # CPU seconds that mean work: OpenMP threads spin while waiting on a loaded machine
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}\n")
    print("| model | elements | tensors | cast to bf16 (baseline) | digest | digest + changed share | × baseline | "
          "kept for the next | changed share after one AdamW step (lr 1e-6) |")
    print("|---|---:|---:|---|---|---|---:|---:|---:|")
    for name in args.models.split(","):
        print(measure(name, args.repeat))


if __name__ == "__main__":
    main()

"""`save_step` on a step of ~1M tokens, beside the plain writes a user would hand-write, measured in the same run.

The step is what a trainer holds after the old log-probs: [B, T] torch tensors (rollout and trainer log-probs
float32, loss mask and token ids int64, advantages float32), right-padded to T, ~1M real tokens. Rows:

- np.savez of the same [B, T] arrays (as numpy, uncompressed): the least any save does (the baseline)
- np.savez_compressed of them, and torch.save of the tensors (what a hand-written dump does today)
- save_step: the canonical file (padding removed, checked, deflate level 1, fsync'ed and renamed)
- save_step(background=writer): the time the training loop waits (device → host copy, checks), then until flushed

    python benchmarks/bench_save.py [--tokens 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import tim_report
from tim_report.io.step_writer import StepWriter

MEAN_LEN = 512


def step_tensors(tokens: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    b = tokens // MEAN_LEN
    lengths = rng.integers(MEAN_LEN // 4, 2 * MEAN_LEN - MEAN_LEN // 4, b)
    width = int(lengths.max())
    mask = np.arange(width)[None, :] < lengths[:, None]
    rollout = np.where(mask, -rng.exponential(0.5, (b, width)), 0.0).astype(np.float32)
    trainer = np.where(mask, rollout + rng.normal(0, 0.01, (b, width)), 0.0).astype(np.float32)
    return {"rollout_logp": torch.from_numpy(rollout), "trainer_logp": torch.from_numpy(trainer),
            "mask": torch.from_numpy(mask.astype(np.int64)),
            "token_ids": torch.from_numpy(np.where(mask, rng.integers(0, 151_000, (b, width)), 0)),
            "advantage": torch.from_numpy(np.repeat(rng.normal(size=(b, 1)), width, axis=1).astype(np.float32))}


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tensors = step_tensors(args.tokens)
    real = int(tensors["mask"].sum())
    arrays = {k: v.numpy() for k, v in tensors.items()}
    folder = Path(tempfile.mkdtemp(prefix="bench_save_"))
    rows: list[tuple[str, float, Path | None]] = []

    def plain(name: str, write) -> None:
        path = folder / name
        seconds, _ = timed(lambda: write(path), args.repeat)
        rows.append((name, seconds, path))

    plain("np.savez", lambda p: np.savez(p, **arrays))
    plain("np.savez_compressed", lambda p: np.savez_compressed(p, **arrays))
    plain("torch.save", lambda p: torch.save(tensors, p))
    seconds, path = timed(lambda: tim_report.save_step(folder / "sync", **tensors, step=0), args.repeat)
    rows.append(("save_step", seconds, path))
    waits, totals = [], []
    with StepWriter() as writer:
        for i in range(args.repeat):
            t0 = time.perf_counter()
            path = tim_report.save_step(folder / "bg", **tensors, step=i, background=writer)
            waits.append(time.perf_counter() - t0)
            writer.flush()
            totals.append(time.perf_counter() - t0)
    rows.append(("save_step(background): the loop waits", statistics.median(waits), None))
    rows.append(("save_step(background): until on disk", statistics.median(totals), path))

    base = rows[0][1]
    print(f"A step of {real:,} tokens ([{arrays['mask'].shape[0]}, {arrays['mask'].shape[1]}] tensors), median of {args.repeat}:\n")
    print("| write | seconds | × np.savez | file MB |")
    print("|---|---:|---:|---:|")
    for name, seconds, p in rows:
        size = f"{_size(p) / 1e6:.1f}" if p is not None else ""
        print(f"| {name} | {seconds:.3f} | {seconds / base:.2f} | {size} |")


def _size(p: Path) -> int:
    for candidate in (p, Path(str(p) + ".npz")):
        if candidate.is_file():
            return candidate.stat().st_size
    return 0


if __name__ == "__main__":
    main()

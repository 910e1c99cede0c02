"""What the staleness split (issue 37) adds to `check` and `build` at 16M tokens, beside the same batch without
versions, both as processes in interleaved rounds.

The batch: 4,000 sequences × 4,000 tokens (16M, every one trained), synthetic log-probs (tim_report.testing.make_batch's
shape), saved as the canonical `.npz` twice: without versions (the present figure: no split is made) and with a
`weight_version` per sequence (lags 0 to 3, a quarter each) and `meta["trainer_version"]` (the split, its bootstrap
interval and the five lag findings). Each round runs the four commands (the order rotating), so every ratio compares
runs that saw the same load. Then, in one process, `analyze` as `check` runs it (analysis.GATE) and as `build` does
(every family), on both batches alternately: the least CPU seconds of each (a loaded machine's process times vary by
±20%, more than the 5% to resolve; the least of several alternating runs is the cost without the interference).
Target: the split adds at most 5% to `check` and to `build`.

    python benchmarks/bench_staleness.py [--rounds 3] [--side 4000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from processes import timed


def write_batches(folder: Path, side: int) -> tuple[Path, Path]:
    import numpy as np

    from tim_report.io.canonical import save_batch
    from tim_report.model import StepBatch

    rng = np.random.default_rng(0)
    rollout = np.log(rng.uniform(0.05, 1.0, side * side)).astype(np.float32)
    trainer = np.minimum(rollout + rng.normal(0, 0.01, side * side), 0).astype(np.float32)
    offsets = np.arange(side + 1, dtype=np.int64) * side
    base = dict(rollout_logp=rollout, trainer_logp=trainer, offsets=offsets, mask=np.ones(side * side, bool),
                group=np.asarray([str(i // 4) for i in range(side)]))
    plain, versioned = folder / "plain.npz", folder / "versioned.npz"
    save_batch(StepBatch(**base, meta={"step": 10}), plain, compact=True)
    save_batch(StepBatch(**base, weight_version=np.asarray([str(10 - i % 4) for i in range(side)]),
                         meta={"step": 10, "trainer_version": 10}), versioned, compact=True)
    return plain, versioned


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--side", type=int, default=4000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-staleness-"))
    try:
        plain, versioned = write_batches(tmp, args.side)
        tool = [sys.executable, "-m", "tim_report"]
        commands = {"check, no versions": [*tool, "check", "--no-limits", str(plain)],
                    "check, split": [*tool, "check", "--no-limits", str(versioned)],
                    "build, no versions": [*tool, "build", str(plain), "-o", str(tmp / "site_plain")],
                    "build, split": [*tool, "build", str(versioned), "-o", str(tmp / "site_split")]}
        times: dict[str, list[tuple[float, float, int]]] = {k: [] for k in commands}
        names = list(commands)
        for r in range(args.rounds):
            for name in names[r % 4:] + names[:r % 4]:
                for site in ("site_plain", "site_split"):
                    shutil.rmtree(tmp / site, ignore_errors=True)
                times[name].append(timed(commands[name], ok=(0, 1)))
        print(f"{args.side * args.side:,} tokens, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
        print("| command | wall s, each round | CPU s, each round | peak RSS MB |")
        print("|---|---|---|---:|")
        for name, runs in times.items():
            print(f"| {name} | {' / '.join(f'{w:.2f}' for w, _, _ in runs)} | {' / '.join(f'{c:.2f}' for _, c, _ in runs)} "
                  f"| {max(m for _, _, m in runs) / 2**20:.0f} |")
        for cmd in ("check", "build"):
            a, b = times[f"{cmd}, no versions"], times[f"{cmd}, split"]
            wall = [s[0] / p[0] for p, s in zip(a, b)]
            cpu = [s[1] / p[1] for p, s in zip(a, b)]
            print(f"{cmd}: split / no versions, wall {' / '.join(f'{x:.3f}' for x in wall)}; "
                  f"CPU {' / '.join(f'{x:.3f}' for x in cpu)}; best CPU {min(s[1] for s in b) / min(p[1] for p in a):.3f}")
        in_process(plain, versioned, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def in_process(plain: Path, versioned: Path, rounds: int) -> None:
    import time

    from tim_report import io
    from tim_report.analysis import GATE, Scope, analyze

    batches = {"no versions": io.load(plain), "split": io.load(versioned)}
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for scope_name, scope in (("check (GATE)", GATE), ("build (all)", Scope())):
            for name, batch in batches.items():
                t = time.process_time()
                analyze(batch, scope=scope)
                key = (scope_name, name)
                best[key] = min(best.get(key, float("inf")), time.process_time() - t)
    print("| analyze, least CPU s | no versions | split | ratio |")
    print("|---|---:|---:|---:|")
    for scope_name in ("check (GATE)", "build (all)"):
        a, b = best[(scope_name, "no versions")], best[(scope_name, "split")]
        print(f"| {scope_name} | {a:.3f} | {b:.3f} | {b / a:.3f} |")


if __name__ == "__main__":
    main()

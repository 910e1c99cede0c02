"""`watch`: what one round costs while a run goes on, beside a baseline in the same run.

The run: STEPS steps of about TOKENS tokens (prime-rl token exports, `write_prime_rl_run`), already built into the
site by a watch. Rows, in one process (the watch's own; no Python start), wall clock:

- baseline: `build` of the one new step alone into a fresh site (the least a round that shows it can do);
- a watch round that takes the new step (its build reuses every other step from the cache, hashing their files,
  and rewrites the index);
- a poll that finds nothing new (what `watch` spends every --interval while the trainer works).

    python benchmarks/bench_watch.py [--steps 200] [--tokens 16384]

`--unusable 200 400 800`: instead, `watch --once` (two polls) over a folder of that many small step files of which every
other one is unusable (all its log-probs NaN), beside `build` of the same folder (its unusable steps are rows);
the watch once rebuilt every ready step again for each bad one (quadratic).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from tim_report.service.build import BuildOptions, build
from tim_report.service.watch import Watch, WatchOptions
from tim_report.testing import write_prime_rl_run

MEAN_LEN = 256


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def unusable(counts: list[int]) -> None:
    print("| steps (half unusable) | `build` | `watch --once` | skipped lines |\n|---:|---:|---:|---:|")
    for n in counts:
        tmp = Path(tempfile.mkdtemp(prefix="bench-watch-bad-"))
        try:
            base, t, said = unusable_row(n, tmp)
            print(f"| {n} | {base:.1f} s | {t:.1f} s | {said} |")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def unusable_row(n: int, tmp: Path) -> tuple[float, float, int]:
    """`build` and `watch --once` of n step files, every other one unusable: their seconds, and the skips said."""
    import numpy as np

    from tim_report.io import save_batch
    from tim_report.testing import make_batch

    run = tmp / "run"
    run.mkdir()
    for s in range(n):
        b = make_batch(n_seqs=4, mean_len=16, seed=s)
        if s % 2:
            b.rollout_logp = np.full(b.n_tokens, np.nan)
        save_batch(b, run / f"step_{s}.npz")
    opts = BuildOptions(formats=("json",))
    base = timed(lambda: build([run], tmp / "built", opts))
    said: list[str] = []
    watch = Watch(run, tmp / "site", WatchOptions(build=opts, interval=0), say=said.append)
    return base, timed(lambda: (watch.step(), watch.step())), len(said)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--unusable", type=int, nargs="+", metavar="STEPS")
    args = ap.parse_args()
    if args.unusable:
        unusable(args.unusable)
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-watch-"))
    try:
        prepared, run = tmp / "prepared", tmp / "run" / "token_exports"
        write_prime_rl_run(prepared, steps=args.steps + 1, n_seqs=max(1, args.tokens // MEAN_LEN), mean_len=MEAN_LEN)
        run.parent.mkdir(parents=True)
        shutil.copytree(prepared / "token_exports", run, ignore=shutil.ignore_patterns(f"step_{args.steps}"))
        watch = Watch(run.parent, tmp / "site", WatchOptions(build=BuildOptions(), interval=0))
        watch.step()
        first = timed(watch.step)  # the backlog: every step analysed
        shutil.copytree(prepared / "token_exports" / f"step_{args.steps}", run / f"step_{args.steps}")
        base = timed(lambda: build([run / f"step_{args.steps}"], tmp / "alone", BuildOptions()))
        watch.step()  # the new step's files seen once; the next poll finds them settled
        new = timed(watch.step)
        idle = timed(watch.step)
        size = sum(p.stat().st_size for p in run.rglob("*.jsonl")) / 2**20
        print(f"A run of {args.steps} steps × ~{args.tokens} tokens ({size:.0f} MB of prime-rl exports), in-process:\n")
        print("| what | seconds | × baseline |\n|---|---:|---:|")
        for name, t in (("baseline: build the new step alone", base), (f"watch round taking step {args.steps}", new),
                        ("watch poll, nothing new", idle), (f"first round: the backlog of {args.steps} steps", first)):
            print(f"| {name} | {t:.2f} | {t / base:.2f} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

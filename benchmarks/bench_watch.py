"""`watch`: what one round costs while a run goes on, beside a baseline in the same run.

The run: STEPS steps of about TOKENS tokens (prime-rl token exports, `write_prime_rl_run`), already built into the
site by a watch. Rows, in one process (the watch's own; no Python start), wall clock:

- baseline: `build` of the one new step alone into a fresh site (the least a round that shows it can do);
- a watch round that takes the new step (its build reuses every other step from the cache, hashing their files,
  and rewrites the index);
- a poll that finds nothing new (what `watch` spends every --interval while the trainer works).

    python benchmarks/bench_watch.py [--steps 200] [--tokens 16384]

`--scale 1000 10000`: instead, for each size a run of that many steps of about TOKENS tokens: `build` of the folder and
`watch --once` of it, each as a process from the command line (wall and CPU seconds), then, in one process, a watch of
that site taking one new step (the round's seconds beside the full build's: the target is a round that does not grow
with the run; what still does is said).

`--unusable 200 400 800`: instead, `watch --once` (two polls) over a folder of that many small step files of which every
other one is unusable (all its log-probs NaN), beside `build` of the same folder (its unusable steps are rows);
the watch once rebuilt every ready step again for each bad one (quadratic).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from processes import timed as process

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


def scale(sizes: list[int], tokens: int, keep: Path | None) -> None:
    print(f"Runs of ~{tokens:,} tokens a step (prime-rl exports), {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the start:\n")
    print("| steps | `build` s (CPU) | `watch --once` s (CPU) | watch ÷ build | a round taking one new step s (CPU) "
          "| round ÷ build | of which the index s |\n|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        tmp = (keep / str(n)) if keep else Path(tempfile.mkdtemp(prefix="bench-watch-scale-"))
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            print(f"| {n:,} | " + " | ".join(scale_row(n, tokens, tmp)) + " |", flush=True)
        finally:
            if not keep:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nLoad average at the end {os.getloadavg()[0]:.1f}.")


def scale_row(n: int, tokens: int, tmp: Path) -> list[str]:
    """`build` and `watch --once` of an n-step run as processes, then one more step taken by a watch in this process."""
    from tim_report.service import build as building

    prepared, run = tmp / "prepared", tmp / "run" / "token_exports"
    if not (prepared / "token_exports" / f"step_{n}").is_dir():
        write_prime_rl_run(prepared, steps=n + 1, n_seqs=max(1, tokens // MEAN_LEN), mean_len=MEAN_LEN)
    shutil.rmtree(tmp / "run", ignore_errors=True)
    run.parent.mkdir(parents=True)
    shutil.copytree(prepared / "token_exports", run, ignore=shutil.ignore_patterns(f"step_{n}"))
    cli = [sys.executable, "-m", "tim_report"]
    shutil.rmtree(tmp / "site-build", ignore_errors=True)
    shutil.rmtree(tmp / "site", ignore_errors=True)
    built = process([*cli, "build", str(run), "-o", str(tmp / "site-build")], ok=(0, 3))
    watched = process([*cli, "watch", str(run), "-o", str(tmp / "site"), "--once", "--interval", "0.05"], ok=(0, 1, 3))
    watch = Watch(run.parent, tmp / "site", WatchOptions(build=BuildOptions(), interval=0))
    watch.step()  # the site as the watch left it: nothing new
    time.sleep(2.5)  # the new step's files, written now, settle (site/cache.SETTLED_NS) before it is taken
    shutil.copytree(prepared / "token_exports" / f"step_{n}", run / f"step_{n}")
    watch.step()  # its files seen once; the next poll finds them settled
    index = {"s": 0.0}
    real = (building.index_from_rows, building.render)

    def timed(fn, counts=lambda *a: True):  # the index's share of the round: its numbers and its pages
        def run(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                index["s"] += (time.perf_counter() - start) if counts(*a) else 0.0
        return run
    building.index_from_rows = timed(real[0])
    building.render = timed(real[1], lambda kind, *a: kind == "index")
    cpu, wall = time.process_time(), time.perf_counter()
    rnd = watch.step()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    building.index_from_rows, building.render = real
    assert rnd.result is not None and rnd.result.analysed == 1, "the round did not take exactly the new step"
    return [f"{built[0]:.1f} ({built[1]:.1f})", f"{watched[0]:.1f} ({watched[1]:.1f})", f"{watched[0] / built[0]:.2f}",
            f"{wall:.2f} ({cpu:.2f})", f"{100 * wall / built[0]:.2f}%", f"{index['s']:.2f}"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tokens", type=int, help="tokens a step (default 16384; 4096 with --scale)")
    ap.add_argument("--unusable", type=int, nargs="+", metavar="STEPS")
    ap.add_argument("--scale", type=int, nargs="+", metavar="STEPS", help="build and watch --once of runs this long")
    ap.add_argument("--keep", type=Path, help="--scale: write the runs and sites here (and reuse a run written there)")
    args = ap.parse_args()
    if args.unusable:
        unusable(args.unusable)
        return
    if args.scale:
        scale(args.scale, args.tokens or 4096, args.keep)
        return
    args.tokens = args.tokens or 16384
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

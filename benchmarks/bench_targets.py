"""Issue 31's four targets in one run, each beside its baseline measured in the same run (interleaved rounds).

1. `check` at 16M tokens against verl 0.9.1's own metric code as a process (bench_check.py: .npz and .pt).
2. `build` of one 16M-token batch against bench_analyze.py's one-pass numpy baseline as a process; peak RSS / raw.
3. A run of STEPS steps × TOKENS tokens: `build --jobs 1` against bench_run.py's read-only baseline, and the
   rebuild after one new step as a share of the full build.
4. The bytes of a 4,096-token step folder (bench_site_size.py's run).

    python benchmarks/bench_targets.py [--rounds 3] [--side 4000] [--steps 100] [--tokens 65536]

Prints each section's rounds, then one table of the targets. Wall seconds are what the targets are about; on a
shared machine compare only the ratios of one round (each round runs the command and its baseline back to back).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_analyze  # noqa: E402
import bench_check  # noqa: E402
import bench_run  # noqa: E402
import bench_site_size  # noqa: E402
import processes  # noqa: E402


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown CPU"


def check_section(tmp: Path, peer: str, side: int, rounds: int) -> list[tuple[str, float, float, str]]:
    npz, pt = bench_check.write_batch(tmp, side)
    res = bench_check.rounds(peer, npz, pt, rounds)
    print("\n".join(bench_check.table(res)) + "\n")
    out = []
    for name in ("check .npz", "check .pt"):
        ratios = [c[0] / p[0] for c, p in zip(res[name], res["peer"])]
        out.append((f"{name} ÷ peer ({side * side / 1e6:.0f}M tokens), worst round", max(ratios), 1.0, "< 1 in every round"))
    npz.unlink()
    pt.unlink()
    return out


def build_section(tmp: Path, rounds: int) -> list[tuple[str, float, float, str]]:
    path, raw = bench_analyze.make_file(16, tmp)
    base_cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); "
                f"from bench_analyze import baseline; baseline({str(path)!r})"]
    out_dir = tmp / "site16"
    build_cmd = [sys.executable, "-m", "tim_report", "build", str(path), "-o", str(out_dir)]
    ratios: dict[str, list[float]] = {"wall": [], "cpu": [], "busy": []}
    rss = 0
    for r in range(rounds):
        for busy in (False, True):  # the second core idle, then kept busy (issue 45)
            with bench_analyze.second_core_busy(busy):
                b = bench_analyze.as_process(base_cmd, 1)
                o = bench_analyze.as_process(build_cmd, 1, fresh=out_dir)
            ratios["busy" if busy else "wall"].append(o[0] / b[0])
            if not busy:
                ratios["cpu"].append(o[1] / b[1])
            rss = max(rss, o[2])
            print(f"round {r + 1}{', second core busy' if busy else ''}: baseline {b[0]:.2f} s (CPU {b[1]:.2f}), build "
                  f"{o[0]:.2f} s (CPU {o[1]:.2f}, RSS {o[2] / 1e6:.0f} MB): {o[0] / b[0]:.2f}× ({o[1] / b[1]:.2f}× CPU)")
    path.unlink()
    return [("build 16M ÷ one-pass numpy baseline, wall, best round", min(ratios["wall"]), 2.0, "≤ 2.0"),
            ("build 16M ÷ baseline, wall, median round", statistics.median(ratios["wall"]), 2.0, "≤ 2.0"),
            ("build 16M ÷ baseline, CPU, median round", statistics.median(ratios["cpu"]), 2.5, "≤ 2.5"),
            ("build 16M ÷ baseline, wall, second core busy, median round", statistics.median(ratios["busy"]), 2.5, "≤ 2.5"),
            ("build 16M peak RSS ÷ raw bytes", rss / raw, 3.0, "≤ 3")]


def run_section(tmp: Path, steps: int, tokens: int) -> list[tuple[str, float, float, str]]:
    bench_run.write_run(tmp / "run", steps, tokens)
    exports = tmp / "run" / "token_exports"
    base_cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); "
                f"from bench_run import baseline; baseline({str(exports)!r})"]
    base = processes.timed(base_cmd)
    full = bench_run.build(exports, tmp / "site-run")
    base2 = processes.timed(base_cmd)
    bench_run.write_run(tmp / "run", steps + 1, tokens)
    again = bench_run.build(exports, tmp / "site-run")
    baseline = min(base[0], base2[0])
    print(f"{steps} steps × ~{tokens:,} tokens: baseline {base[0]:.1f} / {base2[0]:.1f} s (CPU {base[1]:.1f}), "
          f"build --jobs 1 {full[0]:.1f} s (CPU {full[1]:.1f}), rebuild after one step {again[0]:.2f} s "
          f"(CPU {again[1]:.2f})")
    shutil.rmtree(tmp / "site-run", ignore_errors=True)
    shutil.rmtree(tmp / "run", ignore_errors=True)
    return [(f"build --jobs 1 ÷ read-only baseline ({steps} steps)", full[0] / baseline, 3.0, "≤ 3"),
            (f"rebuild after one step ÷ full build ({steps} steps)", again[0] / full[0], 0.05, "≤ 5%")]


def site_section(tmp: Path, steps: int) -> list[tuple[str, float, float, str]]:
    from functools import partial

    from tim_report.testing import write_prime_rl_run

    run = tmp / "sizes" / "token_exports"
    write_prime_rl_run(run, steps=steps, n_seqs=4096 // bench_site_size.MEAN_LEN, mean_len=bench_site_size.MEAN_LEN,
                       noise=partial(lambda step, steps: 0.01 if step < 0.4 * steps else 0.06, steps=steps))
    bench_site_size.build(run, tmp / "sizes" / "site")
    m = bench_site_size.measure(tmp / "sizes" / "site", steps)
    parts = ", ".join(f"{name} {n / 1e3:.0f}" for name, n in sorted(m["files"].items(), key=lambda kv: -kv[1]))
    print(f"step folder of ~4,096 tokens: median {m['median'] / 1e3:.0f} kB, largest {m['max'] / 1e3:.0f} kB ({parts} kB)")
    return [("step folder, 4,096 tokens, largest (kB)", m["max"] / 1e3, 200.0, "≤ 200 kB")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-python", default=os.environ.get("TIM_REPORT_PEER_PYTHON", "/work/peer-venv/bin/python"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--side", type=int, default=4000, help="check's batch is side × side tokens")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--site-steps", type=int, default=10)
    ap.add_argument("--skip", default="", help="sections to leave out, comma-separated: check,build,run,site")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"{cpu_name()}, {os.cpu_count()} cores; load average at the start {os.getloadavg()[0]:.1f}\n")
    rows: list[tuple[str, float, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        if "check" not in skip:
            rows += check_section(t, args.peer_python, args.side, args.rounds)
        if "build" not in skip:
            rows += build_section(t, args.rounds)
        if "run" not in skip:
            rows += run_section(t, args.steps, args.tokens)
        if "site" not in skip:
            rows += site_section(t, args.site_steps)
    print(f"\nTargets (load average at the end {os.getloadavg()[0]:.1f}):\n")
    print("| what | measured | target | met |")
    print("|---|---:|---|---|")
    for name, value, bound, words in rows:
        shown = f"{100 * value:.1f}%" if "%" in words else f"{value:.2f}"
        met = value < bound if words.startswith("<") else value <= bound
        print(f"| {name} | {shown} | {words} | {'yes' if met else 'no'} |")


if __name__ == "__main__":
    main()

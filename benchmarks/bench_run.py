"""A whole run: `tim-report build RUN_DIR` over a synthetic prime-rl run, beside a baseline in the same run.

The run: STEPS steps of about TOKENS tokens each, written as prime-rl token exports
(`token_exports/step_S/rank_0.jsonl`, `tim_report.testing.write_prime_rl_run`), with the mismatch rising
6× at 40% of the run (so the index has a change point to find).

Baseline: read every step's file (JSON lines) and compute each step's mean |δ| with numpy, in one process:
the least any per-step report must do. Rows, each the whole command as a process (wall clock; CPU seconds,
which other jobs on a shared machine do not inflate; and the peak RSS of the largest process of its tree):

- full build with `--jobs 1`, `--jobs 2`, and `--executor ray` on 2 CPUs (when Ray is installed);
- the rebuild after one more step is added (target: ≤ 5% of the full build);
- the index page's size (target ≤ 2 MB at 1,000 steps) and the time Chromium takes to draw it.

    python benchmarks/bench_run.py [--steps 1000] [--tokens 65536] [--no-ray] [--no-browser]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from processes import timed

MEAN_LEN = 256


def noise(step: int, steps: int) -> float:
    return 0.01 if step < int(0.4 * steps) else 0.06


def write_run(folder: Path, steps: int, tokens: int) -> None:
    from functools import partial

    from tim_report.testing import write_prime_rl_run

    write_prime_rl_run(folder, steps=steps, n_seqs=max(1, tokens // MEAN_LEN), mean_len=MEAN_LEN,
                       noise=partial(noise, steps=steps))


def baseline(run: str) -> None:
    import numpy as np

    means = []
    for step in sorted(Path(run).iterdir()):
        deltas = []
        for rank in sorted(step.glob("rank_*.jsonl")):
            with open(rank, encoding="utf-8") as f:
                for line in f:
                    rec = json.loads(line)
                    m = np.asarray(rec["loss_mask"], bool)
                    deltas.append(np.asarray(rec["trainer_logprobs"])[m] - np.asarray(rec["inference_logprobs"])[m])
        means.append(float(np.abs(np.concatenate(deltas)).mean()))
    print(len(means))


def build(run: Path, out: Path, *extra: str) -> tuple[float, float, int]:
    return timed([sys.executable, "-m", "tim_report", "build", str(run), "-o", str(out), *extra])


def page_load(index: Path) -> float | None:
    """Seconds from navigation until every chart of the index is drawn, in Debian's Chromium (None without it)."""
    chromium = os.environ.get("TIM_REPORT_CHROMIUM", "/usr/bin/chromium")
    if not Path(chromium).exists() or importlib.util.find_spec("playwright") is None:
        return None
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        t0 = time.perf_counter()
        page.goto(index.as_uri())
        page.wait_for_function("() => [...document.querySelectorAll('.vega')].every(el => el.querySelector('svg'))",
                               timeout=120_000)
        seconds = time.perf_counter() - t0
        browser.close()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=65536, help="tokens per step (about)")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray row")
    ap.add_argument("--no-browser", action="store_true", help="skip the page-load measurement")
    ap.add_argument("--keep", type=Path, help="write the run and the sites here instead of a temporary folder")
    args = ap.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench-run-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        write_run(tmp / "run", args.steps, args.tokens)
        print(f"wrote {args.steps} steps × ~{args.tokens:,} tokens in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        exports = tmp / "run" / "token_exports"
        here = Path(__file__).resolve().parent
        rows = [("baseline: read every step, mean abs(δ) of each", *timed(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(here)!r}); "
             f"from bench_run import baseline; baseline({str(exports)!r})"]))]
        rows.append(("build --jobs 1", *build(exports, tmp / "site1")))
        rows.append(("build --jobs 2", *build(exports, tmp / "site2", "--jobs", "2")))
        if not args.no_ray and importlib.util.find_spec("ray") is not None:
            rows.append(("build --executor ray (2 CPUs)", *build(exports, tmp / "site-ray", "--executor", "ray")))
        write_run(tmp / "run", args.steps + 1, args.tokens)  # the same steps again, plus one
        rows.append(("rebuild after one new step (--jobs 1)", *build(exports, tmp / "site1")))
        full = rows[1][1]
        index = tmp / "site1" / "index.html"
        load = None if args.no_browser else page_load(index)
        print(f"\nA run of {args.steps} steps × ~{args.tokens:,} tokens (prime-rl token exports), "
              f"{os.cpu_count()} cores:\n")
        print("| command | seconds | × baseline | CPU s | CPU × baseline | peak RSS MB |")
        print("|---|---:|---:|---:|---:|---:|")
        base, base_cpu = rows[0][1], rows[0][2]
        for name, seconds, cpu, rss in rows:
            print(f"| {name} | {seconds:.1f} | {seconds / base:.2f} | {cpu:.1f} | {cpu / base_cpu:.2f} | {rss / 1e6:.0f} |")
        print(f"\nRebuild after one new step: {rows[-1][1]:.1f} s = {100 * rows[-1][1] / full:.1f}% of the full build "
              f"(target ≤ 5%; CPU {100 * rows[-1][2] / rows[1][2]:.1f}%). Target for --jobs 1: ≤ 3× the baseline.")
        same = all((tmp / s / "index.json").read_bytes() == (tmp / "site2" / "index.json").read_bytes()
                   for s in ("site-ray",) if (tmp / s).exists())
        print(f"Index page: {index.stat().st_size / 1e6:.2f} MB (target ≤ 2 MB)"
              + (f", drawn by Chromium in {load:.1f} s." if load is not None else ".")
              + ("" if same else " Ray's index.json differs from the local build's!"))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

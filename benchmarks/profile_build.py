"""Where a `build` of one batch spends its time: cProfile over the command in this process, CPU time as the clock.

    python benchmarks/profile_build.py FILE [--top 25] [--save build.prof]

The clock is `time.process_time` (this process's CPU seconds), so other jobs on a shared machine do not inflate it.
cProfile sees only the thread it runs in, so the analysis runs its families on one lane here (the second lane's
work is then counted, where a normal build would do it on a second thread). Prints one table by stage (the
cumulative CPU seconds of the functions that make up each), then the functions with the most time of their own.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

# stage → the functions (file suffix, name) whose cumulative time makes it; the first match of each counts
STAGES = (
    ("start: imports", (("tim_report/cli/__init__.py", "<module>"),)),
    ("read the file (io.load)", (("tim_report/io/__init__.py", "load"),)),
    ("hash the input (cache key)", (("tim_report/site/cache.py", "step_key"),)),
    ("valid tokens", (("tim_report/analysis/tokens.py", "valid_tokens"),)),
    ("summary metrics", (("tim_report/analysis/metrics.py", "summary_metrics"),)),
    ("diagnosis (detectors)", (("tim_report/analysis/diagnosis.py", "diagnose"),)),
    ("breakdowns, charts, samples, top-k (second lane)", (("tim_report/analysis/__init__.py", "_side_families"),)),
    ("verl's section", (("tim_report/analysis/verl_metrics.py", "verl_metrics"),)),
    ("index row, run index", (("tim_report/analysis/run_index.py", "run_row"),
                              ("tim_report/analysis/run_index.py", "index_from_rows"))),
    ("render (HTML, markdown, JSON)", (("tim_report/render/__init__.py", "render"),)),
    ("write and publish", (("tim_report/site/publish.py", "write_files"), ("tim_report/site/publish.py", "move_into"))),
)


def stage_table(stats: pstats.Stats, total: float) -> list[str]:
    by_name: dict[tuple[str, str], float] = {}
    for (file, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        for _stage, funcs in STAGES:
            for suffix, fn in funcs:
                if name == fn and file.replace("\\", "/").endswith(suffix):
                    by_name[(suffix, fn)] = by_name.get((suffix, fn), 0.0) + ct
    rows = ["| stage | CPU s | share |", "|---|---:|---:|"]
    for stage, funcs in STAGES:
        seconds = sum(by_name.get(f, 0.0) for f in funcs)
        rows.append(f"| {stage} | {seconds:.2f} | {100 * seconds / total:.0f}% |")
    rows.append(f"| **the whole build** | **{total:.2f}** | 100% |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path)
    ap.add_argument("--top", type=int, default=25, help="functions listed by their own time")
    ap.add_argument("--save", type=Path, help="also write the raw profile here (snakeviz, pstats)")
    args = ap.parse_args()
    profile = cProfile.Profile(time.process_time)
    t0 = time.process_time()
    profile.enable()
    import tim_report.analysis as analysis
    from tim_report.cli import main as cli

    analysis.THREAD_MIN_TOKENS = sys.maxsize  # one lane: cProfile sees only its own thread
    with tempfile.TemporaryDirectory() as tmp:
        cli(["build", str(args.file), "-o", str(Path(tmp) / "site")], standalone_mode=False)
    profile.disable()
    total = time.process_time() - t0
    stats = pstats.Stats(profile)
    if args.save:
        stats.dump_stats(args.save)
    print("\n".join(stage_table(stats, total)))
    print(f"\nThe {args.top} functions with the most CPU time of their own:\n")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()

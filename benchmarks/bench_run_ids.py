"""Making run ids unique for many inputs of one file name, beside the quadratic search it replaced (issue 24).

Every input named `step.npz` (one per folder, as a sweep over many runs writes them) needs its own run folder:
step, step-2, step-3, ... The old search tried every suffix from 2 for each input (40k inputs: 141 s before the
analysis started); the new one resumes where the last input of the same name stopped. Both in this process,
on the same names.

    python benchmarks/bench_run_ids.py [--sizes 5000,10000,20000]
"""

from __future__ import annotations

import argparse
import time

from tim_report.service.build import safe_run_id, unique_ids
from tim_report.site.layout import RESERVED


def quadratic(names: list[str]) -> list[str]:
    """The search before issue 24: from suffix 2 upwards, for every input."""
    taken, out = set(RESERVED), []
    for rid in (safe_run_id(n) for n in names):
        candidate, n = rid, 1
        while candidate.lower() in taken:
            n += 1
            candidate = f"{rid}-{n}"
        taken.add(candidate.lower())
        out.append(candidate)
    return out


def seconds(fn, names: list[str]) -> float:
    start = time.perf_counter()
    fn(names)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="5000,10000,20000")
    args = ap.parse_args()
    print(f"{'inputs':>8} {'unique_ids (s)':>15} {'quadratic baseline (s)':>23} {'ratio':>7}")
    for n in map(int, args.sizes.split(",")):
        names = ["step"] * n
        assert unique_ids(names) == quadratic(names)
        new, old = seconds(unique_ids, names), seconds(quadratic, names)
        print(f"{n:>8} {new:>15.3f} {old:>23.2f} {old / new:>7.0f}×")


if __name__ == "__main__":
    main()

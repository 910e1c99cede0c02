#!/usr/bin/env python3
"""Measure the run view on runs of known shape: how often it finds what is there, and how often it finds what is not.

    python scripts/run_view_matrix.py                  # print the markdown table
    python scripts/run_view_matrix.py --update-doc     # rewrite docs/diagnosis.md between its RUNVIEW markers
    python scripts/run_view_matrix.py --check-doc      # exit 1 when the doc is stale

Steady runs (the false-alarm column): STEADY_RUNS runs of 20 to 200 steps, each with its own batch sizes (2 to 64
sequences a step, drawn per step), response length (8 to 96 tokens), noise (1e-3 to 0.05 nats) and step-to-step
wobble of that noise (0 to 20%, log-normal), all seeded; a change point or a run-level finding on one of them is a
false alarm. Shapes: SHAPE_RUNS seeded runs each, analysed in full (every step diagnosed). Deterministic: the same
table on every machine. tests/test_run_verdict.py runs --check-doc.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tim_report.analysis import analyze
from tim_report.analysis.metrics import summary_metrics
from tim_report.analysis.run_index import index_from_rows, run_row
from tim_report.analysis.tokens import valid_tokens
from tim_report.config import Thresholds
from tim_report.testing import make_run, shifted

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "diagnosis.md"
START, END = "<!-- RUNVIEW:START (python scripts/run_view_matrix.py) -->\n", "<!-- RUNVIEW:END -->"
STEADY_RUNS = 300
SHAPE_RUNS = 10
MARGIN = 1  # a change point within this many steps of the truth is where it belongs (a step with no clipped token
# at the first broken step moves a share's change by one)


def metric_rows(batches) -> list[dict]:
    """Index rows from the metrics alone (no diagnosis): what the change points and the run findings read."""
    th = Thresholds()
    return [run_row({"run": {"id": f"step_{b.meta['step']}", "meta": b.meta}, "metrics": summary_metrics(valid_tokens(b)[0], th)})
            for b in batches]


def steady_run(seed: int):
    """One random steady run: nothing changes but the batch each step draws."""
    rng = np.random.default_rng(seed)
    lo = int(rng.integers(2, 65))
    return make_run(int(rng.integers(20, 201)), n_seqs=(lo, int(rng.integers(lo, 65))), mean_len=int(rng.integers(8, 97)),
                    noise=float(10 ** rng.uniform(-3, np.log10(0.05))), wobble=float(rng.uniform(0, 0.2)), seed=seed)


@dataclass(frozen=True)
class Shape:
    name: str
    steps: int
    noise: Callable[[int], float]
    change_at: tuple[int, ...]  # the steps a change point may sit at (within MARGIN)
    finding: str  # the run-level finding the shape must give
    fault: Callable | None = None
    regime_from: tuple[str, int] | None = None  # the run verdict's regime and the step it starts at
    needs_change: bool = True  # a change point must sit at `change_at` (a spike shorter than a level need not give one)


SHAPES = (
    Shape("mismatch ×6 from step 19", 30, lambda s: 0.01 if s < 19 else 0.06, (19,), "level_jump"),
    Shape("off-by-one trainer from step 12", 30, lambda s: 0.01, (12,), "level_jump", lambda s, b: shifted(b) if s >= 12 else b,
          ("systematic", 12)),
    Shape("export at step 2: ×25 (3 steps)", 3, lambda s: 0.01 if s < 2 else 0.25, (), "level_jump", needs_change=False),
    Shape("growth until a restart at step 35", 50, lambda s: 0.005 * (1 + s / 6) if s < 35 else 0.005, tuple(range(1, 36)),
          "growing_mismatch"),
    Shape("spike ×8 at steps 20–21", 40, lambda s: 0.08 if s in (20, 21) else 0.01, (20, 21, 22, 23), "resume_spikes",
          needs_change=False),
    Shape("spike ×8 at steps 0–1 (a resumed run)", 20, lambda s: 0.08 if s < 2 else 0.01, (1, 2, 3), "resume_spikes",
          needs_change=False),
)


def shape_rows(shape: Shape, seed: int) -> list[dict]:
    rows = []
    for b in make_run(shape.steps, n_seqs=(8, 16), mean_len=24, noise=shape.noise, seed=1000 + seed):
        if shape.fault is not None:
            b = shape.fault(b.meta["step"], b)
        rows.append(run_row(analyze(b, run_id=f"step_{b.meta['step']}")))
    return rows


def steady_outcome(seed: int) -> tuple[list[str], bool]:
    """The metrics a steady run's change points are on, and whether it has a run-level finding."""
    ix = index_from_rows(metric_rows(steady_run(seed)))
    return [c["metric"] for c in ix["trend"]["change_points"]], bool(ix["run"]["findings"])


def shape_index(job: tuple[int, int]) -> dict:
    shape, seed = job
    return index_from_rows(shape_rows(SHAPES[shape], seed))


def measure() -> dict:
    # every run is seeded, so spreading them over two processes changes nothing but the time
    with ProcessPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        steady = list(pool.map(steady_outcome, range(STEADY_RUNS), chunksize=10))
        shaped = list(pool.map(shape_index, [(i, seed) for i in range(len(SHAPES)) for seed in range(SHAPE_RUNS)]))
    out = {"steady": {"runs": STEADY_RUNS, "change": sum(1 for cps, _ in steady if cps),
                      "finding": sum(1 for _, found in steady if found),
                      "clean": sum(1 for cps, found in steady if not (cps or found)),
                      "metrics": sorted({m for cps, _ in steady for m in cps})}, "shapes": []}
    for i, shape in enumerate(SHAPES):
        found = other_cp = other_finding = 0
        for seed in range(SHAPE_RUNS):
            ix = shaped[i * SHAPE_RUNS + seed]
            ids = {f["id"] for f in ix["run"]["findings"]}
            cps = (ix["trend"] or {}).get("change_points", [])
            where = [any(abs(c["step"] - s) <= MARGIN for s in shape.change_at) for c in cps]
            ok = shape.finding in ids and (not shape.needs_change or any(where))
            if shape.regime_from:
                ok = ok and (ix["run"]["regime"], ix["run"]["since_step"]) == shape.regime_from
            found += ok
            other_cp += not all(where)
            other_finding += bool(ids - {shape.finding})
        expected = f"`{shape.finding}`" + (f", {shape.regime_from[0]} from step {shape.regime_from[1]}" if shape.regime_from else "")
        out["shapes"].append({"name": shape.name, "runs": SHAPE_RUNS, "expected": expected, "found": found,
                              "other_change": other_cp, "other_finding": other_finding})
    return out


def markdown(m: dict) -> str:
    s = m["steady"]
    rows = ["| run | runs | must find | found it | change points elsewhere (false alarms) | other run findings (false alarms) |",
            "|---|---:|---|---:|---:|---:|",
            f"| steady: 20–200 steps, 2–64 sequences a step, 8–96 tokens each, noise 1e-3–0.05, wobble 0–20% | {s['runs']} | "
            f"nothing | {s['clean']} | {s['change']} ({100 * s['change'] / s['runs']:.2g}%) | "
            f"{s['finding']} ({100 * s['finding'] / s['runs']:.2g}%) |"]
    for r in m["shapes"]:
        rows.append(f"| {r['name']} | {r['runs']} | {r['expected']} | {r['found']} | {r['other_change']} | {r['other_finding']} |")
    note = (f"\nThe false alarms on steady runs came from: {', '.join(s['metrics'])}.\n" if s["metrics"] else "\n")
    return "\n".join(rows) + "\n" + note


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update-doc", action="store_true")
    ap.add_argument("--check-doc", action="store_true")
    args = ap.parse_args(argv)
    text = markdown(measure())
    if not (args.update_doc or args.check_doc):
        sys.stdout.write(text)
        return 0
    doc = DOC.read_text(encoding="utf-8")
    head, rest = doc.split(START, 1)
    _, tail = rest.split(END, 1)
    new = head + START + text + END + tail
    if args.check_doc:
        if new != doc:
            print("docs/diagnosis.md is stale: run python scripts/run_view_matrix.py --update-doc", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

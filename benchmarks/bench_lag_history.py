"""False alarms and detection of the run view's lag detectors on subsets of real asynchronous runs (issue 42).

The detectors: a lag beyond its own history (`analysis/lag/history.read_run`, status "beyond": `stale_weights` from
the run), an engine that never took an update (`never_delivered`) and, per step, a newer lag bucket farther from the
trainer than an older one (`version_order`, `analysis/lag/findings.order_breach`). The baseline, measured on the same
subsets: the old rule, each step's whole-batch numbers against the band of the run's earlier steps of its lag mix
(`check --history`, `analysis/history.check_history`; every metric of it but median |δ|, which no per-sequence sum
gives).

The data: benchmarks/lag_runs.py's runs of examples/training_loop/train.py on models/tiny-qwen2 (real AdamW steps, a
bf16 engine, an fp32 trainer; 16 sequences × 24 tokens a step, 20 steps), clean at lags 1, 2 and 3 (learning rates
5e-5 to 2e-4, several seeds, warm-ups), clean with lags 1-K mixed in each step, and with sync faults planted; kept as
per-step, per-sequence sums in tests/data/lag/loop_runs.npz. A subset is a window of at least 9 consecutive steps of
one run and, in each step, 8 to 16 of its sequences at random; its index rows are rebuilt from the sums (the fields
the detectors read) and the detectors run on them. On a clean run anything raised is a false alarm; on a faulty one,
the subset's window holds the first affected step, 5 steps before it and 4 from it on at least (a never-synced run:
from its first step, to 9 steps of its lag at least, the fewest never_delivered reads), and a detection counts from
the first affected step on, its delay in steps (an alarm before it is counted apart, as early).

    python benchmarks/bench_lag_history.py [--subsets 1000] [--seed 0] [--fixture tests/data/lag/loop_runs.npz]
    python benchmarks/bench_lag_history.py --runs DIR   # from runs made (or made now: ~1 h) in DIR (lag_runs.py)
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lag_runs import COUNTS, FIXTURE, SUMS

from tim_report.config import NEVER_MIN_STEPS

MAX_RATE = 0.005  # issue 42: each new detector at or under 0.5% of clean subsets
WINDOW_MIN = 9  # steps in a subset's window, at least (NEVER_MIN_STEPS: never_delivered reads no fewer)
SEQS = (8, 16)  # sequences a step keeps, both ends included
BEFORE, AFTER = 5, 4  # a faulty subset's window holds this many steps before the first affected one, at least, and
# this many after it (a slow onset is named after a few steps: detection within a window that ends at it says little)
DETECTORS = ("beyond", "never_delivered", "version_order")
BASELINE = "whole-batch band (old rule)"


def load(path: Path = FIXTURE) -> list[dict]:
    """The runs of the fixture: each {"spec", "steps": [{"step", "lr", "seqs": {lag, n, sums…}}, …]} in step order."""
    z = np.load(path, allow_pickle=False)
    specs = json.loads(str(z["specs"]))
    runs = [{"spec": s, "steps": []} for s in specs]
    lr = {(int(r), int(s)): float(x) for r, s, x in zip(z["step_run"], z["step_step"], z["step_lr"])}
    run, step = z["seq_run"], z["seq_step"]
    keys = ("lag", "n", *SUMS, *COUNTS)
    cols = {k: z[f"seq_{k}"].astype(np.float64) if k in SUMS else z[f"seq_{k}"].astype(np.int64) for k in keys}
    order = np.lexsort((z["seq_seq"], step, run))
    bounds = np.flatnonzero(np.diff(run[order] * 10_000 + step[order])) + 1
    for part in np.split(order, bounds):
        r, s = int(run[part[0]]), int(step[part[0]])
        runs[r]["steps"].append({"step": s, "lr": lr[(r, s)], "seqs": {k: v[part] for k, v in cols.items()}})
    for r in runs:
        r["steps"].sort(key=lambda x: x["step"])
    return runs


def _cluster_se(sums: np.ndarray, counts: np.ndarray) -> float | None:
    """The token mean's standard error with sequences as clusters (analysis/lag/split._cluster_se)."""
    g, total = sums.size, float(counts.sum())
    if g < 2 or total <= 0:
        return None
    resid = sums - counts * (float(sums.sum()) / total)
    return math.sqrt(float(resid @ resid) * g / (g - 1)) / total


def by_lag(seqs: dict) -> list[dict]:
    """The staleness split's by_lag rows (the fields the detectors read) of these sequences."""
    tokens = int(seqs["n"].sum())
    out = []
    for lag in np.unique(seqs["lag"]):
        m = seqs["lag"] == lag
        n = int(seqs["n"][m].sum())
        out.append({"lag": int(lag), "tokens": n, "share": n / tokens, "kl_k3": float(seqs["k3"][m].sum()) / n,
                    "kl_k3_se": _cluster_se(seqs["k3"][m], seqs["n"][m].astype(np.float64))})
    return out


def step_row(run_id: str, step: dict, keep: np.ndarray) -> dict:
    """The index row of a step cut to sequences `keep`: what run_index.run_row and lag_fields give, for the fields
    read_run, never_delivered and check_history read."""
    seqs = {k: v[keep] for k, v in step["seqs"].items()}
    rows = by_lag(seqs)
    n = float(seqs["n"].sum())
    r, r2 = float(seqs["r"].sum()), float(seqs["r2"].sum())
    lag0 = next((x for x in rows if x["lag"] == 0), {})
    return {"id": f"{run_id}/step_{step['step']}", "step": step["step"], "tokens": int(n), "lr": step["lr"] or None,
            "lag_mix": {str(x["lag"]): x["share"] for x in rows}, "lag_kl_k3": {str(x["lag"]): x["kl_k3"] for x in rows},
            "lag_kl_k3_se": {str(x["lag"]): x["kl_k3_se"] for x in rows}, "floor_kl_k3_se": lag0.get("kl_k3_se"),
            "by_lag": rows, "findings": [], "regime": "staleness",
            "kl_k3": float(seqs["k3"].sum()) / n, "abs_delta_mean": float(seqs["abs"].sum()) / n, "ess": r * r / (n * r2),
            "outside_2x": float(seqs["out2"].sum()) / n, "outside_5x": float(seqs["out5"].sum()) / n,
            "phantom_clip": float(seqs["clip"].sum()) / n, "veto_token_fraction": float(seqs["veto"].sum()) / n}


def draw(run: dict, rng: np.random.Generator, first: int | None = None, start: int | None = None,
         stop_min: int = 0) -> tuple[list[dict], int]:
    """One subset of a run: its rows (a window of ≥ WINDOW_MIN steps; with `first`, holding BEFORE steps before it and
    AFTER from it on; with `start`, from that step to `stop_min` at least) and how many sequences each step keeps."""
    steps = run["steps"]
    last = len(steps) - 1
    if first is not None:
        start = int(rng.integers(0, first - BEFORE + 1))
        stop = int(rng.integers(max(start + WINDOW_MIN - 1, first + AFTER), last + 1))
    elif start is not None:
        stop = int(rng.integers(max(start + WINDOW_MIN - 1, stop_min), last + 1))
    else:
        length = int(rng.integers(WINDOW_MIN, len(steps) + 1))
        start = int(rng.integers(0, len(steps) - length + 1))
        stop = start + length - 1
    size = int(rng.integers(SEQS[0], SEQS[1] + 1))
    rows = []
    for step in steps[start:stop + 1]:
        total = step["seqs"]["n"].shape[0]
        keep = np.sort(rng.choice(total, size=min(size, total), replace=False))
        rows.append(step_row(run["spec"]["name"], step, keep))
    return rows, size


def raised(rows: list[dict]) -> dict[str, int | None]:
    """The first step each detector raises at (None: silent) over these rows, as `watch` meets them: "beyond" at the
    first step read beyond its history; never_delivered at the first step by which the run's steps so far show it;
    version_order at the first step whose buckets break the order; the baseline at the first step outside its band."""
    from tim_report.analysis.history import check_history
    from tim_report.analysis.lag.findings import order_breach
    from tim_report.analysis.lag.history import never_delivered, read_run, same_lag
    from tim_report.config import DiagnosisThresholds

    dt = DiagnosisThresholds()
    readings = read_run(rows)
    out: dict[str, int | None] = dict.fromkeys((*DETECTORS, BASELINE))
    out["beyond"] = next((r["step"] for r in rows if (readings.get(r["id"]) or {}).get("status") == "beyond"), None)
    if never_delivered(rows, readings) is not None:  # the first step by which it is certain
        out["never_delivered"] = next(r["step"] for i, r in enumerate(rows) if never_delivered(rows[:i + 1]) is not None)
    out["version_order"] = next((r["step"] for r in rows if order_breach(r["by_lag"], dt.min_tokens, dt.z,
                                                                          dt.version_order_ratio)), None)
    for i, r in enumerate(rows):  # median |δ| is not in the rows: check_history skips it
        if check_history(r, same_lag(r, rows[:i])).violations:
            out[BASELINE] = r["step"]
            break
    return out


def clean_subsets(runs: list[dict], n: int, seed: int) -> dict:
    """n subsets of the clean runs (a run at random each): per detector, the subsets it raised on (run, steps,
    sequences a step, the step raised at)."""
    rng = np.random.default_rng(seed)
    clean = [r for r in runs if r["spec"]["kind"] == "clean"]
    hits: dict[str, list] = {k: [] for k in (*DETECTORS, BASELINE)}
    for _ in range(n):
        run = clean[int(rng.integers(len(clean)))]
        rows, size = draw(run, rng)
        for k, at in raised(rows).items():
            if at is not None:
                hits[k].append((run["spec"]["name"], rows[0]["step"], rows[-1]["step"], size, at))
    return {"subsets": n, "runs": len(clean), "hits": hits}


def fault_subsets(runs: list[dict], per_run: int, seed: int) -> dict:
    """Per fault kind and lag: subsets drawn from its runs (per_run each) holding the first affected step; per detector
    the delays (steps from the first affected step, or from the window's start where it starts later) of those it
    raised on at or after that step, and its raises before it."""
    rng = np.random.default_rng([seed, 1])
    out: dict[tuple, dict] = {}
    for run in runs:
        spec = run["spec"]
        if spec["kind"] == "clean":
            continue
        first = spec["first_affected"]
        key = (spec["kind"], spec["lag"], spec["mixed"])
        cell = out.setdefault(key, {"subsets": 0, "runs": set(), "any": [],
                                    **{k: {"delays": [], "early": 0} for k in (*DETECTORS, BASELINE)}})
        cell["runs"].add(spec["name"])
        for _ in range(per_run):
            if spec["kind"] == "never-synced":  # the run from its first step (build and watch read a run folder whole),
                # to NEVER_MIN_STEPS steps of its lag at least: the fewest its growth is read over
                rows, _ = draw(run, rng, start=0, stop_min=spec["lag"] + NEVER_MIN_STEPS - 1)
            else:
                rows, _ = draw(run, rng, first=[s["step"] for s in run["steps"]].index(first))
            since = max(first, rows[0]["step"])
            cell["subsets"] += 1
            seen = []
            for k, at in raised(rows).items():
                if at is None:
                    continue
                if at < first:
                    cell[k]["early"] += 1
                else:
                    cell[k]["delays"].append(at - since)
                    if k != BASELINE:
                        seen.append(at - since)
            cell["any"].append(min(seen) if seen else None)
    return out


def cost(runs: list[dict], sizes: tuple[int, ...] = (100, 1_000, 10_000), rounds: int = 3) -> list[dict]:
    """What the readings cost a run of N steps (a clean lag-1 run's steps repeated, renumbered), least CPU seconds of
    `rounds`: `check --history` on its newest step (read_run over every row, as check.py calls it) beside the old rule
    on the same step (check_history against its window of the run's rows), and the whole run's readings as build and
    watch take them (in_run's read_run and never_delivered)."""
    from tim_report.analysis.history import check_history
    from tim_report.analysis.lag.history import never_delivered, read_run

    base = next(r for r in runs if r["spec"]["kind"] == "clean" and r["spec"]["lag"] == 1 and not r["spec"]["warmup"])
    steps = base["steps"][1:]  # lag 1 throughout
    one = [step_row("r", s, np.arange(s["seqs"]["n"].shape[0])) for s in steps]
    out = []
    for n in sizes:
        rows = [{**one[i % len(one)], "id": f"r/step_{i}", "step": i} for i in range(n)]

        def least(fn) -> float:
            times = []
            for _ in range(rounds):
                c0 = time.process_time()
                fn()
                times.append(time.process_time() - c0)
            return min(times)

        out.append({"steps": n, "old_band": least(lambda: check_history(rows[-1], rows[:-1])),  # noqa: B023
                    "read_run": least(lambda: read_run(rows)),  # noqa: B023
                    "run": least(lambda: never_delivered(rows, read_run(rows)))})  # noqa: B023
    return out


def _share(cell: dict, n: int) -> str:
    """A detector's cell: the share raised at or after the first affected step (its median delay), those before it."""
    d, early = cell["delays"], cell["early"]
    text = f"{len(d) / n:.0%}"
    parts = [f"delay {statistics.median(d):g}"] if d else []
    parts += [f"{early} early"] if early else []
    return text + (f" ({', '.join(parts)})" if parts else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subsets", type=int, default=1000, help="clean subsets")
    ap.add_argument("--per-run", type=int, default=40, help="subsets of each faulty run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    ap.add_argument("--runs", type=Path, help="read (and make what is missing of) lag_runs.py's runs in this folder")
    ap.add_argument("--cost", action="store_true", help="also time the readings on runs of 100 to 10,000 steps")
    args = ap.parse_args()
    if args.runs:
        import tempfile

        from lag_runs import extract, generate

        generate(args.runs)
        args.fixture = Path(tempfile.mkdtemp()) / "loop_runs.npz"
        np.savez_compressed(args.fixture, **extract(args.runs))
    t0, c0 = time.perf_counter(), time.process_time()
    runs = load(args.fixture)
    clean = clean_subsets(runs, args.subsets, args.seed)
    faults = fault_subsets(runs, args.per_run, args.seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = sum(len(r["steps"]) for r in runs)
    print(f"{len(runs)} runs ({clean['runs']} clean, {steps} steps) of examples/training_loop/train.py on tiny-qwen2, "
          f"{args.fixture.name}; {args.subsets} clean subsets (windows of ≥ {WINDOW_MIN} steps, {SEQS[0]}-{SEQS[1]} "
          f"sequences a step), {args.per_run} of each faulty run; {wall:.1f} s wall, {cpu:.1f} s CPU, peak "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB\n")
    print("| detector | clean subsets | false alarms | rate | limit |")
    print("|---|---:|---:|---:|---:|")
    for k in (*DETECTORS, BASELINE):
        hits = len(clean["hits"][k])
        limit = f"{MAX_RATE:.1%}" if k in DETECTORS else "—"
        print(f"| {k} | {args.subsets} | {hits} | {hits / args.subsets:.1%} | {limit} |")
    print("\n| fault | lag | runs | subsets | detected (any new) | median delay | beyond | never_delivered | "
          f"version_order | {BASELINE} |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (kind, lag, mixed), cell in sorted(faults.items()):
        n = cell["subsets"]
        found = [d for d in cell["any"] if d is not None]
        med = f"{statistics.median(found):g}" if found else "—"

        print(f"| {kind} | {'1-' + str(lag) if mixed else lag} | {len(cell['runs'])} | {n} | {len(found) / n:.0%} | "
              f"{med} | {' | '.join(_share(cell[k], n) for k in (*DETECTORS, BASELINE))} |")
    print("\n(detector columns: the share of subsets raised at or after the first affected step, its median delay in "
          "steps, and the subsets raised before it)")
    if args.cost:
        print("\n| steps in the run | old rule: one step's band | `check --history`: read_run | build: read_run + "
              "never_delivered |\n|---:|---:|---:|---:|")
        for c in cost(runs):
            print(f"| {c['steps']:,} | {c['old_band'] * 1e3:.2f} ms | {c['read_run'] * 1e3:.1f} ms | {c['run'] * 1e3:.1f} ms |")
    for k in DETECTORS:
        for name, a, b, size, at in clean["hits"][k][:5]:
            print(f"  {k} on {name} steps {a}-{b}, {size} sequences a step: raised at step {at}")


if __name__ == "__main__":
    main()

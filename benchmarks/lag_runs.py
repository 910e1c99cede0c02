"""The real asynchronous runs bench_lag_history.py reads: examples/training_loop/train.py on models/tiny-qwen2 (real
AdamW steps, a bf16 engine, an fp32 trainer), clean and with planted sync faults, and the compact fixture extracted
from them (per step and sequence: lag, tokens and the sums the run view's lag readings and the old whole-batch band
are computed from).

    python benchmarks/lag_runs.py --runs DIR [--jobs 2]      # generate the runs (about 50 s of wall time each on a
                                                             # loaded 2-core machine, 16 s CPU; some 70 runs)
    python benchmarks/lag_runs.py --runs DIR --write-fixture # tests/data/lag/loop_runs.npz from them
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "examples" / "training_loop" / "train.py"
FIXTURE = ROOT / "tests" / "data" / "lag" / "loop_runs.npz"
STEPS, BATCH, MIXED_BATCH, TOKENS = 20, 16, 18, 24
FIRST_AFFECTED = 12  # the faults planted mid-run: the first step that trains on tokens the fault touched


def _spec(name: str, kind: str, lag: int, seed: int, lr: float, warmup: int = 0, bug: str | None = None,
          mixed: bool = False) -> dict:
    """One run: its name, kind ("clean" or the fault), lag, and the loop's arguments. A fault planted from a step is
    planted at FIRST_AFFECTED − lag, so the trainer meets its tokens at FIRST_AFFECTED (with --mixed-lags the first
    part of that batch is trained on one step after it, at FIRST_AFFECTED − lag + 1); never-synced from the start
    (its first affected step is lag + 1: version 1 is the first the engine misses; mixed: 2)."""
    args = ["--steps", str(STEPS), "--batch", str(MIXED_BATCH if mixed else BATCH), "--tokens", str(TOKENS),
            "--async-lag", str(lag), "--seed", str(seed), "--lr", f"{lr:g}"]
    args += ["--lr-warmup", str(warmup)] if warmup else []
    args += ["--mixed-lags"] if mixed else []
    first = None
    if bug is None:
        args += ["--bug-step", "-1"]
    else:
        planted = 1 if bug == "never-synced" else FIRST_AFFECTED - lag  # the first version the fault touches
        first = planted + 1 if mixed else planted + lag
        args += ["--bug", bug, "--bug-step", str(0 if bug == "never-synced" else planted)]
    return {"name": name, "kind": kind, "lag": lag, "mixed": mixed, "seed": seed, "lr": lr, "warmup": warmup,
            "first_affected": first, "args": args}


def specs() -> list[dict]:
    """The runs: clean at lags 1-3 (three learning rates, three seeds, and warm-ups), clean with lags 1-K mixed in
    each step, and each fault at lags 1-3."""
    out = []
    for lag in (1, 2, 3):
        for lr in (5e-5, 1e-4, 2e-4):
            for seed in (1, 2, 3):
                out.append(_spec(f"clean_l{lag}_lr{lr:g}_s{seed}", "clean", lag, seed, lr))
        for seed, (lr, warmup) in enumerate(((1e-4, 8), (2e-4, 8), (2e-4, 12), (1e-4, 16)), start=4):
            out.append(_spec(f"warmup_l{lag}_lr{lr:g}_w{warmup}_s{seed}", "clean", lag, seed, lr, warmup))
    for lag in (2, 3):
        for seed, lr in ((1, 5e-5), (2, 1e-4), (3, 2e-4), (4, 1e-4)):
            out.append(_spec(f"clean_mixed{lag}_lr{lr:g}_s{seed}", "clean", lag, seed, lr, mixed=True))
    for lag in (1, 2, 3):
        for seed, lr in ((11, 1e-4), (12, 2e-4)):
            out.append(_spec(f"skip_l{lag}_s{seed}", "skip-sync", lag, seed, lr, bug="skip-sync"))
        for seed, (lr, warmup) in ((13, (1e-4, 0)), (14, (2e-4, 8))):
            out.append(_spec(f"never_l{lag}_w{warmup}_s{seed}", "never-synced", lag, seed, lr, warmup, bug="never-synced"))
        out.append(_spec(f"swapped_l{lag}_s15", "swapped-tensors", lag, 15, 1e-4, bug="swapped-tensors"))
        out.append(_spec(f"bf16sync_l{lag}_s16", "bf16-sync", lag, 16, 2e-4, bug="bf16-sync"))
    for lag in (2, 3):
        out.append(_spec(f"skip_mixed{lag}_s17", "skip-sync", lag, 17, 1e-4, bug="skip-sync", mixed=True))
        out.append(_spec(f"swapped_mixed{lag}_s18", "swapped-tensors", lag, 18, 1e-4, bug="swapped-tensors", mixed=True))
    return out


def generate(runs: Path, jobs: int = 2) -> None:
    """Each run not yet in `runs` (its run.json written last, so a run cut off is made again)."""
    todo = [s for s in specs() if not (runs / s["name"] / "run.json").is_file()]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def one(s: dict) -> str:
        out = runs / s["name"]
        subprocess.run(["rm", "-rf", str(out)], check=True)
        res = subprocess.run([sys.executable, str(TRAIN), "--out", str(out / "tim_steps"), *s["args"]],
                             capture_output=True, text=True, env=env)
        if res.returncode != 0:
            return f"{s['name']}: failed: {res.stderr[-500:]}"
        (out / "run.json").write_text(json.dumps(s, indent=1) + "\n")
        return f"{s['name']}: done"

    print(f"{len(todo)} of {len(specs())} runs to make in {runs} (some 50 s each on a loaded 2-core machine)", flush=True)
    with ThreadPoolExecutor(jobs) as pool:
        for line in pool.map(one, todo):
            print(line, flush=True)


# ---------------------------------------------------------------------------- the fixture

SUMS = ("k3", "abs", "r", "r2")  # per sequence: Σk3, Σ|δ|, Σr, Σr² (float32)
COUNTS = ("out2", "out5", "clip", "veto")  # per sequence: tokens outside 2×, 5×, PPO's clip range, vetoed (uint8)


def sequence_sums(batch) -> dict[str, np.ndarray]:
    """Per sequence of a step: its tokens, lag and the sums (stats as analysis/metrics.py and lag/split.py take them)."""
    from tim_report.analysis.lag.versions import token_lags, trainer_version
    from tim_report.analysis.tokens import valid_tokens
    from tim_report.config import Thresholds

    th = Thresholds()
    tok, _ = valid_tokens(batch)
    _, seq_lag = token_lags(batch, tok, trainer_version(batch.meta)[0])
    delta, seq = tok.delta, tok.seq
    em = np.expm1(tok.log_r)
    low, high = th.ppo_clip
    per = {"k3": np.maximum(em - tok.log_r, 0.0), "abs": np.abs(delta), "r": em + 1.0, "r2": np.square(em + 1.0),
           "out2": np.abs(delta) > math.log(th.band_2x), "out5": np.abs(delta) > math.log(th.band_5x),
           "clip": (em < low - 1) | (em > high - 1), "veto": delta < math.log(th.veto)}
    n = np.bincount(seq, minlength=batch.n_seqs)
    out = {k: np.bincount(seq, weights=v.astype(np.float64), minlength=batch.n_seqs) for k, v in per.items()}
    return {"n": n, "lag": np.asarray(seq_lag), **out}


def extract(runs: Path) -> dict[str, np.ndarray]:
    """The fixture's arrays, one row per (run, step, sequence), and per run its spec (JSON) and per step the full
    batch's KL k3 by lag as `tim_report.analysis` measured it (the recomputation is checked against it)."""
    from tim_report.analysis import GATE, analyze
    from tim_report.io import load

    rows: dict[str, list] = {k: [] for k in ("run", "step", "seq", "lag", "n", *SUMS, *COUNTS)}
    steps: dict[str, list] = {k: [] for k in ("run", "step", "lr")}
    checks: dict[str, list] = {k: [] for k in ("run", "step", "lag", "kl_k3")}
    made = [s for s in specs() if (runs / s["name"] / "run.json").is_file()]
    for s in made:  # a run made with other arguments than its spec's now is made again, not mislabelled
        if json.loads((runs / s["name"] / "run.json").read_text())["args"] != s["args"]:
            raise SystemExit(f"{runs / s['name']}: made with other arguments; remove it to make it again")
    for i, spec in enumerate(made):
        folder = runs / spec["name"] / "tim_steps"
        for path in sorted(folder.glob("step_*"), key=lambda p: int(p.name.split("_")[1].split(".")[0])):
            b = load(path)
            step = int(b.meta["step"])
            s = sequence_sums(b)
            for j in range(b.n_seqs):
                for k, v in (("run", i), ("step", step), ("seq", j), ("lag", s["lag"][j]), ("n", s["n"][j])):
                    rows[k].append(v)
                for k in (*SUMS, *COUNTS):
                    rows[k].append(s[k][j])
            for k, v in (("run", i), ("step", step), ("lr", float(b.meta.get("lr") or 0.0))):
                steps[k].append(v)
            for r in (analyze(b, scope=GATE).staleness or {}).get("by_lag") or []:
                for k, v in (("run", i), ("step", step), ("lag", int(r["lag"])), ("kl_k3", r["kl_k3"])):
                    checks[k].append(v)
    ints = ("run", "step", "lag", "n")
    out = {f"seq_{k}": np.asarray(v, dtype=np.int16 if k in ints else np.float32 if k in SUMS else np.uint8)
           for k, v in rows.items()}
    out.update({f"step_{k}": np.asarray(v, dtype=np.float64 if k == "lr" else np.int16) for k, v in steps.items()})
    out.update({f"check_{k}": np.asarray(v, dtype=np.float64 if k == "kl_k3" else np.int16) for k, v in checks.items()})
    out["specs"] = np.asarray(json.dumps([{k: v for k, v in s.items() if k != "args"} for s in made]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, required=True, help="the folder the runs are made in (kept: reruns reuse it)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write-fixture", action="store_true", help=f"write {FIXTURE.relative_to(ROOT)} from the runs")
    args = ap.parse_args()
    generate(args.runs, args.jobs)
    if args.write_fixture:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(FIXTURE, **extract(args.runs))
        print(f"wrote {FIXTURE.relative_to(ROOT)} ({FIXTURE.stat().st_size / 1024:.0f} kB)")


if __name__ == "__main__":
    main()

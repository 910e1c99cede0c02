#!/usr/bin/env python3
"""Run the diagnosis on every fault fixture and print the confusion matrices as markdown.

    python scripts/diagnosis_matrix.py [--data tests/data/faults] [--details]   # print markdown
    python scripts/diagnosis_matrix.py --json                                     # one row per fixture, as JSON
    python scripts/diagnosis_matrix.py --update-doc                               # rewrite docs/diagnosis.md
    python scripts/diagnosis_matrix.py --check-doc                                # exit 1 when the doc is stale

docs/diagnosis.md shows it between its MATRIX markers; tests/test_diagnosis_faults.py runs this
script with --json and --check-doc.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from tim_report.analysis import analyze
from tim_report.catalogue.findings import FINDINGS
from tim_report.catalogue.numbers import fmt, pct
from tim_report.catalogue.verdicts import REGIMES
from tim_report.io import load
from tim_report.model import StepBatch
from tim_report.testing import make_run

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_DATA = ROOT / "tests" / "data" / "faults"
DOC = ROOT / "docs" / "diagnosis.md"
STEADY_STEPS = 150  # the steady run the false-alarm column is measured on
START, END = "<!-- MATRIX:START (python scripts/diagnosis_matrix.py) -->\n", "<!-- MATRIX:END -->"


# The side each fixture's fault is on (the side the leading finding must name): the one whose log-probs are not
# those of the distribution the tokens were sampled from.
SIDES = {"dummy_zero": "rollout", "temp_rollout_0.7": "trainer", "temp_rollout_0.8": "trainer",
         "temp_rollout_1.2": "trainer", "temp_rollout_1.5": "trainer", "temp_trainer_0.6": "rollout",
         "weights_perturbed": "trainer", "weights_reinit": "trainer", "multi_turn_tool": "trainer",
         "mixed_versions": "rollout"}


def _nan_trainer(b: StepBatch) -> StepBatch:
    tr = b.trainer_logp.copy()
    tr[np.random.default_rng(0).random(tr.shape[0]) < 0.65] = np.nan
    return replace(b, trainer_logp=tr)


def _nan_rollout_5(b: StepBatch) -> StepBatch:
    ro = b.rollout_logp.copy()
    ro[::20] = np.nan
    return replace(b, rollout_logp=ro)


def _train_forward_noise(b: StepBatch) -> StepBatch:
    noise = 2e-3 * np.random.default_rng(1).standard_normal(b.n_tokens)
    return replace(b, sides={"train": np.minimum(b.trainer_logp + noise, 0.0)})


# Faults made from a fixture by changing its arrays, where the truth is as sure: name → (fixture, what is done,
# expected regime, expected findings, the side at fault, the change).
DERIVED: dict[str, tuple[str, str, str, list[str], str | None, Callable[[StepBatch], StepBatch]]] = {
    "trainer_nan_65": ("bf16_m", "trainer log-probs NaN on 65% of the tokens", "systematic", ["unusable_input"], None,
                       _nan_trainer),
    "rollout_nan_5": ("bf16_m", "rollout log-probs NaN on 5% of the tokens (excluded, below the gate)", "numerical_noise",
                      [], None, _nan_rollout_5),
    "probabilities": ("mixed_versions", "both sides saved as probabilities exp(log p)", "systematic", ["unusable_input"], None,
                      lambda b: replace(b, rollout_logp=np.exp(b.rollout_logp), trainer_logp=np.exp(b.trainer_logp))),
    "trainer_zeros": ("bf16_m", "trainer log-probs all 0.0 (never recomputed)", "systematic", ["dummy_zero"], "trainer",
                      lambda b: replace(b, trainer_logp=np.zeros_like(b.trainer_logp))),
    "rollout_reinit": ("weights_reinit", "the sides swapped: the rollout scored by the re-initialised model", "systematic",
                       ["one_side_broken"], "rollout",
                       lambda b: replace(b, rollout_logp=b.trainer_logp, trainer_logp=b.rollout_logp)),
    "trainer_offset_0.001": ("identical", "the trainer's log-probs lowered by a constant 0.001 nats (KL k3 5e-7)", "elevated",
                             ["processed_logprobs"], None, lambda b: replace(b, trainer_logp=b.trainer_logp - 0.001)),
    "trainer_offset_0.01": ("identical", "the trainer's log-probs lowered by a constant 0.01 nats (KL k3 5e-5)", "elevated",
                            ["processed_logprobs"], None, lambda b: replace(b, trainer_logp=b.trainer_logp - 0.01)),
    "temp_trainer_0.6_swapped": ("temp_trainer_0.6", "the sides swapped: the trainer's log-probs at another temperature "
                                 "than the sampler's", "systematic", ["temperature"], "trainer",
                                 lambda b: replace(b, rollout_logp=b.trainer_logp, trainer_logp=b.rollout_logp)),
    # the chain (docs/chain.md): a third side says which link carries the fault (tests/test_chain.py checks the link)
    "chain_sampler": ("top_p_0.9", "the engine's re-score (recompute) agrees with the trainer: the sampler's top-p "
                      "renormalisation is the rollout → recompute link", "systematic", ["processed_logprobs", "chain_link"],
                      None, lambda b: replace(b, sides={"recompute": b.trainer_logp.copy()})),
    "chain_engine": ("weights_perturbed", "the engine's re-score agrees with the sampler: the recompute → trainer link",
                     "systematic", ["one_side_broken", "chain_link"], "trainer",
                     lambda b: replace(b, sides={"recompute": b.rollout_logp.copy()})),
    "chain_train": ("identical", "rollout = trainer; the training forward alone moves (2e-3 nats of noise): the "
                    "trainer → train link, said as info", "identical", [], None, _train_forward_noise),
}


def named_side(findings: list[dict]) -> str | None:
    """The side at fault that the first finding able to tell says (its `side`, when not undetermined)."""
    for f in findings:
        side = (f.get("side") or {}).get("side")
        if side in ("rollout", "trainer"):
            return side
    return None


def consequence_cell(findings: list[dict]) -> str:
    """The leading systematic finding's severity and what it does on the batch: tokens PPO clips and the 2× cap
    touches because of it, the per-token bias, the sequence-level weight at the p90 length."""
    lead = next((f for f in findings if f.get("consequence") and f["severity"] != "info"), None)
    if lead is None:
        return ""
    c = lead["consequence"]
    return (f"{lead['severity']}: clip {pct(c['ppo_clip_share'], 2)}, 2× {pct(c['outside_cap_share'], 2)}, bias "
            f"{fmt(c['bias'], 2)}, w₉₀ {fmt(c['seq_weight_p90'], 2)}")


def _row(name: str, batch: StepBatch, regime: str, expected: list[str], side: str | None, case: dict) -> dict:
    d = analyze(batch).diagnosis
    return {"case": name, "expected_regime": regime, "regime": d["regime"], "expected_findings": expected,
            "findings": {f["id"]: f["severity"] for f in d["findings"]}, "expected_side": side,
            "side": named_side(d["findings"]), "consequence": consequence_cell(d["findings"]), "verdict": d["verdict"], **case}


def evaluate(data: Path = DEFAULT_DATA) -> list[dict]:
    """One row per fixture and per fault derived from one: expected regime/findings/side, and what the diagnosis said."""
    manifest = json.loads((data / "manifest.json").read_text())
    rows = [_row(name, load(data / case["file"]), case["regime"], case["findings"], SIDES.get(name),
                 {"tokens": case["tokens"], "sequences": case["sequences"]})
            for name, case in manifest["cases"].items()]
    for name, (source, _what, regime, expected, side, change) in DERIVED.items():
        batch = change(load(data / manifest["cases"][source]["file"]))
        rows.append(_row(name, batch, regime, expected, side, {"tokens": batch.n_tokens, "sequences": batch.n_seqs,
                                                                  "derived_from": source}))
    return rows


def false_alarms(steps: int = STEADY_STEPS, seed: int = 20) -> dict[str, int]:
    """How many steps of a steady synthetic run (2-48 sequences a step, fp16- to bf16-sized noise in turn) each
    finding fires on at warn or error: none is injected, so every one is a false alarm."""
    counts = dict.fromkeys(FINDINGS, 0)
    for b in make_run(steps, n_seqs=(2, 48), mean_len=48, noise=lambda s: (0.002, 0.01, 0.03)[s % 3], wobble=0.5,
                      seed=seed):
        for f in analyze(b).diagnosis["findings"]:
            counts[f["id"]] += f["severity"] in ("warn", "error")
    return counts


def markdown(rows: list[dict], details: bool = True, alarms: dict[str, int] | None = None) -> str:
    out = ["Regime (rows: injected truth, columns: diagnosed):", "",
           "| expected \\ diagnosed | " + " | ".join(REGIMES) + " |", "|---|" + "---|" * len(REGIMES)]
    for exp in REGIMES:
        counts = [sum(1 for r in rows if r["expected_regime"] == exp and r["regime"] == got) for got in REGIMES]
        if sum(counts):
            out.append(f"| {exp} | " + " | ".join(str(c) for c in counts) + " |")
    ids = [i for i in tuple(FINDINGS)]
    out += ["", "Findings (rows: fixture, then the faults derived from one by changing its arrays; cells: severity of "
            "each finding that fired; ✔ = expected and fired, ✘ = expected and missing; the side at fault is the one "
            "the first finding able to tell names, ✘ (expected) where it names the other; severity by consequence: the "
            "leading systematic finding's severity, the share of tokens PPO clips and the 2× cap touches because of it, "
            "its per-token bias in nats and the sequence-level weight exp(bias × p90 length)):", "",
            "| fixture | tokens | expected regime | diagnosed | side at fault named | severity by consequence | "
            + " | ".join(f"`{i}`" for i in ids) + " |",
            "|---|---:|---|---|---|---|" + "---|" * len(ids)]
    for r in rows:
        cells = []
        for i in ids:
            sev = r["findings"].get(i)
            if i in r["expected_findings"]:
                cells.append(f"✔ {sev}" if sev else "✘")
            else:
                cells.append(sev or "")
        mark = "" if r["regime"] == r["expected_regime"] else " ✘"
        side = (f"{r['side'] or '—'}" + ("" if r["side"] == r["expected_side"] else f" ✘ ({r['expected_side']})")
                if r["expected_side"] or r["side"] else "")
        name = f"{r['case']} (from {r['derived_from']})" if r.get("derived_from") else r["case"]
        out.append(f"| {name} | {r['tokens']} | {r['expected_regime']} | {r['regime']}{mark} | {side} | {r['consequence']} | "
                   + " | ".join(cells) + " |")
    alarms = alarms if alarms is not None else false_alarms()
    out += ["", "Per detector (warn or error counts as fired; info findings are context, not alarms). The last column "
            f"is measured on a steady synthetic run of {STEADY_STEPS} steps (`false_alarms()`: 2-48 sequences a step, "
            "fp16- to bf16-sized noise in turn), where nothing is injected:", "",
            "| finding | expected and fired | expected, missed | fired, not injected | fired on clean cases | "
            f"false alarms in {STEADY_STEPS} steady steps |",
            "|---|---:|---:|---:|---:|---:|"]
    clean = {"identical", "numerical_noise"}
    for i in ids:
        alarm = [r for r in rows if r["findings"].get(i) in ("warn", "error")]
        exp = [r for r in rows if i in r["expected_findings"]]
        hit = sum(1 for r in exp if i in r["findings"])
        other = sum(1 for r in alarm if i not in r["expected_findings"])
        on_clean = sum(1 for r in alarm if r["expected_regime"] in clean)
        out.append(f"| `{i}` | {hit} | {len(exp) - hit} | {other} | {on_clean} | {alarms[i]} |")
    if details:
        out += ["", "Verdicts:", ""] + [f"- **{r['case']}**: {r['verdict']}" for r in rows]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--details", action="store_true", help="also list each fixture's verdict")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--update-doc", action="store_true", help=f"rewrite the matrix in {DOC.relative_to(ROOT)}")
    ap.add_argument("--check-doc", action="store_true", help=f"exit 1 when {DOC.relative_to(ROOT)} shows another matrix")
    args = ap.parse_args()
    rows = evaluate(args.data)
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    if not (args.update_doc or args.check_doc):
        sys.stdout.write(markdown(rows, args.details))
        return
    doc = DOC.read_text()
    head, rest = doc.split(START, 1)
    shown, tail = rest.split(END, 1)
    if args.check_doc:
        if shown != markdown(rows, details=False):
            sys.exit(f"{DOC.relative_to(ROOT)} is stale: run python scripts/diagnosis_matrix.py --update-doc")
        return
    DOC.write_text(head + START + markdown(rows, details=False) + END + tail)
    print(f"updated {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

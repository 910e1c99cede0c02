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
from pathlib import Path

from tim_report.analysis import analyze
from tim_report.catalogue.findings import FINDINGS, REGIMES
from tim_report.io import load

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_DATA = ROOT / "tests" / "data" / "faults"
DOC = ROOT / "docs" / "diagnosis.md"
START, END = "<!-- MATRIX:START (python scripts/diagnosis_matrix.py) -->\n", "<!-- MATRIX:END -->"


def evaluate(data: Path = DEFAULT_DATA) -> list[dict]:
    """One row per fixture: expected regime/findings, and what the diagnosis said."""
    manifest = json.loads((data / "manifest.json").read_text())
    rows = []
    for name, case in manifest["cases"].items():
        d = analyze(load(data / case["file"])).diagnosis
        fired = {f["id"]: f["severity"] for f in d["findings"]}
        rows.append({"case": name, "expected_regime": case["regime"], "regime": d["regime"],
                     "expected_findings": case["findings"], "findings": fired, "verdict": d["verdict"],
                     "tokens": case["tokens"], "sequences": case["sequences"]})
    return rows


def markdown(rows: list[dict], details: bool = True) -> str:
    out = ["Regime (rows: injected truth, columns: diagnosed):", "",
           "| expected \\ diagnosed | " + " | ".join(REGIMES) + " |", "|---|" + "---|" * len(REGIMES)]
    for exp in REGIMES:
        counts = [sum(1 for r in rows if r["expected_regime"] == exp and r["regime"] == got) for got in REGIMES]
        if sum(counts):
            out.append(f"| {exp} | " + " | ".join(str(c) for c in counts) + " |")
    ids = [i for i in tuple(FINDINGS)]
    out += ["", "Findings (rows: fixture; cells: severity of each finding that fired; ✔ = expected and fired, "
            "✘ = expected and missing):", "",
            "| fixture | tokens | expected regime | diagnosed | " + " | ".join(f"`{i}`" for i in ids) + " |",
            "|---|---:|---|---|" + "---|" * len(ids)]
    for r in rows:
        cells = []
        for i in ids:
            sev = r["findings"].get(i)
            if i in r["expected_findings"]:
                cells.append(f"✔ {sev}" if sev else "✘")
            else:
                cells.append(sev or "")
        mark = "" if r["regime"] == r["expected_regime"] else " ✘"
        out.append(f"| {r['case']} | {r['tokens']} | {r['expected_regime']} | {r['regime']}{mark} | " + " | ".join(cells) + " |")
    out += ["", "Per detector (warn or error counts as fired; info findings are context, not alarms):", "",
            "| finding | expected and fired | expected, missed | fired, not injected | fired on clean cases |",
            "|---|---:|---:|---:|---:|"]
    clean = {"identical", "numerical_noise"}
    for i in ids:
        alarm = [r for r in rows if r["findings"].get(i) in ("warn", "error")]
        exp = [r for r in rows if i in r["expected_findings"]]
        hit = sum(1 for r in exp if i in r["findings"])
        other = sum(1 for r in alarm if i not in r["expected_findings"])
        on_clean = sum(1 for r in alarm if r["expected_regime"] in clean)
        out.append(f"| `{i}` | {hit} | {len(exp) - hit} | {other} | {on_clean} |")
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

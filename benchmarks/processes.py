"""A command timed as a process, as every benchmark that compares whole commands measures it."""

from __future__ import annotations

import os
import subprocess
import time


def timed(argv: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system, with the worker processes it waited for: what other jobs on a shared
    machine do not inflate; Ray's workers are not its children, so not counted) and the peak RSS of the largest
    process of its tree (bytes) of one run of a command; an exit status outside `ok` stops the benchmark."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) not in ok:
        raise SystemExit(f"{argv}: failed: {err[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024

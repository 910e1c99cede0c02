"""The shapes of a run's mismatch over its steps that users report, each measured here and named in catalogue/run_words.py.

    level_jump        a step at least RUN_JUMP_RATIO× the level before it, where the level stays for more than
                      RUN_SPIKE_MAX_STEPS steps (or to the end): an export or weight-format change. Two steps suffice,
                      so a run too short for change points still says it.
    resume_spikes     one to RUN_SPIKE_MAX_STEPS steps that far above the level around them, which then returns (at
                      the start of a run too, read against the steps after): the first steps after a resume.
    growing_mismatch  a rise along a line (in logs) by RUN_GROWTH_MIN_RATIO× or more over RUN_GROWTH_MIN_STEPS steps or
                      more, fitting better than any single jump, up to a drop back (a restart) or the last step: a stale
                      prefix or KV cache.

The level of a step is its median |δ|, compared in logs; a move must stand out of the noise by RUN_FINDING_Z
standard errors, the larger of the run's robust step-to-step scatter and the steps' sampling errors (config/).
"""

from __future__ import annotations

import math

import numpy as np

from ..config import (
    CHANGE_POINT_MIN_SIZE,
    RUN_FINDING_Z,
    RUN_GROWTH_MIN_RATIO,
    RUN_GROWTH_MIN_STEPS,
    RUN_JUMP_RATIO,
    RUN_MEDIAN_LOG_SE,
    RUN_SPIKE_MAX_STEPS,
)

BASELINE = 3  # steps a level is read from, before a jump or around a spike


class Levels:
    """log median |δ| per step (steps sorted), with each step's sampling error and the run's own scatter."""

    def __init__(self, steps: list, median: np.ndarray, tokens: np.ndarray):
        self.steps, self.log = steps, np.log(median)
        self.se = RUN_MEDIAN_LOG_SE / np.sqrt(np.maximum(tokens, 1.0))
        d = np.diff(self.log)
        robust = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2) if len(d) >= 2 * CHANGE_POINT_MIN_SIZE else 0.0
        self.scatter = robust

    def __len__(self) -> int:
        return len(self.log)

    def stands_out(self, rise: float, i: int, j: int, ratio: float = RUN_JUMP_RATIO) -> bool:
        """A rise (in logs) from step j's level to step i's is at least `ratio` and RUN_FINDING_Z standard errors."""
        noise = math.sqrt(self.scatter**2 + float(self.se[i]) ** 2 + float(self.se[j]) ** 2)
        return rise >= math.log(ratio) and rise >= RUN_FINDING_Z * noise

    def level(self, a: int, b: int) -> float:
        """The median level of steps [a, b), in logs."""
        return float(np.median(self.log[max(a, 0):b]))


def run_shapes(steps: list, median: list[float | None], tokens: list[float | None]) -> list[tuple[str, dict]]:
    """(finding id, evidence) for every shape found; `median` is each step's median |δ| (None where unknown)."""
    keep = [i for i, m in enumerate(median) if m is not None and m > 0]
    if len(keep) < 2:
        return []
    lv = Levels([steps[i] for i in keep], np.array([median[i] for i in keep], dtype=np.float64),
                np.array([tokens[i] or 0 for i in keep], dtype=np.float64))
    jumps, spikes = _excursions(lv)
    out: list[tuple[str, dict]] = [("level_jump", j) for j in jumps]
    if spikes:
        out.append(("resume_spikes", _spike_evidence(lv, spikes)))
    out += [("growing_mismatch", g) for g in _growth(lv, {j["index"] for j in jumps})]
    return out


def _excursions(lv: Levels) -> tuple[list[dict], list[tuple[int, int, float]]]:
    """Jumps (a rise that stays) and spikes (one that comes back within RUN_SPIKE_MAX_STEPS steps), left to right."""
    jumps, spikes = [], []
    i = 1
    start = _spike_at_start(lv)
    if start:
        spikes.append(start)
        i = start[1] + 1
    n = len(lv)
    while i < n:
        base = lv.level(i - BASELINE, i)
        rise = float(lv.log[i]) - base
        if not (lv.stands_out(rise, i, i - 1) and lv.stands_out(float(lv.log[i] - lv.log[i - 1]), i, i - 1)):
            i += 1
            continue
        half = base + rise / 2
        end = next((j for j in range(i + 1, n) if lv.log[j] < half), n)  # back below half the rise (in logs)
        if end < n and end - i <= RUN_SPIKE_MAX_STEPS:
            spikes.append((i, end, base))
        else:
            after = lv.level(i, min(end, i + BASELINE))
            jumps.append({"index": i, "step": lv.steps[i], "previous_step": lv.steps[i - 1], "before": math.exp(base),
                          "after": math.exp(after), "ratio": math.exp(after - base),
                          "back_step": lv.steps[end] if end < n else None})
        i = max(end, i + 1)
    return jumps, spikes


def _spike_at_start(lv: Levels) -> tuple[int, int, float] | None:
    """The first 1..RUN_SPIKE_MAX_STEPS steps far above the level of the steps after them (a run that begins with a
    resume), the longest such stretch; None when the run does not begin so."""
    for h in range(RUN_SPIKE_MAX_STEPS, 0, -1):
        if len(lv) < h + 2:
            continue
        base = lv.level(h, h + BASELINE)
        low = float(lv.log[:h].min())
        if all(lv.stands_out(float(lv.log[k]) - base, k, h) for k in range(h)) and lv.log[h] < base + (low - base) / 2:
            return 0, h, base
    return None


def _spike_evidence(lv: Levels, spikes: list[tuple[int, int, float]]) -> dict:
    peak = max(spikes, key=lambda s: float(lv.log[s[0]:s[1]].max()) - s[2])
    a, b, base = peak
    top = float(lv.log[a:b].max())
    return {"episodes": [[lv.steps[s], lv.steps[e - 1]] for s, e, _ in spikes], "before": math.exp(base),
            "peak": math.exp(top), "ratio": math.exp(top - base)}


def _growth(lv: Levels, jump_at: set[int]) -> list[dict]:
    """Stretches that rise along a line, each up to a drop of at least RUN_GROWTH_MIN_RATIO× (a restart), a jump or the
    end."""
    n, out = len(lv), []
    drops = [i for i in range(1, n) if lv.stands_out(float(lv.log[i - 1] - lv.log[i]), i, i - 1, RUN_GROWTH_MIN_RATIO)]
    bounds = sorted({0, *drops, *jump_at, n})  # growth is between restarts, and a jump is not growth
    for a, e in zip(bounds[:-1], bounds[1:]):
        first = next((s for s in range(a, e - RUN_GROWTH_MIN_STEPS + 1) if _rises(lv, s, e)), None)
        if first is None:
            continue
        fit = np.polyfit(np.arange(first, e), lv.log[first:e], 1)
        start, peak = float(np.polyval(fit, first)), float(np.polyval(fit, e - 1))
        restart = e if e < n and e not in jump_at else None
        out.append({"first_step": lv.steps[first], "last_step": lv.steps[e - 1], "before": math.exp(start),
                    "peak": math.exp(peak), "ratio": math.exp(peak - start),
                    "restart_step": lv.steps[restart] if restart is not None else None,
                    "after": math.exp(lv.level(e, e + BASELINE)) if restart is not None else None})
    return out


def _rises(lv: Levels, a: int, e: int) -> bool:
    """Steps [a, e) rise along a line: a slope RUN_FINDING_Z standard errors above 0, a fitted rise of at least
    RUN_GROWTH_MIN_RATIO×, and a line that fits better than two flat levels split anywhere."""
    y = lv.log[a:e]
    m = len(y)
    x = np.arange(m, dtype=np.float64) - (m - 1) / 2
    sxx = float(x @ x)
    slope = float(x @ (y - y.mean())) / sxx
    resid = y - y.mean() - slope * x
    sse_line = float(resid @ resid)
    if slope * (m - 1) < math.log(RUN_GROWTH_MIN_RATIO):
        return False
    noise = math.sqrt(max(sse_line / (m - 2), float(np.mean(lv.se[a:e] ** 2))) / sxx)
    if slope < RUN_FINDING_Z * noise:
        return False
    c, c2 = np.cumsum(y), np.cumsum(y * y)
    k = np.arange(1, m)
    left = c2[k - 1] - c[k - 1] ** 2 / k
    right = (c2[-1] - c2[k - 1]) - (c[-1] - c[k - 1]) ** 2 / (m - k)
    return sse_line < float((left + right).min())

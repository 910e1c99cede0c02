"""A run's steps read lag by lag (design §12, docs/staleness.md): pure functions over index rows, shared by the index
(its rows and run verdict), `watch`'s alarms and `check --history`, so the three never disagree.

Staleness at the size the lag knob allows is not news; what is news is an engine that does not hold the weights its
tokens are labelled with. Each lag is read against its own kind, the run's own history of the same lag:

- lag 0 (the tokens the engine says it sampled with the trainer's own weights) against the run's lag-0 floor, the
  median of the earlier steps' lag-0 KL k3: beyond it, a sync skipped, applied late or rounded away;
- a lag L ≥ 1 against the earlier steps' KL k3 at that same lag (`lag_moved`): a sync that stopped makes the tokens
  labelled L steps old come from ever older weights, so their KL climbs past what the run's own lag-L steps showed
  (a clean one-step-off run stays within: its KL moves with the policy's speed, by tens of percent to a few times);
- the growth of one lag's KL over the whole run (`never_delivered`): an engine that never took an update samples from
  the first weights at every step, so the KL at a fixed lag grows with the steps since the run began and does not level
  off, where a learning-rate warm-up's grows and then levels off. With the learning rate in each step's meta (`lr`),
  each KL is read per unit of lr² (a step of Adam moves the policy by about lr, its KL by about lr²), which takes a
  warm-up out whether or not it has ended.

The history of a lag is its earlier steps that were not themselves beyond it: an event's own steps never raise the
bar they are held to. Readings are a step's, keyed by its run id; `read_run` walks the steps in order, so a step's
reading depends only on the steps before it (what `watch` saw when the step arrived) except `never_delivered`, which is
the run's (its first step is where the growth became certain).
"""

from __future__ import annotations

import math
import statistics

from ...config import (
    FLOOR_Z,
    HISTORY_MARGIN,
    HISTORY_MIN_STEPS,
    HISTORY_WINDOW,
    LAG_HISTORY_MARGIN,
    LAG_HISTORY_MIN_STEPS,
    LAG_JUMP,
    LAG_SUSTAINED,
    NEVER_GROWTH,
    NEVER_MIN_STEPS,
    NEVER_TOTAL,
    RISE_KEEP,
    DiagnosisThresholds,
)
from ..history import describe

MIN_TOKENS = DiagnosisThresholds().min_tokens  # the diagnosis's: fewer tokens than this at a lag judge nothing there


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def lag_key(row: dict | None) -> tuple | None:
    """The lags a step's tokens carry (sorted; "unknown" last), or None for a step that names no version."""
    mix = (row or {}).get("lag_mix") or {}
    if not mix:
        return None
    known = sorted(int(k) for k in mix if k != "unknown")
    return (*known, *(["unknown"] if "unknown" in mix else []))


def same_lag(row: dict, rows: list[dict]) -> list[dict]:
    """The rows a step's whole-batch band is computed from: every row when the step names no version, else those of its
    lag mix."""
    key = lag_key(row)
    return rows if key is None else [r for r in rows if lag_key(r) == key]


def lag_changed(row: dict | None, rows: list[dict]) -> bool:
    """The step's lag mix differs from the step before it (a level change that comes with it is staleness)."""
    if row is None or row.get("step") is None:
        return False
    before = [r for r in rows if r.get("step") is not None and r["step"] < row["step"]]
    if not before:
        return False
    return lag_key(max(before, key=lambda r: r["step"])) != lag_key(row)


def has_lag(row: dict) -> bool:
    """The step carries tokens of a known lag ≥ 1: its whole-batch numbers hold the lag's mismatch, so it is read lag by
    lag here, not held to a band of whole-batch numbers."""
    return any(k.isdigit() and k != "0" for k in (row.get("lag_mix") or {}))


def lag_tokens(row: dict, lag: int) -> float:
    share, tokens = _num((row.get("lag_mix") or {}).get(str(lag))), _num(row.get("tokens"))
    return (share or 0.0) * (tokens or 0.0)


def lag_kl(row: dict | None, lag: int) -> float | None:
    """The step's KL k3 at `lag` (None without at least MIN_TOKENS tokens there)."""
    if row is None or lag_tokens(row, lag) < MIN_TOKENS:
        return None
    return _num((row.get("lag_kl_k3") or {}).get(str(lag)))


def lag_se(row: dict, lag: int) -> float:
    se = _num((row.get("lag_kl_k3_se") or {}).get(str(lag)))
    if se is None and lag == 0:
        se = _num(row.get("floor_kl_k3_se"))  # rows cached before per-lag standard errors
    return se or 0.0


def floor_kl(row: dict | None) -> float | None:
    """The step's lag-0 KL k3 (None without lag-0 tokens)."""
    return _num(((row or {}).get("lag_kl_k3") or {}).get("0"))


def _series(stepped: list[dict]) -> dict[int, dict[str, float]]:
    """Per lag, each step's (run id →) value the lag is judged by: its KL k3, or per unit of lr² when every step of that
    lag ≥ 1 gives a learning rate (meta `lr`): a step of Adam moves the policy by about lr, its KL by about lr², so a
    warm-up leaves the per-lr² KL flat."""
    out: dict[int, dict[str, float]] = {}
    raw: dict[int, list[tuple[dict, float]]] = {}
    for row in stepped:
        for k in row.get("lag_mix") or {}:
            if k.isdigit() and (v := lag_kl(row, int(k))) is not None:
                raw.setdefault(int(k), []).append((row, v))
    for lag, points in raw.items():
        per_lr = lag >= 1 and all(_num(r.get("lr")) for r, _ in points)
        out[lag] = {r["id"]: v / (_num(r.get("lr")) or 1.0) ** 2 if per_lr else v for r, v in points}
    return out


class _Lag:
    """One lag's history as the run walks its steps: the clean steps it is judged against, the step before's value, its
    first rise (a warm-up, or an engine that never took an update, since the run began), a climb away from the clean
    level in progress (its steps held out of the history), and the first step of an open event."""

    def __init__(self, lag: int) -> None:
        self.lag = lag
        self.clean: list[tuple[dict, float]] = []
        self.last: float | None = None
        self.rise: _Climb | None = _Climb() if lag >= 1 else None  # until the first rise ends
        self.climb: _Climb | None = None
        self.held: list[tuple[dict, float, dict]] = []  # the steps the climb holds out of the history, with readings
        self.since: float | None = None

    def read(self, row: dict, scaled: float, window: int) -> dict:
        if self.rise is not None and not self.rise.goes_on(scaled):
            self.rise = None
        earlier = self._before(row["step"], window)
        reading = _read(row, self.lag, scaled, earlier, self.rise is not None, self.since is None, self.last)
        self.last = scaled
        status = reading["status"]
        if status == "beyond":
            self.since = self.since if self.since is not None else self.climb.start if self.climb else row["step"]
            for _, _, held in self.held:  # the climb was the event's run-up: its steps are the event's
                held.update(status="beyond", since_step=self.since)
            self.climb, self.held = None, []
            reading["since_step"] = self.since
            return reading
        self.since = None
        if status == "raised" and (self.climb or _Climb(row["step"])).goes_on(scaled):
            self.climb = self.climb or _Climb(row["step"], scaled)
            self.held.append((row, scaled, reading))
            reading["status"], reading["since_step"] = "climbing", self.climb.start
            return reading
        # back within, or a climb that levelled off (the run's new speed): its steps join the history
        self.clean += [(r, v) for r, v, _ in self.held]
        self.climb, self.held = None, []
        self.clean.append((row, scaled))
        reading["status"] = "within" if status == "raised" else status
        return reading


    def _before(self, step: float, window: int) -> list[tuple[dict, float]]:
        """The last `window` clean steps before `step`: the history is in step order (steps are read in order, a climb's
        held steps join it before the step that ends the climb), so only the rows of this same step sit after them."""
        out: list[tuple[dict, float]] = []
        for p in reversed(self.clean):
            if len(out) == window:
                break
            if p[0]["step"] < step:
                out.append(p)
        return out[::-1]


class _Climb:
    """A climb goes on while its steps set new highs: one step below the high (but at least RISE_KEEP of it) is noise,
    two in a row end it (a flat series, whatever its noise, sets new highs ever more rarely)."""

    def __init__(self, start: float | None = None, first: float | None = None) -> None:
        self.start, self.high, self.missed = start, first, False

    def goes_on(self, value: float) -> bool:
        if self.high is None or value > self.high:
            self.high, self.missed = value, False
            return True
        if value >= RISE_KEEP * self.high and not self.missed:
            self.missed = True
            return True
        return False


def read_run(rows: list[dict], window: int = HISTORY_WINDOW) -> dict[str, dict]:
    """Each stepped row's lag reading by run id: {"status", "lag", "kl_k3", "kl_k3_se", "reference", "times", "basis",
    "per_lr", "since_step"} for the first of its lags that is beyond its own history (lag 0 first), else its most
    loaded lag. Status:

    - "beyond": the engine does not hold the weights the lag's tokens are labelled with (`_read`);
    - "climbing": above its history and still setting new highs, not yet beyond (held out of the history, so a slow
      onset, as a sync that stops at lag ≥ 2 gives, is judged against the level before it; a climb that levels off is
      the run's new speed, and joins the history);
    - "within", "unjudged" (too few earlier steps of that lag), or "rising" (a lag ≥ 1 in its first rise since the run
      began, its steps setting new highs: a learning-rate warm-up or an engine that never took an update, not judged
      step by step: `never_delivered` reads the run).

    Rows without a known lag get none."""
    stepped = sorted((r for r in rows if r.get("step") is not None), key=lambda r: r["step"])
    series = _series(stepped)
    lags: dict[int, _Lag] = {}
    out: dict[str, dict] = {}
    for row in stepped:
        readings = []
        for lag in sorted(int(k) for k in row.get("lag_mix") or {} if k.isdigit()):
            scaled = series.get(lag, {}).get(row["id"])
            if scaled is not None:
                readings.append(lags.setdefault(lag, _Lag(lag)).read(row, scaled, window))
        if readings:
            beyond = [r for r in readings if r["status"] == "beyond"]
            out[row["id"]] = beyond[0] if beyond else max(readings, key=lambda r: lag_tokens(row, r["lag"]))
    return out


def _read(row: dict, lag: int, scaled: float, earlier: list[tuple[dict, float]], rising: bool, opening: bool,
          previous: float | None) -> dict:
    """One lag of one step (its value `scaled`: the KL k3, or per lr²) against the earlier clean steps of that lag.

    Its value less FLOOR_Z standard errors above (1 + margin) × their median is "raised"; "beyond" when it also opens
    an event at a lag ≥ 1 (its value LAG_JUMP × the step before's: a sync that stops moves the next step a whole lag
    older, at lag 1 some 3-4×, where a clean run's speed drifts by tens of percent a step; or, less its noise,
    LAG_SUSTAINED × the median: an onset that came slowly, as at lag ≥ 2, where one lag older is less than 2×),
    continues an open event, or is at lag 0 (the floor has no speed of its own to drift with)."""
    value, se = lag_kl(row, lag) or 0.0, lag_se(row, lag)
    reading = {"status": "unjudged", "lag": lag, "kl_k3": value, "kl_k3_se": se, "reference": None,
               "times": None, "basis": describe([r for r, _ in earlier]) if earlier else "no earlier step",
               "per_lr": lag >= 1 and scaled != value}
    if len(earlier) < (HISTORY_MIN_STEPS if lag == 0 else LAG_HISTORY_MIN_STEPS):
        return reading
    ref = statistics.median(v for _, v in earlier)
    unit = scaled / value if value > 0 else 1.0  # the value's scale: 1, or 1 / lr²
    reading.update(reference=ref / unit, times=scaled / ref if ref > 0 else None)
    if rising:
        reading["status"] = "rising"
        return reading
    low = scaled - FLOOR_Z * se * unit  # the value less its noise
    if not low > (1 + (HISTORY_MARGIN if lag == 0 else LAG_HISTORY_MARGIN)) * ref:
        reading["status"] = "within"
    elif lag == 0 or not opening or low > LAG_SUSTAINED * ref or (previous is not None and scaled > LAG_JUMP * previous):
        reading["status"] = "beyond"
    else:
        reading["status"] = "raised"
    return reading


def never_delivered(rows: list[dict], readings: dict[str, dict] | None = None) -> dict | None:
    """The run-level evidence of an engine that never took an update: for the lag most steps carry, over its steps in
    order (at least NEVER_MIN_STEPS), the median KL k3 (per lr² where given) of each third of them at least NEVER_GROWTH
    times the third's before and the last NEVER_TOTAL times the first: the KL at a fixed lag grows from the run's start
    to its latest steps without levelling off. A run where that lag went beyond its own history at some step
    (`read_run`: a sync that stopped there) is that event's, not this one's. None otherwise."""
    readings = read_run(rows) if readings is None else readings
    stepped = sorted((r for r in rows if r.get("step") is not None and has_lag(r)), key=lambda r: r["step"])
    counts: dict[int, int] = {}
    for r in stepped:
        for k in r.get("lag_mix") or {}:
            if k.isdigit() and k != "0" and lag_kl(r, int(k)) is not None:
                counts[int(k)] = counts.get(int(k), 0) + 1
    if not counts:
        return None
    lag = max(counts, key=lambda k: (counts[k], -k))
    values = _series(stepped).get(lag, {})
    points = [(r["step"], values[r["id"]], lag_kl(r, lag)) for r in stepped if r["id"] in values]
    if len(points) < NEVER_MIN_STEPS or any((readings.get(r["id"]) or {}).get("status") == "beyond" for r in stepped):
        return None
    third = len(points) // 3
    parts = [points[:third], points[third:len(points) - third], points[len(points) - third:]]
    meds = [statistics.median(p[1] for p in part) for part in parts]
    if not all(b >= NEVER_GROWTH * a > 0 for a, b in zip(meds, meds[1:])) or meds[2] < NEVER_TOTAL * meds[0]:
        return None
    return {"lag": lag, "first_step": points[0][0], "last_step": points[-1][0], "steps": len(points),
            "first_kl_k3": points[0][2], "last_kl_k3": points[-1][2], "thirds": meds,
            "growth": meds[2] / meds[0], "per_lr": points[0][1] != points[0][2], "threshold": NEVER_GROWTH}


def lag_scalars(lag_kl_k3: dict, share: object, prefix: str = "tim/") -> dict[str, float]:
    """What a logger gets of a step's lags (`Report.scalars()`, `watch --log-to`, `export --tensorboard`):
    `tim/kl_k3_lag_<lag>` for each lag ("unknown" included) and `tim/staleness_share`, finite values only."""
    out = {f"{prefix}kl_k3_lag_{lag}": v for lag, v in ((lag, _num(v)) for lag, v in (lag_kl_k3 or {}).items())
           if v is not None}
    if (s := _num(share)) is not None:
        out[f"{prefix}staleness_share"] = s
    return out

"""A run's steps read lag by lag (design §12, docs/staleness.md): pure functions over index rows, shared by the index
(its rows and run verdict), `watch`'s alarms and `check --history`, so the three never disagree.

Staleness at the size the lag knob allows is not news; what is news is an engine that does not hold the weights its
tokens are labelled with. Each lag is read against its own kind, the run's own history of the same lag:

- lag 0 (the tokens the engine says it sampled with the trainer's own weights) against the run's lag-0 floor, the
  median of the earlier steps' lag-0 KL k3: beyond it, a sync skipped, applied late or rounded away;
- a lag L ≥ 1 against the earlier steps' KL k3 at that same lag (`read_run`): a sync that stopped makes the tokens
  labelled L steps old come from ever older weights, so their KL climbs past what the run's own lag-L steps showed
  (a clean one-step-off run stays within: its KL moves with the policy's speed, by tens of percent to a few times);
- the growth of one lag's KL over the whole run (`never_delivered`): an engine that never took an update samples from
  the first weights at every step, so the KL at a fixed lag grows with the steps since the run began and does not level
  off, where a learning-rate warm-up's grows and then levels off. With the learning rate in each step's meta (`lr`),
  each KL is read per unit of lr² (a step of Adam moves the policy by about lr, its KL by about lr²), which takes a
  warm-up out whether or not it has ended.

The history of a lag is its earlier steps that were neither beyond it nor climbing away from it: an event's own steps
never raise the bar they are held to. Readings are a step's, keyed by its run id; `read_run` walks the steps in order, so a step's
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
    LR_STEP_MAX,
    NEVER_GROWTH,
    NEVER_MIN_STEPS,
    NEVER_TOTAL,
    RISE_KEEP,
    DiagnosisThresholds,
)
from ...model import learning_rate, version_int
from ..history import describe

MIN_TOKENS = DiagnosisThresholds().min_tokens  # the diagnosis's: fewer tokens than this at a lag judge nothing there


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _lag(k: object) -> int | None:
    """A lag ≥ 0 named by a row's key ("0", "1", …), else None (negative, "unknown", or not a lag)."""
    lag = version_int(k)
    return lag if lag is not None and lag >= 0 else None


def lag_key(row: dict | None) -> tuple | None:
    """The lags a step's tokens carry (sorted; "unknown" last), or None for a step that names no version."""
    mix = (row or {}).get("lag_mix") or {}
    if not mix:
        return None
    known = sorted(x for x in (version_int(k) for k in mix if k != "unknown") if x is not None)
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
    return any((_lag(k) or 0) >= 1 for k in (row.get("lag_mix") or {}))


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


def _series(stepped: list[dict]) -> dict[int, dict[str, float]]:
    """Per lag, each step's (run id →) value the lag is judged by: its KL k3, or per unit of lr² when every step of that
    lag ≥ 1 gives a learning rate (meta `lr`) and it moves smoothly (`_smooth`): a step of Adam moves the policy by
    about lr, its KL by about lr², so a warm-up leaves the per-lr² KL flat."""
    out: dict[int, dict[str, float]] = {}
    raw: dict[int, list[tuple[dict, float]]] = {}
    for row in stepped:
        for lag in (_lag(k) for k in row.get("lag_mix") or {}):
            if lag is not None and (v := lag_kl(row, lag)) is not None:
                raw.setdefault(lag, []).append((row, v))
    for lag, points in raw.items():
        lrs = [learning_rate(r.get("lr")) for r, _ in points]
        per_lr = lag >= 1 and _smooth(lrs)
        out[lag] = {r["id"]: v / (lr or 1.0) ** 2 if per_lr else v for (r, v), lr in zip(points, lrs)}
    return out


def _smooth(lrs: list[float | None]) -> bool:
    """Every step gives its lr, and none moves it more than LR_STEP_MAX× from the step before (config.LR_STEP_MAX: a
    step schedule's drop moves the lr at once and the lag's KL steps later, so per lr² it would read as a fault)."""
    known = [x for x in lrs if x is not None]
    return len(known) == len(lrs) and all(b <= LR_STEP_MAX * a and a <= LR_STEP_MAX * b for a, b in zip(known, known[1:]))


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
        self.kept: int | None = None  # the version an engine that stopped at the event's first step would hold

    def read(self, row: dict, scaled: float, window: int) -> dict:
        if self.rise is not None and not self.rise.goes_on(scaled):
            self.rise = None
        # the rows come in step order: only rows of this same step (several runs at one step) can be at the end
        end = len(self.clean)
        while end and self.clean[end - 1][0]["step"] >= row["step"]:
            end -= 1
        earlier = self.clean[max(0, end - window):end]
        reading = _read(row, self.lag, scaled, earlier, self.rise is not None, self.since is None, self.last)
        self.last = scaled
        status = reading["status"]
        if status == "noisy":  # above the bar but within its own noise: no evidence that an event ended, nor history
            if self.since is not None:
                reading.update(status="beyond", since_step=self.since, **_versions(row, self.lag, self.kept))
            else:
                reading["status"] = "within"
            return reading
        if status == "beyond":
            if self.since is None:
                first = self.held[0][0] if self.held else row
                self.since, self.kept = first["step"], _version_before(first, self.lag)
            for held_row, _, held in self.held:  # the climb was the event's run-up: its steps are the event's
                held.update(status="beyond", since_step=self.since, **_versions(held_row, self.lag, self.kept))
            self.climb, self.held = None, []
            reading.update(since_step=self.since, **_versions(row, self.lag, self.kept))
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


def _trainer(row: dict) -> int | None:
    """The step's trainer version: an integer version (model.version_int's: at most 18 digits), else None."""
    v = _num(row.get("trainer_version"))
    return version_int(str(int(v))) if v is not None and v == int(v) else None


def _version_before(row: dict, lag: int) -> int | None:
    """The version an engine held before this step's tokens went stale: the one before their label (trainer − lag)."""
    trainer = _trainer(row)
    return trainer - lag - 1 if trainer is not None and trainer - lag - 1 >= 0 else None


def _versions(row: dict, lag: int, kept: int | None) -> dict:
    """The step's tokens' labelled version, and the one an engine that stopped taking updates when the event began
    would hold: what they look like, if the sync stopped there (a rescore with that checkpoint settles it)."""
    trainer = _trainer(row)
    if trainer is None or kept is None:
        return {}
    return {"labelled_version": trainer - lag, "looks_like_version": kept}


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
        for lag in sorted({x for x in map(_lag, row.get("lag_mix") or {}) if x is not None}):
            scaled = series.get(lag, {}).get(row["id"])
            if scaled is not None:
                readings.append(lags.setdefault(lag, _Lag(lag)).read(row, scaled, window))
        if readings:
            beyond = [r for r in readings if r["status"] == "beyond"]
            out[row["id"]] = beyond[0] if beyond else max(readings, key=lambda r: lag_tokens(row, r["lag"]))
    return out


def run_reads(rows: list[dict], window: int = HISTORY_WINDOW) -> tuple[dict[str, dict], dict | None]:
    """Each stepped row's reading as the run reads it (`read_run`), the steps of an engine that never took an update
    ("never": `never_delivered` with each step's lr, an error; without the lr a warm-up may explain it, the run's warn
    only) marked from its first step whose tokens are labelled later than the run's first weights (those the engine kept:
    a step labelled with them was sampled as labelled); and never_delivered's evidence (None when it does not hold). What the index's
    rows (run_index.in_run), `check RUN` and `check --history` read, so they never disagree."""
    readings = read_run(rows, window)
    never = never_delivered(rows, readings)
    if never is not None and never["per_lr"]:
        lag = never["lag"]
        first = next((_trainer(r) for r in rows if r.get("step") == never["first_step"] and _trainer(r) is not None), None)
        honest = None if first is None else first - lag  # the first weights: an engine that kept them holds them
        marked = [r for r in rows if (readings.get(r["id"]) or {}).get("lag") == lag and r.get("step") is not None
                  and r["step"] >= never["first_step"]
                  and not (honest is not None and (t := _trainer(r)) is not None and t - lag <= honest)]
        since = min((r["step"] for r in marked), default=None)
        for r in marked:
            readings[r["id"]] = {**readings[r["id"]], "status": "never", "since_step": since}
    return readings, never


def _read(row: dict, lag: int, scaled: float, earlier: list[tuple[dict, float]], rising: bool, opening: bool,
          previous: float | None) -> dict:
    """One lag of one step (its value `scaled`: the KL k3, or per lr²) against the earlier clean steps of that lag.

    Its value less FLOOR_Z standard errors above (1 + margin) × their median is "raised" (the value above it but not
    less its noise: "noisy", within to the step, but neither added to the history nor ending an event by `_Lag.read`);
    "beyond" when it also opens
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
    if lag >= 1 and not ref > 0:  # no scale to be a multiple of (every earlier step at 0: a recomputed rollout side)
        return reading
    if rising:
        reading["status"] = "rising"
        return reading
    low = scaled - FLOOR_Z * se * unit  # the value less its noise
    bar = (1 + (HISTORY_MARGIN if lag == 0 else LAG_HISTORY_MARGIN)) * ref
    if not low > bar:
        reading["status"] = "noisy" if scaled > bar else "within"
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
        for lag in (_lag(k) for k in r.get("lag_mix") or {}):
            if lag and lag_kl(r, lag) is not None:
                counts[lag] = counts.get(lag, 0) + 1
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

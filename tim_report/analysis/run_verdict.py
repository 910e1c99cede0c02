"""What a run's steps say together: its verdict (which regime, since when, why) and its run-level findings.

Input is the index's rows (run_index.run_row: each step's regime and the ids of its warn / error findings, most severe
first), so a build that reuses cached steps needs nothing else. The latest stretch is where at least
RUN_VERDICT_SHARE of the steps have the last step's regime; its "why" is the finding that leads its steps; the steps
before it are summarised by regime; the run-level findings (analysis/drift.py) follow. Several runs at one step are
read as their worst regime.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from ..catalogue import run_words as words
from ..catalogue import staleness as lag_words
from ..catalogue.findings.lag import STALE
from ..catalogue.numbers import plain
from ..catalogue.verdicts import REGIMES
from ..config import CHANGE_POINT_MIN_SIZE, RUN_VERDICT_SHARE, SEVERITIES
from .drift import run_shapes
from .lag.digests import run_sync_findings, sync_leads
from .lag.history import lag_key, never_delivered


@dataclass(frozen=True)
class State:
    """One step as the verdict reads it: its regime, its lead finding (or None) and the run that shows it."""

    step: int | float
    regime: str
    lead: str | None
    run: str


def step_states(rows: list[dict]) -> list[State]:
    """One state per step, sorted by step: the worst regime of the runs at that step and that run's lead finding (the
    rows as their run reads them: run_index.in_run)."""
    by_step: dict = {}
    for r in rows:
        if r["step"] is None:
            continue
        regime = r.get("regime") or "unknown"
        rank = REGIMES.index(regime) if regime in REGIMES else -1
        if r["step"] not in by_step or rank > by_step[r["step"]][0]:
            by_step[r["step"]] = (rank, State(r["step"], regime, (r.get("findings") or [None])[0], r["id"]))
    return [by_step[s][1] for s in sorted(by_step)]


def leads(states: list[State]) -> list[tuple[str, int]]:
    """The findings that lead these steps, most common first (ties: the order they first appear)."""
    return Counter(s.lead for s in states if s.lead).most_common()


def explaining(states: list[State]) -> tuple[str, int, int] | None:
    """(finding, steps it leads, steps) when one finding leads at least RUN_VERDICT_SHARE of these steps."""
    top = leads(states)
    if not states or not top or top[0][1] < RUN_VERDICT_SHARE * len(states):
        return None
    return top[0][0], top[0][1], len(states)


def run_verdict(rows: list[dict]) -> dict | None:
    """The run's verdict over its stepped rows; None with fewer than two steps."""
    states = step_states(rows)
    if len(states) < 2:
        return None
    current = states[-1].regime
    start = next(i for i in range(len(states)) if states[i].regime == current
                 and sum(s.regime == current for s in states[i:]) >= RUN_VERDICT_SHARE * (len(states) - i))
    stretch, before = states[start:], states[:start]
    same = [s for s in stretch if s.regime == current]
    top = leads(same)
    why = words.stretch_why(current, top, len(same), since_start=start == 0)
    findings = _run_findings(rows, states)
    alarms = [f for f in findings if f["severity"] != "info"]  # said in the verdict; all are listed with it
    sentence = words.run_verdict_sentence(
        current, stretch[0].step, stretch[-1].step, start == 0, (len(same), len(stretch)), why, _earlier(before),
        [(s.step, s.regime) for s in stretch if s.regime != current])
    reading = _lag_evidence(rows, stretch[0].run) if top else []  # the numbers that named the run's lead, if a lag
    climbing = _climbing(rows)
    reading += climbing
    verdict = {"regime": current, "since_step": stretch[0].step, "since_run": stretch[0].run, "steps": len(states),
               "stretch_steps": len(stretch), "lead": top[0][0] if top else None, "climbing": bool(climbing),
               "verdict": " ".join([sentence, *reading] + [f["title"] + "." for f in alarms]),
               "what_to_check": alarms[0]["what_to_check"] if alarms else None, "findings": findings,
               "regimes": dict(Counter(s.regime for s in states))}
    return sync_leads(verdict)  # a sync fault the weight digests show leads (analysis/lag/digests.py)


def _earlier(before: list[State]) -> list[tuple[str, int | float, int | float, int]]:
    """The steps before the latest stretch by regime: (regime, first step, last step, steps), in regime order."""
    out = []
    for regime in (*REGIMES, "unknown"):
        mine = [s for s in before if s.regime == regime]
        if mine:
            out.append((regime, mine[0].step, mine[-1].step, len(mine)))
    return out


def _run_findings(rows: list[dict], states: list[State]) -> list[dict]:
    """The run-level findings, most severe first, each told which step finding explains it, if one does."""
    per_step: dict = {}
    for r in rows:
        if r["step"] is not None and r.get("abs_delta_median") is not None:
            per_step.setdefault(r["step"], []).append((r["abs_delta_median"], r.get("tokens") or 0))
    steps = [s.step for s in states]
    median = [_geomean([m for m, _ in per_step[s]]) if s in per_step else None for s in steps]
    tokens = [float(sum(t for _, t in per_step[s])) if s in per_step else None for s in steps]
    out = []
    never = never_delivered(rows)
    if never is not None:
        out.append(words.make_run_finding("never_delivered", never))
    for id_, evidence in run_shapes(steps, median, tokens):
        context: dict = {}
        if id_ == "level_jump":
            evidence = {k: v for k, v in evidence.items() if k != "index"}
            after = [s for s in states if s.step >= evidence["step"]
                     and (evidence["back_step"] is None or s.step < evidence["back_step"])]
            lead = explaining(after)
            if lead:
                context["explained_by"] = lead[0]
            elif (mix := _lag_mix_change(rows, evidence["previous_step"], evidence["step"])) is not None:
                context["lag_mix"] = mix  # the lag's own mismatch came in with older tokens: staleness, not a fault
        out.append(words.make_run_finding(id_, evidence, **context))
    out += run_sync_findings(rows)
    return sorted(out, key=lambda f: -SEVERITIES.index(f["severity"]))


def _lag_evidence(rows: list[dict], run: str) -> list[str]:
    """The sentence of the stretch's first step when the run named it by its lag (its `lag_reading` beyond its own
    history): 'At step 8, KL k3 at lag 1 0.0286 ± 0.0078 is 10.6× the run's own (…).' ([] otherwise)."""
    row = next((r for r in rows if r["id"] == run), {})
    reading = row.get("lag_reading") or {}
    if reading.get("status") != "beyond" or STALE not in (row.get("findings") or [])[:1]:
        return []  # not beyond, or the step names its own cause (a stale prefix cache, the digests): its words lead
    return [f"At step {plain(row['step'])}, {lag_words.run_reading(reading)}."]


def _climbing(rows: list[dict]) -> list[str]:
    """The note when the last step's lag is climbing above its own history (not named yet, not nothing)."""
    stepped = [r for r in rows if r["step"] is not None]
    last = max(stepped, key=lambda r: r["step"]) if stepped else {}
    reading = last.get("lag_reading") or {}
    return [lag_words.climbing_note(reading)] if reading.get("status") == "climbing" else []


def _lag_mix_change(rows: list[dict], before, after) -> tuple[tuple, tuple] | None:
    """The lags of the steps either side of a jump when they differ (lag_key; None when they do not)."""
    keys = {r["step"]: lag_key(r) for r in rows if r["step"] in (before, after)}
    a, b = keys.get(before), keys.get(after)
    return (a, b) if a is not None and b is not None and a != b else None


def _geomean(xs: list[float]) -> float | None:
    pos = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in pos) / len(pos)) if pos else None


def change_context(run_findings: list[dict], step, steps: list) -> str | None:
    """The run-level finding a change point at `step` belongs to, in words; None when none does. A spike shorter than
    a level still moves the change-point search, up to CHANGE_POINT_MIN_SIZE steps past its start."""
    def index(s) -> int:
        return steps.index(s) if s in steps else -1

    for f in run_findings:
        ev = f["evidence"]
        if f["id"] == "level_jump" and step in (ev["step"], ev["back_step"]):
            return words.run_change("jump" if step == ev["step"] else "undone", f)
        if f["id"] == "growing_mismatch":
            if step == ev["restart_step"]:
                return words.run_change("restart", f)
            if ev["first_step"] <= step <= ev["last_step"]:
                return words.run_change("growth", f)
        if f["id"] == "resume_spikes" and any(
                index(a) <= index(step) <= max(index(b) + 1, index(a) + CHANGE_POINT_MIN_SIZE) for a, b in ev["episodes"]):
            return words.run_change("spike", f)
    return None

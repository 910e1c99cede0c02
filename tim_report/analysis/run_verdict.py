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
from dataclasses import dataclass, replace

from ..catalogue import run_words as words
from ..catalogue.verdicts import REGIMES
from ..config import CHANGE_POINT_MIN_SIZE, RUN_VERDICT_SHARE, SEVERITIES
from .drift import run_shapes
from .lag.digests import run_sync_findings, sync_leads
from .lag.history import lag_only


@dataclass(frozen=True)
class State:
    """One step as the verdict reads it: its regime, its lead finding (or None) and the run that shows it."""

    step: int | float
    regime: str
    lead: str | None
    run: str
    carried: bool = False  # its own regime read lag and numerics together (lag.history.lag_only): the steps' before


def step_states(rows: list[dict]) -> list[State]:
    """One state per step, sorted by step: the worst regime of the runs at that step and that run's lead finding. A
    step whose `elevated` is only its lag (tokens of lag ≥ 1, too few of lag 0 to judge the floor, no finding) takes
    the noise regime of the judged step before it: a change of lag mix is not a change of regime."""
    by_step: dict = {}
    for r in rows:
        if r["step"] is None:
            continue
        regime = r.get("regime") or "unknown"
        rank = REGIMES.index(regime) if regime in REGIMES else -1
        if r["step"] not in by_step or rank > by_step[r["step"]][0]:
            by_step[r["step"]] = (rank, State(r["step"], regime, (r.get("findings") or [None])[0], r["id"]), r)
    out: list[State] = []
    judged: str | None = None  # the regime of the last step that judged its numerics
    for _, state, row in (by_step[s] for s in sorted(by_step)):
        if lag_only(row) and judged in ("identical", "numerical_noise"):
            state = replace(state, regime="numerical_noise", carried=True)
        elif not lag_only(row):
            judged = state.regime
        out.append(state)
    return out


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
    carried = [s.step for s in states if s.carried]
    lag_note = [words.lag_only_note(carried[0], carried[-1], len(carried))] if carried else []
    verdict = {"regime": current, "since_step": stretch[0].step, "since_run": stretch[0].run, "steps": len(states),
               "stretch_steps": len(stretch), "lead": top[0][0] if top else None,
               "verdict": " ".join([sentence, *lag_note] + [f["title"] + "." for f in alarms]),
               "what_to_check": alarms[0]["what_to_check"] if alarms else None, "findings": findings,
               "regimes": dict(Counter(s.regime for s in states)),
               **({"lag_only_steps": carried} if carried else {})}  # read as the steps before them: their lag
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
    for id_, evidence in run_shapes(steps, median, tokens):
        context = {}
        if id_ == "level_jump":
            evidence = {k: v for k, v in evidence.items() if k != "index"}
            after = [s for s in states if s.step >= evidence["step"]
                     and (evidence["back_step"] is None or s.step < evidence["back_step"])]
            lead = explaining(after)
            if lead:
                context["explained_by"] = lead[0]
        out.append(words.make_run_finding(id_, evidence, **context))
    out += run_sync_findings(rows)
    return sorted(out, key=lambda f: -SEVERITIES.index(f["severity"]))


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

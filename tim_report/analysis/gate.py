"""`tim-report check`'s gate: a BatchReport against limits and a severity, as violations (coverage.py's fail-under).

Which metrics a limit can hold and their defaults (verl's documented rollout-correction alerts) are the catalogue's
`gate` entries (catalogue.metrics.GATES).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalogue import metrics as catalogue
from ..catalogue.findings import INPUT_PROBLEM
from ..catalogue.numbers import fixed, fmt, plain
from ..config import SEVERITIES
from ..model import BatchReport


@dataclass(frozen=True)
class Limit:
    metric: str  # key in BatchReport.metrics
    op: str  # "max" (value must be ≤ bound) or "min" (value must be ≥ bound)
    bound: float
    option: str  # CLI option that sets it
    absolute: bool = False  # compare |value|


@dataclass(frozen=True)
class Violation:
    kind: str  # "limit", "history" (the run's own band, analysis/history.py), "exact" or the finding severity
    id: str  # metric or finding id
    message: str  # a limit's or band's message starts with the metric's name

    def line(self, source: str) -> str:
        if self.kind in ("limit", "history", "exact"):
            return f"{source}: {self.kind} {self.message}"
        return f"{source}: {self.kind} {self.id}: {self.message}"


@dataclass
class CheckResult:
    regime: str | None
    violations: list[Violation] = field(default_factory=list)
    summary: str = ""
    input_problem: str | None = None  # the batch cannot be measured (the input-problem finding): exit 2, one line

    @property
    def ok(self) -> bool:
        return not self.violations and self.input_problem is None


def limits(bounds: dict[str, float | None] | None = None) -> list[Limit]:
    """One limit per gated metric: `bounds` (metric key → bound, None = not checked) over the catalogue's defaults."""
    out = []
    for key in catalogue.GATES:
        m = catalogue.metric(key)
        assert m.gate is not None, key  # the GATES view holds gated metrics (a catalogue test checks)
        bound = (bounds or {}).get(key, m.gate.default)
        if bound is not None:
            out.append(Limit(key, "min" if m.worse == "down" else "max", float(bound), m.gate.option, m.gate.absolute))
    return out


def evaluate(report: BatchReport, limits: list[Limit], fail_on: str = "error") -> CheckResult:
    """Violated limits and findings at or above `fail_on` ("info", "warn", "error" or "never")."""
    m = report.metrics
    diag = report.diagnosis or {}
    res = CheckResult(diag.get("regime"))
    unusable = next((f for f in diag.get("findings", []) if f["id"] == INPUT_PROBLEM), None)
    if unusable is not None:  # an input problem, not a verdict: whatever the limits and --fail-on say
        res.input_problem = unusable["title"]
        return res
    for lim in limits:
        value = m.get(lim.metric)
        if value is None:
            res.violations.append(Violation("limit", lim.metric, f"{lim.metric} is not available ({lim.option})"))
            continue
        v = abs(value) if lim.absolute else value
        name = f"|{lim.metric}|" if lim.absolute else lim.metric
        if lim.op == "max" and not v <= lim.bound:
            res.violations.append(Violation("limit", lim.metric, f"{name} = {fmt(v, 4)} > {plain(lim.bound)} ({lim.option})"))
        elif lim.op == "min" and not v >= lim.bound:
            res.violations.append(Violation("limit", lim.metric, f"{name} = {fmt(v, 4)} < {plain(lim.bound)} ({lim.option})"))
    if fail_on != "never":
        level = SEVERITIES.index(fail_on)
        for f in diag.get("findings", []):
            if SEVERITIES.index(f["severity"]) >= level:
                res.violations.append(Violation(f["severity"], f["id"], f["title"]))
    res.summary = f"{diag.get('glance') or res.regime}; " + \
        f"KL k3 {fmt(m.get('kl_k3'))}, ESS {fixed(m.get('ess'), 4)}, {fmt(m.get('tokens'))} tokens"
    return res

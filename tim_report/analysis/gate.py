"""`tim-report check`'s gate: a Report against limits and a severity, as violations (coverage.py's fail-under).

Default limits are verl's documented rollout-correction alerts (config.VERL_ALERTS).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import SEVERITIES, VERL_ALERTS
from ..model import Report


@dataclass(frozen=True)
class Limit:
    metric: str  # key in Report.metrics
    op: str  # "max" (value must be ≤ bound) or "min" (value must be ≥ bound)
    bound: float
    option: str  # CLI option that sets it
    absolute: bool = False  # compare |value|


@dataclass(frozen=True)
class Violation:
    kind: str  # "limit", "history" (the run's own band, analysis/history.py) or the finding severity
    id: str  # metric or finding id
    message: str  # a limit's or band's message starts with the metric's name

    def line(self, source: str) -> str:
        if self.kind in ("limit", "history"):
            return f"{source}: {self.kind} {self.message}"
        return f"{source}: {self.kind} {self.id}: {self.message}"


@dataclass
class CheckResult:
    regime: str | None
    violations: list[Violation] = field(default_factory=list)
    summary: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations


def default_limits(max_kl: float | None = VERL_ALERTS.max_kl, max_kl_k3: float | None = VERL_ALERTS.max_kl_k3,
                   min_ess: float | None = VERL_ALERTS.min_ess, max_chi2_token: float | None = VERL_ALERTS.max_chi2_token,
                   max_outside_5x: float | None = None, max_phantom_clip: float | None = None,
                   min_ess_seq: float | None = None) -> list[Limit]:
    """verl's alerts by default (|kl| > 0.1 on k1 and on k3, ESS < 0.3, chi2_token > 1); None = not checked."""
    spec = [("kl_k1", "max", max_kl, "--max-kl", True), ("kl_k3", "max", max_kl_k3, "--max-kl-k3", False),
            ("ess", "min", min_ess, "--min-ess", False), ("ess_seq", "min", min_ess_seq, "--min-ess-seq", False),
            ("chi2_token", "max", max_chi2_token, "--max-chi2-token", False),
            ("outside_5x", "max", max_outside_5x, "--max-outside-5x", False),
            ("phantom_clip", "max", max_phantom_clip, "--max-phantom-clip", False)]
    return [Limit(m, op, float(b), opt, ab) for m, op, b, opt, ab in spec if b is not None]


def evaluate(report: Report, limits: list[Limit], fail_on: str = "error") -> CheckResult:
    """Violated limits and findings at or above `fail_on` ("info", "warn", "error" or "never")."""
    m = report.metrics
    diag = report.diagnosis or {}
    res = CheckResult(diag.get("regime"))
    for lim in limits:
        value = m.get(lim.metric)
        if value is None:
            res.violations.append(Violation("limit", lim.metric, f"{lim.metric} is not available ({lim.option})"))
            continue
        v = abs(value) if lim.absolute else value
        name = f"|{lim.metric}|" if lim.absolute else lim.metric
        if lim.op == "max" and not v <= lim.bound:
            res.violations.append(Violation("limit", lim.metric, f"{name} = {v:.4g} > {lim.bound:g} ({lim.option})"))
        elif lim.op == "min" and not v >= lim.bound:
            res.violations.append(Violation("limit", lim.metric, f"{name} = {v:.4g} < {lim.bound:g} ({lim.option})"))
    if fail_on != "never":
        level = SEVERITIES.index(fail_on)
        for f in diag.get("findings", []):
            if SEVERITIES.index(f["severity"]) >= level:
                res.violations.append(Violation(f["severity"], f["id"], f["title"]))
    res.summary = (f"{res.regime}; KL k3 {m.get('kl_k3', float('nan')):.2e}, ESS {m.get('ess', float('nan')):.4f}, "
                   f"{m.get('tokens')} tokens")
    return res

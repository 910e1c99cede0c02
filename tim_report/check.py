"""`tim-report check`: a CI gate on the metrics and the diagnosis.

Exit 0 when every batch is within its limits and has no finding at or above `--fail-on`, 1 on any
violation, 2 on bad input. One line per violated limit or finding:

    FILE: limit ess = 0.21 < 0.3 (--min-ess)
    FILE: error shift: Off-by-one: trainer log-probs match the rollout's at position t+1
    FILE: ok (numerical_noise; KL k3 4.1e-04, ESS 0.9987)

Default limits are verl's documented rollout-correction alerts: ESS < 0.3, |kl| > 0.1,
chi2_token > 1 (verl docs, "Rollout correction" metrics).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from .report import Report

SEVERITY_ORDER = ("info", "warn", "error")


@dataclass(frozen=True)
class Limit:
    metric: str  # key in Report.metrics
    op: str  # "max" (value must be ≤ bound) or "min" (value must be ≥ bound)
    bound: float
    option: str  # CLI option that sets it
    absolute: bool = False  # compare |value|


@dataclass(frozen=True)
class Violation:
    kind: str  # "limit" or the finding severity
    id: str  # metric or finding id
    message: str

    def line(self, source: str) -> str:
        return f"{source}: {self.kind} {self.id}: {self.message}" if self.kind != "limit" else f"{source}: limit {self.message}"


@dataclass
class CheckResult:
    source: str
    regime: str | None
    violations: list[Violation] = field(default_factory=list)
    summary: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations


def default_limits(max_kl: float | None = 0.1, max_kl_k3: float | None = 0.1, min_ess: float | None = 0.3,
                   max_chi2_token: float | None = 1.0, max_outside_5x: float | None = None,
                   max_phantom_clip: float | None = None, min_ess_seq: float | None = None) -> list[Limit]:
    """verl's alerts by default (|kl| > 0.1 on k1 and on k3, ESS < 0.3, chi2_token > 1); None = not checked."""
    spec = [("kl_k1", "max", max_kl, "--max-kl", True), ("kl_k3", "max", max_kl_k3, "--max-kl-k3", False),
            ("ess", "min", min_ess, "--min-ess", False), ("ess_seq", "min", min_ess_seq, "--min-ess-seq", False),
            ("chi2_token", "max", max_chi2_token, "--max-chi2-token", False),
            ("outside_5x", "max", max_outside_5x, "--max-outside-5x", False),
            ("phantom_clip", "max", max_phantom_clip, "--max-phantom-clip", False)]
    return [Limit(m, op, float(b), opt, ab) for m, op, b, opt, ab in spec if b is not None]


def evaluate(report: Report, limits: list[Limit], fail_on: str = "error", source: str | None = None) -> CheckResult:
    """Violated limits and findings at or above `fail_on` ("info", "warn", "error" or "never")."""
    m = report.metrics
    diag = report.diagnosis or {}
    res = CheckResult(source or str(report.run.get("id")), diag.get("regime"))
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
        level = SEVERITY_ORDER.index(fail_on)
        for f in diag.get("findings", []):
            if SEVERITY_ORDER.index(f["severity"]) >= level:
                res.violations.append(Violation(f["severity"], f["id"], f["title"]))
    res.summary = (f"{res.regime}; KL k3 {m.get('kl_k3', float('nan')):.2e}, ESS {m.get('ess', float('nan')):.4f}, "
                   f"{m.get('tokens')} tokens")
    return res


@click.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--max-kl", type=float, default=0.1, show_default=True,
              help="Fail when |kl_k1| (verl rollout_corr/kl) exceeds this.")
@click.option("--max-kl-k3", type=float, default=0.1, show_default=True, help="Fail when kl_k3 exceeds this.")
@click.option("--min-ess", type=float, default=0.3, show_default=True, help="Fail when token ESS is below this.")
@click.option("--min-ess-seq", type=float, default=None, help="Fail when sequence ESS is below this (off by default).")
@click.option("--max-chi2-token", type=float, default=1.0, show_default=True, help="Fail when chi2_token exceeds this.")
@click.option("--max-outside-5x", type=float, default=None,
              help="Fail when the fraction of tokens with r outside [1/5, 5] exceeds this (off by default).")
@click.option("--max-phantom-clip", type=float, default=None,
              help="Fail when the fraction of tokens outside the PPO clip range exceeds this (off by default).")
@click.option("--no-limits", is_flag=True, help="Check findings only (drop every metric limit).")
@click.option("--fail-on", type=click.Choice(["info", "warn", "error", "never"]), default="error", show_default=True,
              help="Fail on diagnosis findings of this severity or worse.")
@click.option("--set", "overrides", multiple=True, metavar="NAME=VALUE",
              help="Override a diagnosis threshold (see docs/diagnosis.md), e.g. --set shift_ratio=0.3.")
@click.option("--ppo-eps", nargs=2, type=float, default=(0.2, 0.28), show_default=True, metavar="LOW HIGH",
              help="PPO clip ε for phantom clipping and the precision gap.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per file instead of lines.")
@click.option("--tokenizer", type=click.Path(), default=None, hidden=True)
@click.pass_context
def check(ctx, files, max_kl, max_kl_k3, min_ess, min_ess_seq, max_chi2_token, max_outside_5x, max_phantom_clip,
          no_limits, fail_on, overrides, ppo_eps, as_json, tokenizer, **kw):
    """Exit 1 when a batch breaks a limit or has a diagnosis finding (CI gate); 0 when clean; 2 on bad input."""
    from .analysis import Thresholds, analyze
    from .analysis.diagnosis import DiagnosisThresholds
    from .cli import _parse_keys
    from .errors import BadInput
    from .loader import load

    keys = _parse_keys(kw.get("keys", ()))
    values = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise BadInput("--set", f"'{item}' is not NAME=VALUE")
        values[name.strip()] = value.strip()
    try:
        dth = DiagnosisThresholds().override(values) if values else None
    except KeyError as exc:
        raise BadInput("--set", str(exc).strip("'\""))
    except ValueError as exc:
        raise BadInput("--set", str(exc))
    th = Thresholds(ppo_eps_low=ppo_eps[0], ppo_eps_high=ppo_eps[1])
    limits = [] if no_limits else default_limits(max_kl, max_kl_k3, min_ess, max_chi2_token, max_outside_5x,
                                                   max_phantom_clip, min_ess_seq)
    failed = False
    for path in files:
        batch = load(path, keys=keys, allow_pickle=kw.get("allow_pickle", False), tokenizer=tokenizer)
        res = evaluate(analyze(batch, th, diagnosis_thresholds=dth), limits, fail_on, str(path))
        failed |= not res.ok
        if as_json:
            click.echo(json.dumps({"file": str(path), "ok": res.ok, "regime": res.regime,
                                   "violations": [v.__dict__ for v in res.violations]}, sort_keys=True))
            continue
        for v in res.violations:
            click.echo(v.line(str(path)))
        if res.ok:
            click.echo(f"{path}: ok ({res.summary})")
    sys.exit(1 if failed else 0)


def _decorate() -> None:
    """Add the shared --key / --allow-pickle options and the clean BadInput handling from cli.py.

    Done after `check` exists (not as decorators) because cli.py imports this module at its end to
    register the command: whichever of the two modules is imported first, both names are defined."""
    global check
    from .cli import _fail_cleanly, key_option, pickle_option

    check.callback = _fail_cleanly(check.callback)
    for opt in (pickle_option, key_option):
        check = opt(check)


_decorate()

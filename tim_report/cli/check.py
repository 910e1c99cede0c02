"""`tim-report check`: a CI gate on the metrics and the diagnosis.

Exit 0 when every batch is within its limits and has no finding at or above `--fail-on`, 1 on any
violation, 2 on bad input. A batch that cannot be measured (too few usable tokens, probabilities saved
as log-probs: the `unusable_input` finding) is bad input too: one line, exit 2 whatever the limits and
`--fail-on`, and the other files are still checked. A run folder is checked step by step; a step of it that
cannot be read is a line naming it (`FILE: unreadable: why`) and exit 2, after the other steps are checked. One
line per violated limit or finding:

    FILE: fail: systematic: off-by-one (…) (error), side undetermined, every position; KL k3 18, ESS 0.0626, 763 tokens
    FILE: limit ess = 0.21 < 0.3 (--min-ess)
    FILE: error shift: Off-by-one: trainer log-probs match the rollout's at position t+1
    FILE: Do not train on this batch: no importance-sampling correction fixes an off-by-one (…); fix the bug first.
    FILE: history kl_k3 = 0.0123 > 0.00456, above the run's band (median 0.00228 of steps 3-12; margin 1×, floor 0.0004)
    FILE: ok: numerical noise; KL k3 4.1e-04, ESS 0.9987, 1227 tokens
    tim-report: error: FILE: Unusable input: only 35.2% of the 8,819 masked tokens are usable (NaN trainer …

The metric limits, their options and defaults (verl's documented rollout-correction alerts) come from the
catalogue (catalogue.metrics, each gated entry's `gate`). `--history SITE` adds the run's own band: the rolling
median of its previous steps in SITE/index.json (analysis/history.py).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..catalogue import metrics as catalogue
from ..config import HISTORY_MARGIN, HISTORY_WINDOW, SEVERITIES
from ..errors import BadInput
from .options import fail_cleanly, load_options, parse_pairs, ppo_eps_option
from .text import excluded_note, safe, terminal_blocked


def gate_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One option per metric the catalogue gates (--max-kl-k3, --min-ess, ...), handed to the command as `bounds`."""
    gated = [(m.key, m.gate) for m in (catalogue.metric(k) for k in catalogue.GATES) if m.gate is not None]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, bounds={key: kwargs.pop(key) for key, _ in gated}, **kwargs)

    for key, gate in reversed(gated):
        wrapper = click.option(gate.option, key, type=float, default=gate.default,
                               show_default=gate.default is not None, help=gate.help)(wrapper)
    return wrapper


@click.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@gate_options
@click.option("--no-limits", is_flag=True, help="Check findings only (drop every metric limit).")
@click.option("--fail-on", type=click.Choice([*SEVERITIES, "never"]), default="error", show_default=True,
              help="Fail on diagnosis findings of this severity or worse.")
@click.option("--set", "overrides", multiple=True, metavar="NAME=VALUE",
              help="Override a diagnosis threshold (see docs/diagnosis.md), e.g. --set shift_ratio=0.3.")
@click.option("--history", type=click.Path(path_type=Path), metavar="SITE",
              help="Also fail when a metric leaves the run's own band: the rolling median of the previous steps in "
                   "SITE/index.json (a site `tim-report build` wrote), plus a margin (docs/diagnosis.md).")
@click.option("--history-window", type=click.IntRange(min=1), default=HISTORY_WINDOW, show_default=True, metavar="W",
              help="The band's median is over the last W steps before the checked step.")
@click.option("--history-margin", type=click.FloatRange(min=0), default=HISTORY_MARGIN, show_default=True, metavar="REL",
              help="The band reaches REL × the median past it (for ESS: REL × its deficit 1 − ESS).")
@click.option("--history-floor", "history_floors", multiple=True, metavar="METRIC=VALUE",
              help="The least the band reaches past the median, per metric (defaults: each metric's history floor in "
                   "docs/diagnosis.md).")
@click.option("--exact", is_flag=True,
              help="Also fail unless no token differs between the sides (rollout and trainer, and every side of the "
                   "chain: recompute, train; docs/chain.md); says how many differ and the first one.")
@click.option("--atol", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="NATS",
              help="With --exact: a token differs only when |δ| exceeds this.")
@ppo_eps_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per file instead of lines.")
@fail_cleanly
@load_options
def check_command(files, bounds, no_limits, fail_on, overrides, history, history_window, history_margin, history_floors,
                  exact, atol, thresholds, as_json, load) -> None:
    """Exit 1 when a batch breaks a limit or has a diagnosis finding (CI gate); 0 when clean; 2 on bad input.

    FILES are batch files or run folders (each step checked; a step that cannot be read is named, exit 2)."""
    from ..analysis.gate import limits as gate_limits
    from ..config import DiagnosisThresholds
    from ..service.check import CheckOptions, Unread, check

    values = parse_pairs(overrides, "--set", "NAME=VALUE")
    try:
        dth = DiagnosisThresholds().override(values) if values else None
    except KeyError as exc:
        raise BadInput("--set", str(exc).strip("'\"")) from None
    except ValueError as exc:
        raise BadInput("--set", str(exc)) from None
    if atol and not exact:
        raise BadInput("--atol", "goes with --exact (the tolerance of the exact gate)")
    if not atol < float("inf"):
        raise BadInput("--atol", f"{atol} is not a finite number of nats")
    limits = [] if no_limits else gate_limits(bounds)
    options = CheckOptions(limits=limits, fail_on=fail_on, thresholds=thresholds, diagnosis=dth, history=history,
                           history_window=history_window, history_margin=history_margin,
                           history_floors=_floors(history_floors), exact=exact, atol=atol)
    failed = unusable = False
    rows: dict[str, list[dict]] = {}  # each input's step rows: a run folder's steps are read together at the end
    for checked in check(list(files), load, options):
        if isinstance(checked, Unread):
            unusable = True
            click.echo(json.dumps({"file": str(checked.path), "ok": False, "unreadable": checked.reason}, sort_keys=True)
                       if as_json else f"{safe(str(checked.path))}: unreadable: {safe(checked.reason)}")
            continue
        path, report, res, hres = checked.path, checked.report, checked.result, checked.history
        rows.setdefault(str(checked.source), []).append({**checked.row, "id": str(path)})  # named as the lines name it
        failed |= not res.ok
        unusable |= res.input_problem is not None
        if as_json:
            click.echo(json.dumps({"file": str(path), "ok": res.ok, "regime": res.regime, "input_problem": res.input_problem,
                                   "glance": checked.row.get("glance"), "side": checked.row.get("side"),
                                   "finding": (checked.row.get("findings") or [None])[0],
                                   "violations": [v.__dict__ for v in res.violations],
                                   "excluded_tokens": report.data_problems["excluded_tokens"],
                                   "input_problems": report.data_problems["input"],
                                   **({"history": {"basis": hres.basis, "note": hres.note}} if hres else {}),
                                   **({"exact": checked.exact} if checked.exact is not None else {})}, sort_keys=True))
            continue
        name = safe(str(path))
        if res.input_problem is not None:
            click.echo(f"tim-report: error: {name}: {safe(res.input_problem)}", err=True)  # as BadInput says it
            continue
        # the verdict first, at a glance (regime, leading finding, its side and place), then why it fails
        click.echo(f"{name}: {'ok' if res.ok else 'fail'}: {safe(res.summary)}{excluded_note(checked.row)}")
        if hres is not None and hres.note:
            click.echo(f"{name}: {safe(hres.note)}")
        for v in res.violations:  # a history band names run ids from index.json: escaped like every file's string
            click.echo(safe(v.line(name)))
        if report.routing.get("blocked_by_bug"):
            click.echo(f"{name}: {terminal_blocked(report.diagnosis)}")
    failed |= _across_steps(rows, as_json)
    sys.exit(2 if unusable else 1 if failed else 0)


def _across_steps(rows: dict[str, list[dict]], as_json: bool) -> bool:
    """A run folder's errors that only its steps read together show (the weight digests of a one-step-off run,
    docs/sync.md; a lag beyond the run's own history of it, docs/staleness.md): a line each; whether there was one."""
    from ..service.check import run_errors

    found = False
    for source, steps in rows.items():
        for f in run_errors(steps) if len(steps) > 1 else []:
            found = True
            click.echo(json.dumps({"file": source, "ok": False, "across_steps": f["id"], "title": f["title"]}, sort_keys=True)
                       if as_json else f"{safe(source)}: error {f['id']} (the steps read together): {safe(f['title'])}")
    return found


def _floors(values: tuple[str, ...]) -> dict[str, float]:
    """--history-floor METRIC=VALUE pairs: a headline metric and a number ≥ 0."""
    out = {}
    for name, value in parse_pairs(values, "--history-floor", "METRIC=VALUE").items():
        if name not in catalogue.HISTORY:
            raise BadInput("--history-floor", f"unknown metric '{name}' (one of {', '.join(catalogue.HISTORY)})")
        try:
            out[name] = float(value)
        except ValueError:
            raise BadInput("--history-floor", f"'{value}' is not a number") from None
        if not out[name] >= 0 or out[name] == float("inf"):
            raise BadInput("--history-floor", f"'{value}' must be a finite number ≥ 0")
    return out

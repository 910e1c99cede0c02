"""A live run's steps read by lag (`watch`'s alarms; docs/watch.md, docs/staleness.md): pure functions over index rows.

Staleness at the size the lag knob allows is not news, so a step is held against the steps of its own lag mix, and a
change of the level that comes with a change of lag mix is not an alarm. What is news is the numerical floor moving:
the lag-0 tokens of a step (those the engine says it sampled with the trainer's own weights) against the run's own
lag-0 floor, the rolling median of the earlier steps' lag-0 KL k3 (`check --history`'s window and margin, the step's
own standard error as the slack). A floor beyond it
means the engine did not hold the weights it claims (a sync skipped, applied late, or rounded away), one step before
the floor crosses the published band that the batch's own `stale_weights` finding reads.
"""

from __future__ import annotations

import math
import statistics

from ...catalogue.numbers import fmt, plain
from ...config import FLOOR_Z, HISTORY_MARGIN, HISTORY_MIN_STEPS, HISTORY_WINDOW, DiagnosisThresholds
from ..history import describe, window_rows

MIN_TOKENS = DiagnosisThresholds().min_tokens  # the diagnosis's: fewer lag-0 tokens than this judge no floor


def lag_key(row: dict | None) -> tuple | None:
    """The lags a step's tokens carry (sorted; "unknown" last), or None for a step that names no version."""
    mix = (row or {}).get("lag_mix") or {}
    if not mix:
        return None
    known = sorted(int(k) for k in mix if k != "unknown")
    return (*known, *(["unknown"] if "unknown" in mix else []))


def same_lag(row: dict, rows: list[dict]) -> list[dict]:
    """The rows a step's band is computed from: every row when the step names no version, else those of its lag mix."""
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


def lag_only(row: dict, min_tokens: int = MIN_TOKENS) -> bool:
    """The step's `elevated` reads lag and numerics together, with nothing to tell them apart: it carries tokens of lag
    ≥ 1, fewer than `min_tokens` of lag 0 (the floor not judged: its diagnosis had to read the mix) and no warn or
    error finding. Such a step is no evidence of a numerical change: the run view reads it as the steps before it."""
    mix = row.get("lag_mix") or {}
    if row.get("regime") != "elevated" or row.get("findings") or not any(k.isdigit() and k != "0" for k in mix):
        return False
    lag0, tokens = mix.get("0") or 0.0, row.get("tokens") or 0
    return lag0 * tokens < min_tokens


def floor_kl(row: dict | None) -> float | None:
    """The step's lag-0 KL k3 (None without lag-0 tokens)."""
    value = ((row or {}).get("lag_kl_k3") or {}).get("0")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def floor_moved(row: dict, rows: list[dict], window: int = HISTORY_WINDOW, margin: float = HISTORY_MARGIN,
                min_steps: int = HISTORY_MIN_STEPS, z: float = FLOOR_Z) -> str | None:
    """The sentence when the step's lag-0 KL k3 is above the run's own lag-0 floor: beyond (1 + margin) × the median of
    the earlier steps' lag-0 KL k3 by more than `z` of its own standard errors (`floor_kl_k3_se`); None when within it
    or when fewer than `min_steps` earlier steps have lag 0. The step's own noise, not a published band's floor, is the
    slack: a floor of 1e-4 that triples is news, however far below the band it stays."""
    value = floor_kl(row)
    if value is None:
        return None
    earlier = window_rows([r for r in rows if floor_kl(r) is not None], row.get("step"), window)
    if len(earlier) < min_steps:
        return None
    med = statistics.median(v for v in (floor_kl(r) for r in earlier) if v is not None)
    se = row.get("floor_kl_k3_se")
    slack = z * float(se) if isinstance(se, (int, float)) and not isinstance(se, bool) and math.isfinite(se) else 0.0
    bound = (1 + margin) * med
    if not value - slack > bound:
        return None
    return (f"the lag-0 tokens' KL k3 {fmt(value, 3)} ± {fmt(slack, 2)} is above the run's lag-0 floor ({plain(1 + margin)}× "
            f"the median {fmt(med, 3)} of {describe(earlier)})")


def lag_scalars(lag_kl_k3: dict, share: object, prefix: str = "tim/") -> dict[str, float]:
    """What a logger gets of a step's lags (`Report.scalars()`, `watch --log-to`, `export --tensorboard`):
    `tim/kl_k3_lag_<lag>` for each lag ("unknown" included) and `tim/staleness_share`, finite values only."""
    def ok(v: object) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    out = {f"{prefix}kl_k3_lag_{lag}": float(v) for lag, v in (lag_kl_k3 or {}).items() if ok(v)}
    if ok(share):
        out[f"{prefix}staleness_share"] = float(share)  # type: ignore[arg-type]
    return out

"""How a finding's evidence reads on a page: display names and formats for the keys summary.json keeps.

summary.json keeps each detector's evidence under its own keys (`alpha_abs_mean`, `negative_delta_share`); a page
shows them as people read them ("mean |α| (engine)  0.0131", "rollout ≥ trainer  96.3%"), a standard error beside
its value, and leaves out what was not computed (no "—") and the detectors' own thresholds and subsampling steps
(they are in summary.json). A key of the catalogue's metrics takes the metric's name and format; a key of one
finding takes the name its catalogue entry gives it (`Finding.evidence_names`).
"""

from __future__ import annotations

import math
from typing import Any

from .findings import FINDINGS
from .metrics import BY_KEY
from .numbers import fmt, pct

# The keys several findings (or the diagnosis's own evidence) share: key → (name, kind); a key of one finding is
# named by its entry (`Finding.evidence_names`). kind: share (a percentage), x (a multiple), bool (yes / no), anything
# else a number.
NAMES: dict[str, tuple[str, str]] = {
    "tokens": ("tokens", "count"), "sequences": ("sequences", "count"),
    "kl_k3": ("KL k3", "num"), "abs_delta_mean": ("mean |δ| (nats)", "num"), "abs_delta_max": ("max |δ| (nats)", "num"),
    "bias": ("bias, mean δ (nats)", "num"), "corr_logp": ("log-prob correlation", "num"),
    "ppl_ratio": ("perplexity ratio", "x"), "ess": ("ESS", "num"), "phantom_clip": ("phantom clipping", "share"),
    "z": ("z", "num"), "ratio": ("ratio", "x"), "token_share": ("share of tokens", "share"),
    "abs_delta_share": ("share of Σ|δ|", "share"), "mean_delta": ("mean δ (nats)", "num"),
    "abs_delta_rest_mean": ("mean |δ| elsewhere", "num"), "rank_mean": ("mean rank percentile", "num"),
    "explained_by_other_finding": ("explained by another finding", "bool"),
    "log_mean_ratio": ("log mean r", "num"), "log_mean_inverse_ratio": ("log mean 1/r", "num"),
}
HIDDEN_PREFIXES = ("threshold_", "every_nth_", "min_tokens_")  # the detector's own settings: in summary.json


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v)) or v == []


def _value(v: Any, kind: str) -> str:
    if isinstance(v, list):
        return ", ".join(_value(x, kind) for x in v[:12]) + (" …" if len(v) > 12 else "")
    if kind == "bool":
        return "yes" if v else "no"
    if kind == "share":
        return pct(v)
    if kind == "x":
        return fmt(v, 3) + "×"
    if kind == "x_or_share":
        return fmt(v, 3) + "×" if isinstance(v, (int, float)) and v > 1 else pct(v)
    return fmt(v)


def items(evidence: Any, finding_id: Any = None) -> list[tuple[str, str]]:
    """(display name, formatted value) for each computed evidence value, in the detector's order; `x_se` beside `x`.
    `finding_id`: the finding whose evidence it is (its entry names its own keys); None for the diagnosis's."""
    if not isinstance(evidence, dict):
        return []
    entry = FINDINGS.get(finding_id) if isinstance(finding_id, str) else None
    names = {**NAMES, **entry.evidence_names} if entry is not None else NAMES
    out = []
    for key, v in evidence.items():
        if key.endswith("_se") or key.startswith(HIDDEN_PREFIXES) or _missing(v) or isinstance(v, dict):
            continue
        if isinstance(v, list) and v and isinstance(v[0], dict):
            continue  # a table (render.views.kv_tables)
        name, kind = names.get(key, (key.replace("_", " "), "num"))
        m = BY_KEY.get(key)  # a catalogue metric is written as every table writes it
        text = m.write(v) if m is not None and kind != "x" and not isinstance(v, list) else _value(v, kind)
        se = evidence.get(key + "_se")
        if not _missing(se) and se:
            text += f" ± {fmt(se, 2)}"
        out.append((name, text))
    return out

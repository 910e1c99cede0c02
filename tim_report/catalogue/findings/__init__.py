"""The finding catalogue: for each thing the diagnosis can find, one entry that says everything about it.

A finding is one detector plus one entry here. The detector (analysis/detectors.py, localise.py, usable.py, and
the measurements that carry a finding: precision_gap.py, floor.py, routes.py) registers with `@detector(id)`
(analysis/registry.py), measures, decides whether its fault is there, and hands its evidence (the numbers, as
summary.json keeps them) and a few words of context to `make`, which returns the finding: id, severity, title (a
sentence for the page), problem (a noun phrase, for sentences built around it: "no correction fixes {problem}"),
likely cause and what to check. The entry (a `Finding`, entry.py) also holds the finding's step words (the run
view's sentences), where else a page shows it (`banner`), the verdict at a glance (`glance`, `place`), how a page
names its evidence (`evidence_names`), its side and how its consequence is weighed (`side`, `consequence`,
`offset`): no other table in the package is keyed by a finding's id (tests/test_finding_registry.py counts).

The entries live in one module per group: faults.py (the input gate and the faults of every token), patterns.py
(where and how the mismatch sits), sampling.py (what the sampler kept and what one side alone did), lag.py (the
staleness split's: docs/staleness.md; and the weight digests' exact sync findings, run right after the input gate:
docs/sync.md), beside.py (the measurements beside the verdict). The diagnosis runs the detectors in this catalogue's
order (the groups' order below, then each group's), which is also the order findings of one severity are listed in.
The verdict's words are in catalogue/verdicts.py, the run view's (run-level findings, the run verdict, change-point
sentences) in catalogue/run_words.py. docs/diagnosis.md explains each detector.
"""

from __future__ import annotations

from typing import Any

from ...config import SEVERITIES, DiagnosisThresholds
from . import beside, faults, lag, patterns, sampling
from .entry import Finding, Side, Text, Words
from .faults import INPUT_PROBLEM

__all__ = ["FINDINGS", "INPUT_PROBLEM", "Finding", "Side", "Text", "Words", "make"]

_GATE = tuple(f for f in faults.ENTRIES if f.id == INPUT_PROBLEM)  # the input gate first, then the exact sync findings
FINDINGS: dict[str, Finding] = {f.id: f for f in (*_GATE, *lag.SYNC_ENTRIES, *faults.ENTRIES, *patterns.ENTRIES,
                                                  *sampling.ENTRIES, *lag.ENTRIES, *beside.ENTRIES)}


def make(id_: str, evidence: dict, dt: DiagnosisThresholds, **context: Any) -> dict:
    """A finding as summary.json holds it: the detector's evidence (numbers made plain JSON) and the catalogue's words.

    `context` are words the sentences need that are not evidence (the declared sampling, which finding explains
    this one, which side is higher)."""
    entry = FINDINGS[id_]
    ev = {k: _plain(v) for k, v in evidence.items()}
    w = {**ev, **context}
    severity = entry.severity(w, dt)
    assert severity in SEVERITIES, severity
    return {"id": id_, "severity": severity, "title": entry.title(w), "problem": entry.problem(w), "evidence": ev,
            "likely_cause": entry.cause(w), "what_to_check": entry.check(w)}


def _plain(v: Any) -> Any:
    """numpy scalars as Python numbers (the evidence is JSON)."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        v = v.item()
    if isinstance(v, bool):
        return int(v)
    return v

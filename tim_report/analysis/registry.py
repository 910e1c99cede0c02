"""The detector registry: a finding is one detector registered here plus one entry in catalogue/findings/.

A detector is a function of the `Scene` (the batch, its valid tokens, the summary metrics, the thresholds, and the
findings of the detectors that ran before it) returning a finding (`findings.make`) or None. Its module registers it:

    @detector("my_finding")
    def my_finding(scene: Scene) -> dict | None: ...

and `diagnosis.diagnose` runs every registered detector in the catalogue's order, in one place: a new finding needs
no line in the diagnosis, the analysis or a renderer. What a detector is to the diagnosis beyond its finding is said
where it registers: a fault of every token (`whole_batch`: the detectors of where the mismatch sits stay silent
beside it), one that decorrelates the log-probs by itself (`decorrelates`: low correlation is not read as systematic
on top of it), one said even when the two sides are identical (`when_identical`), and a measurement beside the
verdict (`beside`: the precision gap, the trainer's floor, routing; it runs in every regime, never moves the
regime or leads the verdict, and `section` names the summary.json object its measurement is kept in).

Work that several detectors share (the placeholder-zero mask, the sampler's side, the tokens without placeholders)
is done once per batch through `Scene.once`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import DiagnosisThresholds, Thresholds
from ..model import StepBatch
from .tokens import Tokens


@dataclass
class Scene:
    """What every detector may read, for one batch; `found` holds the findings raised so far, by id."""

    batch: StepBatch
    tok: Tokens
    metrics: dict
    dt: DiagnosisThresholds
    th: Thresholds
    found: dict[str, dict] = field(default_factory=dict)
    given: dict[str, Any] = field(default_factory=dict)  # measured before the diagnosis, on analyze's second lane
    _done: dict[Callable, Any] = field(default_factory=dict)

    def once(self, work: Callable[[Scene], Any]) -> Any:
        """`work(self)`, computed on first use and kept: what several detectors read is measured once."""
        if work not in self._done:
            self._done[work] = work(self)
        return self._done[work]

    def whole_batch_fault(self) -> bool:
        """Whether a finding raised so far is a fault of every token (an off-by-one, a one-sided transformation)."""
        return any(DETECTORS[i].whole_batch for i in self.found)


@dataclass(frozen=True)
class Detector:
    run: Callable[[Scene], dict | None]
    whole_batch: bool = False
    decorrelates: bool = False
    when_identical: bool = False
    beside: bool = False
    section: tuple[str, Callable[[Scene], dict]] | None = None  # (summary.json key, the measurement kept there)


DETECTORS: dict[str, Detector] = {}


def detector(finding_id: str, **how: Any) -> Callable[[Callable[[Scene], dict | None]], Callable[[Scene], dict | None]]:
    """Register the decorated function as the detector of `finding_id` (its catalogue entry's id)."""
    def register(run: Callable[[Scene], dict | None]) -> Callable[[Scene], dict | None]:
        DETECTORS[finding_id] = Detector(run, **how)
        return run
    return register

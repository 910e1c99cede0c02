"""What one finding's catalogue entry declares: the `Finding` type, and the small pieces several entries share.

Everything a place needs to say about a finding is a field here, so a new finding is its detector, its entry and its
thresholds (docs/architecture.md "A new finding"): its severity rule and words, its step words, the verdict at a
glance (`glance`, `place`), how a page names its evidence (`evidence_names`), which side its own evidence names
(`side`) and how its consequence is weighed (`consequence`, `offset`). The analysis computes; the entry says how.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...config import DiagnosisThresholds
from ..numbers import fmt

Words = dict[str, Any]  # a finding's evidence and its context, by name
Text = Callable[[Words], str]


def every_position(e: Words) -> str | None:
    """Where most findings sit, in the verdict at a glance."""
    return "every position"


def nowhere(e: Words) -> str | None:
    """A finding with no place in the glance (the input gate: it is about the input, not a position)."""
    return None


@dataclass(frozen=True)
class Side:
    """Which side a finding's own evidence names. `who(evidence)` is "rollout", "trainer", "undetermined" (no side
    can be told from the log-probs) or None (the sampler test decides, analysis/consequence.py); `basis` is the word
    summary.json keeps, `why` the words of "Side: the trainer (why)." or "Side: undetermined: why."."""

    who: Callable[[Words], str | None]
    basis: str
    why: str


def trainer_if(flag: Any) -> str | None:
    """The side an evidence flag names ("is it the trainer?"): None when the detector did not say."""
    return None if flag is None else "trainer" if flag else "rollout"


@dataclass(frozen=True)
class Finding:
    """One finding: its severity rule and its words. A batch finding also has its step words (a run's sentences are
    made of them: "from step 12 {meaning} (every step from there is diagnosed {short})") and says where else a page
    shows it; the run-level findings (catalogue/run_words.py) have neither."""

    id: str
    severity: Callable[[Words, DiagnosisThresholds], str]
    title: Text
    problem: Text
    cause: Text
    check: Text
    short: str = ""             # its short name in a run's sentences ("off-by-one")
    meaning: str = ""           # what it means for a stretch of steps ("the trainer's log-probs are shifted by one …")
    banner: bool = False        # said again under the page's title: it is about what the batch is, not its numbers
    reads_regime: bool = False  # its words read the regime, known once every detector ran: made again with it
    leads_as_info: bool = False  # as info it still leads the verdict when nothing worse does (it explains the mismatch)
    kernel: str = ""            # what it means inside a kernel or an engine (assert_logprobs_match says it)
    kernel_evidence: Text | None = None  # the two or three numbers that carry it, as the candidate / reference
    # severity by consequence (catalogue/severity.py): "weighed" (an error only when material on the batch), "stated"
    # (its consequence and side said), "sided" (its side said), or "" (neither)
    consequence: str = ""
    offset: bool = False        # its effect is a per-token offset of δ: the consequence counts what the offset adds
    side: Side | None = None    # the side its own evidence names; None: the sampler test decides
    # the verdict at a glance when it leads: a few words from its evidence (None: its `short`), and where it sits
    glance: Text | None = None
    place: Callable[[Words], str | None] = every_position
    # how a page names its own evidence keys: key → (display name, kind: share, x, x_or_share, bool, count, text or
    # num); the keys several findings share are in catalogue/evidence.py
    evidence_names: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def always(level: str) -> Callable[[Words, DiagnosisThresholds], str]:
    return lambda w, dt: level


def na(x: Any) -> str:
    return fmt(x, missing="n/a")

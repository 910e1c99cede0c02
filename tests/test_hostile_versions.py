"""Hostile weight versions (issue 37's inputs, red team): text that is not an ASCII integer ("--3", "³"), numbers
beyond int64 and versions whose difference would wrap are unknown, never a traceback and never a made-up lag."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run

from tim_report.analysis import analyze
from tim_report.analysis.lag.versions import parse, trainer_version
from tim_report.io import load
from tim_report.testing import make_batch


@pytest.mark.parametrize("text", ["--3", "³", "٣", "3-", "1e3", "9" * 19, "", "3,,--1"])
def test_a_version_that_is_not_an_ascii_integer_is_unknown(text):
    assert parse(text) is None


@pytest.mark.parametrize("value", ["--3", "³", 10**30, 1e30, -(2**63), 2**63, float("nan")])
def test_a_trainer_version_that_is_not_an_int64_integer_is_not_used(value):
    # present but unusable: no version, and no fallback to the step either (its source says why: "invalid")
    assert trainer_version({"trainer_version": value, "step": 5}) == (None, "invalid")


@pytest.mark.parametrize("version", ["--3", "³"])
def test_a_step_with_unparsable_versions_is_analysed(version):
    b = make_batch(n_seqs=8, mean_len=20)
    b.weight_version = np.array([version] * 4 + ["3"] * 4)
    b.meta["trainer_version"] = 3
    rows = {r["lag"]: r for r in analyze(b).staleness["by_lag"]}
    assert set(rows) == {0, "unknown"}


@pytest.mark.parametrize("meta_value", [10**30, "--3"])
def test_check_on_a_file_with_a_huge_or_garbled_trainer_version(tmp_path, meta_value):
    b = make_batch(n_seqs=8, mean_len=20)
    path = tmp_path / "s.npz"
    arrays = {"rollout_logp": b.rollout_logp, "trainer_logp": b.trainer_logp, "offsets": b.offsets,
              "weight_version": np.array(["3"] * 8),
              "meta": np.asarray(json.dumps({"format": "tim-report/step-batch", "version": 1,
                                             "meta": {"trainer_version": meta_value}}))}
    np.savez(path, **arrays)
    res = run("check", path)
    assert res.exit_code in (0, 1) and "Traceback" not in res.output, res.output


def test_an_unsigned_token_version_beyond_int64_is_unknown_not_wrapped(tmp_path):
    b = make_batch(n_seqs=4, mean_len=10)
    path = tmp_path / "s.npz"
    np.savez(path, rollout_logp=b.rollout_logp, trainer_logp=b.trainer_logp, offsets=b.offsets,
             token_version=np.full(b.n_tokens, 2**64 - 1, np.uint64),
             meta=np.asarray(json.dumps({"format": "tim-report/step-batch", "version": 1, "meta": {"trainer_version": 0}})))
    back = load(path)
    assert (back.token_version != -1).all()
    assert {r["lag"] for r in analyze(back).staleness["by_lag"]} == {"unknown"}


@pytest.mark.parametrize("spec", ["99999999999999999999=m", "1_0=m", "--1=m"])
def test_a_stale_lag_beyond_int64_or_not_plain_digits_is_refused(spec):
    from tim_report.capture.stale import parse_stale
    from tim_report.errors import BadInput

    with pytest.raises(BadInput, match="is not LAG=CKPT"):
        parse_stale([spec])


def test_a_generate_call_span_with_a_garbled_version_or_position_covers_nothing():
    """miles' per-call spans are read from the dump: a version "--3" or "³", or a position "abc", raised int()'s
    ValueError (a traceback) through a copy of the digit check that model.version_int replaced; such a span is now
    skipped, its tokens unknown."""
    from tim_report.io.sequences import call_token_versions
    from tim_report.model import UNKNOWN_VERSION

    calls = [[{"version": "--3", "abs_start": 0, "abs_end": 2}], [{"version": 2, "abs_start": "abc", "abs_end": 4}],
             [{"version": "³", "abs_start": 4, "abs_end": 5}], [{"version": "1", "abs_start": 5, "abs_end": 6}]]
    got = call_token_versions(calls, np.ones(6, bool), 0)
    assert got is not None and got.tolist() == [UNKNOWN_VERSION] * 5 + [1]

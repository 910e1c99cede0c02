"""Hostile weight versions (issue 37's inputs, red team): text that is not an ASCII integer ("--3", "³"), numbers
beyond int64 and versions whose difference would wrap are unknown, never a traceback and never a made-up lag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import run

from tim_report.analysis import analyze
from tim_report.analysis.lag.versions import parse, trainer_version
from tim_report.io import load
from tim_report.testing import make_batch

ROOT = Path(__file__).resolve().parents[1]


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


# ---- version floods (issue 44): linear, and bounded like every other count

def miles_dump(folder, versions: list) -> object:
    """A one-rank miles train dump of 4 samples whose first names `versions` (per-call strings or span lists)."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    cols: dict = {k: [] for k in ("sample_indices", "tokens", "response_lengths", "total_lengths", "rewards",
                                  "loss_masks", "log_probs", "rollout_log_probs", "advantages", "weight_versions")}
    for i in range(4):
        lp = -torch.linspace(0.1, 2.0, 12)
        for k, v in (("sample_indices", i), ("tokens", torch.arange(16)), ("response_lengths", 12),
                     ("total_lengths", 16), ("rewards", 1.0), ("loss_masks", torch.ones(12, dtype=torch.int32)),
                     ("log_probs", lp), ("rollout_log_probs", lp + 0.001), ("advantages", torch.zeros(12)),
                     ("weight_versions", versions if i == 0 else ["7"])):
            cols[k].append(v)
    path = folder / "0_0.pt"
    torch.save({"rollout_id": 0, "rank": 0, "cp_rank": 0, "cp_size": 1, "qkv_format": "thd", "rollout_data": cols}, path)
    return path


FLOODS = {
    "150,000 call versions": [str(v) for v in range(150_000)],
    "100,000 spans": [[{"version": v, "abs_start": 4 + v % 12, "abs_end": 5 + v % 12} for v in range(100_000)]],
}


@pytest.mark.parametrize("case", FLOODS)
def test_a_flood_of_distinct_versions_in_one_sample_is_one_line(tmp_path, case):
    """The red team's floods: `check` ran past 300 s (a quadratic de-duplication). Now one line, exit 2, in a real
    process (the timeout is a hang guard: reading the 2 MB dump is most of the time)."""
    path = miles_dump(tmp_path / "train_data", FLOODS[case])
    res = subprocess.run([sys.executable, "-m", "tim_report", "check", str(path)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert "sample 0: its weight_versions name" in lines[0] and "more than the 4,096 one sequence may carry" in lines[0]


def test_many_calls_of_few_versions_are_read_in_order():
    """200,000 calls cycling through 4,096 versions: one pass (a list scan per call was 800 million comparisons)."""
    from tim_report.io.sequences import joined_versions

    calls = [str(v % 4096) for v in range(200_000)]
    assert joined_versions(calls, "x", 0) == ",".join(str(v) for v in range(4096))
    spans = [[{"version": v % 3, "abs_start": v, "abs_end": v + 1} for v in range(100_000)]]
    assert joined_versions(spans, "x", 0) == "0,1,2"


def _nested(depth: int) -> list:
    x: list = [1]
    for _ in range(depth):
        x = [x]
    return x


@pytest.mark.parametrize("kwargs, phrase", [
    ({"weight_version": [_nested(100_000), 1]}, "'weight_version' holds a list: expected integers"),
    ({"weight_version": [10**5000, 1]}, "'weight_version' holds an integer of more than 18 digits"),
    ({"trainer_version": 10**5000}, "trainer_version is an integer of more than 18 digits"),
    ({"token_version": [[10**5000] * 4, [1] * 4]}, "'token_version' holds object, expected integers"),
    ({"weight_version": [list(range(200_000)), 1]}, "names 200,000 distinct versions for one sequence"),
], ids=["nested", "5000-digit", "5000-digit-trainer", "5000-digit-token", "200,000-versions"])
def test_save_step_refuses_versions_it_could_not_read_back(tmp_path, kwargs, phrase):
    """RecursionError and ValueError before; a span of 200,000 versions was written and then refused by the reader."""
    import tim_report
    from tim_report.errors import BadInput

    logp = -np.linspace(0.1, 2.0, 8).reshape(2, 4)
    with pytest.raises(BadInput) as err:
        tim_report.save_step(tmp_path / "steps", logp, logp + 0.01, step=1, **kwargs)
    assert str(err.value).startswith("save_step: ") and phrase in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "steps").exists()


def test_what_save_step_writes_reads_back_at_the_bound(tmp_path):
    import tim_report
    from tim_report.config.bounds import MAX_SEQUENCE_VERSIONS

    logp = -np.linspace(0.1, 2.0, 8).reshape(2, 4)
    span = [10**17 + v for v in range(MAX_SEQUENCE_VERSIONS)]  # the widest versions, as many as a sequence may name
    path = tim_report.save_step(tmp_path / "steps", logp, logp + 0.01, step=1, weight_version=[span, 3],
                                trainer_version=10**17 + MAX_SEQUENCE_VERSIONS)
    back = load(path)
    assert back.weight_version.tolist() == [",".join(map(str, span)), "3"]
    assert analyze(back).staleness is not None

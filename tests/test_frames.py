"""Notebook frames: a report's tokens and a site's steps as pandas DataFrames, checked against what they come from."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import skip_or_fail

import tim_report
from tim_report.errors import BadInput
from tim_report.service.build import BuildOptions, build
from tim_report.testing import make_batch, write_prime_rl_run

try:
    import pandas as pd
except ImportError:
    pd = None


@pytest.fixture(autouse=True)
def _pandas():
    if pd is None:
        skip_or_fail("pandas is not installed (pip install -e '.[notebook]')")


def test_tokens_frame_is_one_row_per_token_with_both_sides_and_where_it_sits():
    batch = make_batch(n_seqs=6, mean_len=10, noise=0.05)
    batch.mask[batch.offsets[1]] = False  # one untrained token: still a row, marked
    batch.env = np.array(["math", "code"] * 3)
    batch.turn = np.zeros(batch.n_tokens, np.int32)
    frame = tim_report.analyze(batch).tokens_frame()
    assert len(frame) == batch.n_tokens
    np.testing.assert_array_equal(frame["delta"], batch.trainer_logp - batch.rollout_logp)
    np.testing.assert_allclose(frame["ratio"], np.exp(batch.trainer_logp - batch.rollout_logp))
    first = frame[frame["sequence"] == 1]
    assert first["position"].tolist() == list(range(int(batch.seq_lengths[1])))
    assert set(first["env"]) == {"code"} and not first["trained"].iloc[0] and first["trained"].iloc[1:].all()
    assert frame.groupby("sequence").size().tolist() == batch.seq_lengths.tolist()
    assert {"turn", "group", "token_id"} <= set(frame.columns) and "token" not in frame.columns
    assert "token" in tim_report.analyze(batch).tokens_frame(text=True).columns


def test_a_report_read_back_from_json_says_how_to_get_its_tokens():
    report = tim_report.analyze(make_batch(n_seqs=4, mean_len=8))
    again = type(report).from_dict(json.loads(json.dumps(report.summary_dict(), default=str)))
    with pytest.raises(ValueError, match=r"tim_report.analyze\(tim_report.load\(path\)\).tokens_frame\(\)"):
        again.tokens_frame()
    assert "_batch" not in report.summary_dict()


def test_steps_frame_is_index_json_with_the_change_points(tmp_path):
    write_prime_rl_run(tmp_path, steps=10, n_seqs=8, mean_len=24, noise=lambda s: 0.01 if s < 6 else 0.08)
    build([tmp_path / "token_exports"], tmp_path / "site", BuildOptions(formats=("json",)))
    doc = json.loads((tmp_path / "site" / "index.json").read_text())
    site = tim_report.read_site(tmp_path / "site")
    frame = site.steps_frame()
    assert frame["step"].tolist() == list(range(10))
    assert frame["kl_k3"].tolist() == [r["kl_k3"] for r in doc["runs"]]
    assert frame["regime"].tolist() == [r["regime"] for r in doc["runs"]]
    marked = frame[frame["change_point"]]
    assert marked["step"].tolist() == sorted({c["step"] for c in doc["change_steps"]}) and 6 in marked["step"].tolist()
    assert all(marked["change_metrics"]) and all(marked["change_sentence"].str.startswith("From step"))
    assert site.run_verdict == doc["run"]["verdict"]


@pytest.mark.parametrize("content, phrase", [
    ('{"tool": "tim-report", "schema_version": 1, "runs": [{"id": "a", "kl_k3": "high"}]}', "runs[0].kl_k3 is not a number"),
    ('{"tool": "tim-report", "schema_version": 1, "runs": [7]}', "runs[0] is not an object"),
    ("[1, 2]", "is not a tim-report index.json"),
])
def test_a_corrupt_index_is_one_line_naming_it(tmp_path, content, phrase):
    (tmp_path / "index.json").write_text(content)
    with pytest.raises(BadInput, match=phrase.replace("[", r"\[").replace("]", r"\]")) as info:
        tim_report.read_site(tmp_path).steps_frame()
    assert "index.json" in str(info.value) and "\n" not in str(info.value)

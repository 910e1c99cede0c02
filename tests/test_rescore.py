"""`rescore`'s reading without a model: rescored checkpoints are candidates for the weights that sampled each lag bucket,
never links of the chain; ties are said; the stale-weights finding cites "labelled v3, looks like v1"; the command
refuses bad names and inputs in one line before any model loads. (The real versions: tests/test_rescore_lags.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
from checkpoints import MODEL
from helpers import one_line_exit_2, run

from tim_report.analysis import analyze
from tim_report.io import load, save_batch
from tim_report.testing import make_batch


def two_buckets(seed: int = 4):
    """16 sequences, the first 8 labelled v3 (lag 0, the trainer's version), the rest v1 (lag 2): side v1 close to the
    rollout on the lag-2 tokens, v3 identical to the trainer."""
    b = make_batch(n_seqs=16, mean_len=30, seed=seed)
    b.weight_version = np.array(["3"] * 8 + ["1"] * 8)
    b.meta["trainer_version"] = 3
    lag2 = np.repeat(np.arange(16) >= 8, b.seq_lengths)
    rng = np.random.default_rng(seed)
    b.sides["v1"] = np.where(lag2, b.rollout_logp + rng.normal(0, 1e-3, b.n_tokens),
                             b.trainer_logp + rng.normal(0, 0.05, b.n_tokens))
    b.sides["v3"] = b.trainer_logp.copy()
    b.meta["rescore"] = {"v1": {"model": "ckpt/v1", "dtype": "fp32", "version": 1},
                         "v3": {"model": "ckpt/v3", "dtype": "fp32", "version": 3}}
    return b, lag2


def test_each_lag_bucket_names_its_own_nearest_checkpoint():
    """A mixed-lag batch: lag 0 reads as labelled (v3 and the trainer, identical, tie), lag 2 names v1. One ranking
    over every token (the old rule) named a single checkpoint for both."""
    b, _ = two_buckets()
    report = analyze(b)
    rows = {r["lag"]: r for r in report.rescore["by_lag"]}
    assert [r["lag"] for r in report.rescore["by_lag"]] == [0, 2]
    assert rows[0]["nearest"] is None and rows[0]["tied"] == ["v3", "trainer"]
    assert rows[0]["labelled_version"] == 3 and rows[0]["looks_like_version"] == 3 and rows[0]["as_labelled"] is True
    assert rows[2]["nearest"] == "v1" and rows[2]["looks_like_version"] == 1 and rows[2]["as_labelled"] is True
    assert "lag 0: v3 and the trainer tie (all v3), as labelled; lag 2: nearest v1, as labelled" in \
        report.diagnosis["verdict"]


def test_a_planted_lag_zero_bucket_looks_like_its_real_version():
    b, lag2 = two_buckets()
    rng = np.random.default_rng(1)
    b.sides["v1"] = b.rollout_logp + rng.normal(0, 1e-3, b.n_tokens)  # v1 sampled every token, lag 0's too
    row = analyze(b).rescore["by_lag"][0]
    assert row["lag"] == 0 and row["nearest"] == "v1" and row["looks_like_version"] == 1 and row["as_labelled"] is False


def test_checkpoints_are_candidates_not_links_of_the_chain(tmp_path):
    """With an engine re-score the chain is rollout → recompute → trainer: no rescored side on it and no link share
    for one; with only rescored sides there is no chain at all. summary.json carries `rescore` either way."""
    b, _ = two_buckets()
    report = analyze(b)
    assert report.chain is None and "chain" not in report.summary_dict()
    b.sides["recompute"] = b.rollout_logp + 1e-3
    b.meta["chain"] = ["rollout", "recompute", "v1", "v3", "trainer"]  # as a file the old rescore wrote declares it
    report = analyze(b)
    assert report.chain["sides"] == ["rollout", "recompute", "trainer"]
    assert [x["label"] for x in report.chain["links"]] == ["rollout → recompute", "recompute → trainer"]
    assert "nearest" not in report.chain
    assert [c["side"] for c in report.rescore["candidates"]] == ["v1", "v3", "trainer"]  # recompute is no candidate
    step = tmp_path / "s.npz"
    save_batch(b, step)
    assert run("build", step, "-o", tmp_path / "site", "--format", "json", "--format", "md").exit_code == 0
    summary = json.loads((tmp_path / "site" / "s" / "summary.json").read_text())
    assert [r["lag"] for r in summary["rescore"]["by_lag"]] == [0, 2] and "v1" not in summary["chain"]["sides"]
    md = (tmp_path / "site" / "s" / "report.md").read_text()
    assert "<summary>Which weights the engine used</summary>" in md and "v1 →" not in md and "→ v1" not in md


def test_a_tie_is_a_tie():
    """Identical candidates tie; one the rollout is clearly nearer to is named; one that differs from another by less
    than its standard error ties too; a bucket of one sequence has no error across sequences: its candidates tie."""
    b = make_batch(n_seqs=16, mean_len=30, seed=4)
    b.meta["rescore"] = {"v0": {"model": "ckpt/v0", "dtype": "fp32"}}
    b.sides["v0"] = b.trainer_logp.copy()
    report = analyze(b)
    (row,) = report.rescore["by_lag"]
    assert row["lag"] == "unknown" and row["nearest"] is None and row["tied"] == ["v0", "trainer"]
    assert "every token: v0 and the trainer tie: these tokens cannot tell which of them sampled them" in \
        report.diagnosis["verdict"]
    rng = np.random.default_rng(0)
    b.sides["v0"] = b.rollout_logp + rng.normal(0, 1e-4, b.n_tokens)
    assert analyze(b).rescore["by_lag"][0]["nearest"] == "v0"
    b.sides["v0"] = b.trainer_logp + rng.normal(0, 1e-9, b.n_tokens)
    assert set(analyze(b).rescore["by_lag"][0]["tied"]) == {"v0", "trainer"}
    one = make_batch(n_seqs=1, mean_len=200, seed=2)
    one.meta["rescore"] = {"v0": {"model": "ckpt/v0"}}
    one.sides["v0"] = one.rollout_logp + 1e-4
    assert analyze(one).rescore["by_lag"][0]["tied"] == ["v0", "trainer"]


def test_a_rescored_side_that_scores_no_token_is_left_out_with_its_reason():
    b, _ = two_buckets()
    b.sides["v1"] = np.full(b.n_tokens, np.nan)
    report = analyze(b)
    assert "v1" in report.rescore["left_out"] and [c["side"] for c in report.rescore["candidates"]] == ["v3", "trainer"]
    b.sides["v3"] = np.full(b.n_tokens, np.nan)
    report = analyze(b)
    assert report.rescore["by_lag"] == [] and set(report.rescore["left_out"]) == {"v1", "v3"}
    assert "Which weights" not in report.diagnosis["verdict"]


def test_the_stale_weights_finding_says_labelled_and_looks_like():
    """Lag 0 beyond its band, and a rescored v1 the rollout is nearest to: the finding's evidence and title carry it."""
    b = make_batch(n_seqs=32, mean_len=40, noise=0.3, seed=3)
    b.weight_version = np.array(["3"] * 32)
    b.meta.update(trainer_version=3, rescore={"v1": {"model": "ckpt/v1", "dtype": "fp32", "version": 1}})
    b.sides["v1"] = b.rollout_logp + np.random.default_rng(0).normal(0, 1e-3, b.n_tokens)
    stale = next(f for f in analyze(b).diagnosis["findings"] if f["id"] == "stale_weights")
    assert stale["evidence"]["labelled_version"] == 3 and stale["evidence"]["rescored_looks_like_version"] == 1
    assert "rescored, they are labelled v3 and look like v1" in stale["title"]
    b.meta["rescore"] = "v1"  # a meta that is not rescore's: no candidate, no claim
    report = analyze(b)
    assert report.rescore is None
    assert "rescored_looks_like_version" not in next(f for f in report.diagnosis["findings"]
                                                     if f["id"] == "stale_weights")["evidence"]


def test_page_shows_which_weights(tmp_path):
    b, _ = two_buckets()
    step = tmp_path / "s.npz"
    save_batch(b, step)
    assert run("build", step, "-o", tmp_path / "site", "--format", "html").exit_code == 0
    page = (tmp_path / "site" / "s" / "index.html").read_text()
    assert 'id="weights"' in page and "Which weights the engine used" in page and "ckpt/v1 (fp32)" in page


def step_with_ids(tmp_path, **meta):
    b = make_batch(n_seqs=4, mean_len=8, seed=0)
    b.token_ids = np.zeros(b.n_tokens, np.int64) + 5
    b.prompt_ids = [np.array([1, 2, 3])] * b.n_seqs
    b.meta.update(meta)
    return b


@pytest.mark.parametrize("case", ["as_count", "same_name", "same_folder", "role", "recompute", "existing_side",
                                  "meta_not_object"])
def test_bad_names_are_one_line_before_any_model_loads(tmp_path, case):
    b = step_with_ids(tmp_path)
    m = str(MODEL)
    args = {"as_count": ["--model", m, "--model", m, "--as", "a"],
            "same_name": ["--model", m, "--as", "a", "--model", m, "--as", "a"],
            "same_folder": ["--model", m, "--model", m],
            "role": ["--model", m, "--as", "train"],
            "recompute": ["--model", m, "--as", "recompute"],
            "existing_side": ["--model", m, "--as", "probe"],
            "meta_not_object": ["--model", m, "--as", "v1"]}[case]
    if case == "existing_side":
        b.sides["probe"] = b.trainer_logp.copy()  # a side of the batch's own, not a rescored checkpoint
    if case == "meta_not_object":
        b.meta["rescore"] = ["v1"]
    step, out = tmp_path / "step.npz", tmp_path / "out.npz"
    save_batch(b, step)
    res = run("rescore", step, *args, "-o", out)
    phrase = {"as_count": "give one per --model", "same_name": "two checkpoints", "same_folder": "two checkpoints",
              "role": "'train' is a role", "recompute": "'recompute' is a role", "existing_side": "already a side",
              "meta_not_object": "meta 'rescore' is a list"}[case]
    one_line_exit_2(res, phrase)
    assert not out.exists() and set(load(step).sides) == set(b.sides)


def one_step_off_rescored(near: float, labelled: float, seed: int = 3):
    """A one-step-off step (every token lag 1: labelled v2, trainer v3) rescored by v0 and v2: side v0 `near` nats of
    noise from the rollout, v2 (the labelled version's own weights) `labelled`."""
    b = make_batch(n_seqs=16, mean_len=30, noise=0.1, seed=seed)
    b.weight_version = np.array(["2"] * 16)
    b.meta["trainer_version"] = 3
    rng = np.random.default_rng(seed)
    b.sides["v0"] = np.minimum(b.rollout_logp + rng.normal(0, near, b.n_tokens), 0.0)
    b.sides["v2"] = np.minimum(b.rollout_logp + rng.normal(0, labelled, b.n_tokens), 0.0)
    b.meta["rescore"] = {"v0": {"model": "ckpt/v0", "dtype": "fp32", "version": 0},
                         "v2": {"model": "ckpt/v2", "dtype": "fp32", "version": 2}}
    return b


def test_a_rescore_that_shows_the_engine_held_other_weights_is_stale_weights_at_any_lag(tmp_path):
    """A one-step-off step whose tokens, labelled v2, lie at the floor of v0 and far from v2's own weights read
    "Staleness at lag 1 … no finding points at the engines … lag 1: nearest v0 (labelled v2): the engine's tokens look
    like v0", and `check` exited 0: the rescore showed the sync fault and nothing said it. It is `stale_weights`,
    cause first; an honest step, a near tie and a rescore without the labelled version's weights raise nothing."""
    report = analyze(one_step_off_rescored(1e-3, 0.05))
    stale = next(f for f in report.diagnosis["findings"] if f["id"] == "stale_weights")
    assert stale["severity"] == "error" and report.diagnosis["regime"] == "systematic"
    assert stale["evidence"]["rescored_lag"] == 1 and stale["evidence"]["rescored_looks_like_version"] == 0
    assert stale["title"].startswith("Stale weights: rescored, the tokens labelled lag 1 (v2) look like v0: v0's KL k3")
    assert "no finding points at the engines" not in report.diagnosis["verdict"]
    step = tmp_path / "step.npz"
    save_batch(one_step_off_rescored(1e-3, 0.05), step)
    res = run("check", step)
    assert res.exit_code == 1 and "stale weights (rescored: labelled v2, looks like v0)" in res.output, res.output
    for honest in (one_step_off_rescored(0.05, 1e-3), one_step_off_rescored(1e-3, 1.3e-3)):
        assert "stale_weights" not in {f["id"] for f in analyze(honest).diagnosis["findings"]}
    without = one_step_off_rescored(1e-3, 0.05)
    del without.sides["v2"], without.meta["rescore"]["v2"]  # nearest v0 of v0 and the trainer: v2 was not tried
    assert "stale_weights" not in {f["id"] for f in analyze(without).diagnosis["findings"]}

"""`rescore` with several real versions of the tiny model (real Adam steps, tests/conftest.py's session fixtures) on
mixed-lag batches: each lag bucket names the checkpoint that really sampled it, lag 0 first. Each test loads a few
models: slow."""

from __future__ import annotations

import json

import pytest
from checkpoints import MODEL
from helpers import run

from tim_report.io import save_batch
from tim_report.testing import sample_versioned_batch

pytestmark = pytest.mark.slow


def rescored(tmp_path, tiny_versions, tiny_checkpoints, lags, sampled_by, checkpoints):
    """A batch sampled per lag by `sampled_by` (labelled honestly by `lags`, trainer v3), rescored in one call by the
    checkpoint folders `checkpoints` (indices into v0..v3)."""
    b = sample_versioned_batch(tiny_versions, lags, model_dir=str(MODEL), sampled_by=sampled_by, new_tokens=32)
    step, out = tmp_path / "step.npz", tmp_path / "rescored.npz"
    save_batch(b, step)
    if 0 in checkpoints:  # v0 is models/tiny-qwen2 itself: name each checkpoint (--as once per --model)
        args = [x for v in checkpoints for x in ("--model", tiny_checkpoints[v], "--as", f"v{v}")]
    else:  # named by their folders: v1, v2, v3
        args = [x for v in checkpoints for x in ("--model", tiny_checkpoints[v])]
    res = run("rescore", step, *args, "-o", out)
    assert res.exit_code == 0, res.output
    return res.stdout.splitlines(), out


def summary_of(tmp_path, out, *formats):
    site = tmp_path / "site"
    assert run("build", out, "-o", site, *[x for f in formats for x in ("--format", f)]).exit_code == 0
    return json.loads((site / "rescored" / "summary.json").read_text()), site / "rescored"


def test_half_v1_half_v3_labelled_honestly(tmp_path, tiny_versions, tiny_checkpoints):
    """Lag 0 sampled by v3 (the trainer's version), lag 2 by v1, rescored by v1, v2 and v3 (names from the folders):
    lag 0 reads v3 as labelled (tied with the trainer, the same weights), lag 2 names v1. One ranking over every token
    named one checkpoint for the whole batch."""
    lines, out = rescored(tmp_path, tiny_versions, tiny_checkpoints, [0, 2], [3, 1], [1, 2, 3])
    assert lines[0].startswith(f"{out}: scored v1 by ") and "(fp32), 16 sequences, 512 tokens" in lines[0]
    assert lines[1].startswith("  lag 0: v3 and the trainer tie (all v3), as labelled; KL k3 against the rollout: ")
    assert lines[2].startswith("  lag 2: nearest v1, as labelled; KL k3 against the rollout: v1 ")
    summary, _ = summary_of(tmp_path, out, "json")
    rows = summary["rescore"]["by_lag"]
    assert [(r["lag"], r["labelled_version"], r["looks_like_version"], r["as_labelled"]) for r in rows] == \
        [(0, 3, 3, True), (2, 1, 1, True)]
    kl = {x["side"]: x["kl_k3"] for x in rows[1]["by_side"]}
    assert kl["v1"] * 5 < kl["v2"] < kl["v3"]  # bf16 against fp32 at v1; one, then two versions' training away
    assert "chain" not in summary  # checkpoints are candidates, not links: no share between them


def test_a_lag_zero_bucket_planted_from_an_older_version(tmp_path, tiny_versions, tiny_checkpoints):
    """Lag 0 labelled v3 but sampled by v0 (a sync that never arrived), lag 1 honestly v2: rescored by v0, v2 and v3,
    lag 0 looks like v0, lag 1 reads as labelled, and the stale-weights finding says it."""
    lines, out = rescored(tmp_path, tiny_versions, tiny_checkpoints, [0, 1], [0, 2], [0, 2, 3])
    assert lines[1].startswith("  lag 0: nearest v0 (labelled v3): the engine's tokens look like v0; "), lines
    assert lines[2].startswith("  lag 1: nearest v2, as labelled; "), lines
    summary, page = summary_of(tmp_path, out, "json", "md", "html")
    lag0 = summary["rescore"]["by_lag"][0]
    assert (lag0["nearest"], lag0["labelled_version"], lag0["looks_like_version"], lag0["as_labelled"]) == \
        ("v0", 3, 0, False)
    stale = next(f for f in summary["diagnosis"]["findings"] if f["id"] == "stale_weights")
    assert stale["evidence"]["rescored_looks_like_version"] == 0 and "labelled v3 and look like v0" in stale["title"]
    assert "lag 0: nearest v0 (labelled v3): the engine's tokens look like v0" in summary["diagnosis"]["verdict"]
    md = (page / "report.md").read_text()
    assert "<summary>Which weights the engine used</summary>" in md and "looks like v0" in md
    assert "Which weights the engine used" in (page / "index.html").read_text()


def test_a_one_step_off_step_sampled_by_v0_is_stale_weights_once_rescored(tmp_path, tiny_versions, tiny_checkpoints):
    """A one-step-off step (every token lag 1, labelled v2) that v0 sampled (an engine that never took an update):
    alone it reads "staleness" (no lag-0 token to judge), rescored by v0 and v2 it is `stale_weights`, cause first,
    and `check` fails; sampled by v2 as labelled, the same rescore raises nothing."""
    lines, out = rescored(tmp_path, tiny_versions, tiny_checkpoints, [1], [0], [0, 2])
    assert lines[1].startswith("  lag 1: nearest v0 (labelled v2): the engine's tokens look like v0; "), lines
    summary, _ = summary_of(tmp_path, out, "json")
    stale = summary["diagnosis"]["findings"][0]
    assert stale["id"] == "stale_weights" and stale["severity"] == "error", summary["diagnosis"]["findings"]
    assert stale["title"].startswith("Stale weights: rescored, the tokens labelled lag 1 (v2) look like v0"), stale["title"]
    assert run("check", out).exit_code == 1
    honest = tmp_path / "honest"
    honest.mkdir()
    _, out = rescored(honest, tiny_versions, tiny_checkpoints, [1], [2], [0, 2])
    assert run("check", out).exit_code == 0

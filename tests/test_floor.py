"""The trainer's own floor: the trainer scores the same tokens twice under two batch compositions; the report puts
that floor beside the rollout-vs-trainer mismatch."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import CI

from tim_report.analysis import analyze
from tim_report.capture import CaptureOptions, EngineSpec, capture
from tim_report.capture.spec import Sampling
from tim_report.cli import main
from tim_report.io import load, save_batch
from tim_report.testing import make_batch

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "tiny-qwen2"
PROMPTS = REPO / "examples" / "prompts.jsonl"
BF16, FP32 = EngineSpec("hf", "bf16"), EngineSpec("hf", "fp32")


def with_floor(noise_floor: float, noise: float = 0.01, seed: int = 0):
    """A batch whose trainer disagrees with itself by `noise_floor` nats (Gaussian) per token."""
    b = make_batch(n_seqs=64, mean_len=64, noise=noise, seed=seed)
    rng = np.random.default_rng(seed + 1)
    b.floor_logp = np.minimum(b.trainer_logp + noise_floor * rng.standard_normal(b.n_tokens), 0.0)
    return b


def test_no_floor_says_how_to_get_one():
    fl = analyze(make_batch(n_seqs=8)).diagnosis["trainer_floor"]
    assert fl["available"] is False and "--trainer-floor" in fl["how_to_get"]


def test_a_small_floor_explains_little_and_stays_inside_the_clip_band():
    r = analyze(with_floor(1e-4))
    fl = r.diagnosis["trainer_floor"]
    assert fl["available"] and fl["kl_share"] < 0.01 and fl["clip_fraction"] == 0 and not fl["clip_inside_floor"]
    f = next(f for f in r.diagnosis["findings"] if f["id"] == "trainer_floor")
    assert f["severity"] == "info" and "clip band" not in f["likely_cause"]


def test_a_floor_as_large_as_the_mismatch_explains_it_and_crosses_the_clip_band():
    """k3 ≈ σ²/2: a floor of σ = 0.3 nats dwarfs a mismatch of σ ≈ 0.01–0.05, and |φ| crosses the clip band on a large share of tokens."""
    r = analyze(with_floor(0.3))
    fl = r.diagnosis["trainer_floor"]
    assert fl["kl_share"] > 5 and 0.01 < fl["kl_k3"] < 0.3 ** 2 / 2  # σ²/2, less where min(·, 0) cuts the noise
    assert 0.2 < fl["clip_fraction"] < 0.7 and fl["clip_inside_floor"] and fl["tis_inside_floor"]
    f = next(f for f in r.diagnosis["findings"] if f["id"] == "trainer_floor")
    assert f["severity"] == "warn" and "sits inside the floor" in f["likely_cause"]


def test_the_floor_round_trips_through_the_canonical_file(tmp_path):
    b = with_floor(0.01)
    save_batch(b, tmp_path / "b.npz")
    back = load(tmp_path / "b.npz")
    np.testing.assert_array_equal(back.floor_logp, b.floor_logp)


def test_page_and_markdown_show_the_floor(tmp_path):
    save_batch(with_floor(0.3), tmp_path / "b.npz")
    r = CliRunner().invoke(main, ["build", str(tmp_path / "b.npz"), "-o", str(tmp_path / "site")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "site" / "b" / "index.html").read_text()
    assert "The trainer&#39;s own floor" in html or "The trainer's own floor" in html
    assert "The clip band sits inside the floor" in html
    assert "The trainer's own floor" in (tmp_path / "site" / "b" / "report.md").read_text()


@pytest.mark.skipif(not (MODEL / "model.safetensors").exists() and not CI, reason="models/tiny-qwen2 not present")
def test_capture_measures_a_floor_that_batch_composition_moves():
    """On the tiny model on CPU, bf16 scoring one sequence per micro-batch differs from packed, padded micro-batches
    (another reduction order); fp32 differs far less. The floor is measured, not assumed."""
    opts = CaptureOptions(model=str(MODEL), prompts=str(PROMPTS), rollouts=[FP32], trainers=[BF16, FP32],
                          sampling=Sampling(max_new_tokens=24, n_samples=2), max_prompts=4, device="cpu",
                          trainer_floor=True)
    batches = capture(opts)
    bf16, fp32 = batches[(FP32, BF16)], batches[(FP32, FP32)]
    phi16 = np.abs(bf16.trainer_logp - bf16.floor_logp)
    phi32 = np.abs(fp32.trainer_logp - fp32.floor_logp)
    assert phi16.max() > 1e-3  # bf16: batch composition moves the trainer's log-probs
    assert phi32.max() < phi16.max() / 100
    assert "one sequence per micro-batch" in bf16.meta["trainer_floor"]["composition"]
    fl = analyze(bf16).diagnosis["trainer_floor"]
    assert fl["available"] and 0 < fl["kl_k3"] and fl["kl_share"] is not None and math.isfinite(fl["kl_share"])


def test_assert_logprobs_match_takes_a_measured_floor_instead_of_a_band():
    from tim_report import assert_logprobs_match
    from tim_report.assertions import LogprobsMismatch, compare_logprobs

    rng = np.random.default_rng(3)
    ref = -0.05 - rng.exponential(1.0, (16, 64))

    def noisy(sigma):
        return np.minimum(ref + sigma * rng.standard_normal(ref.shape), 0.0)

    floor = noisy(1e-3)  # the reference against itself: ~1e-3 nats
    like_floor = noisy(1e-3)
    assert not compare_logprobs(ref, like_floor, precision="fp32").passed  # the fp32 band is far tighter
    result = assert_logprobs_match(ref, like_floor, floor=floor)
    assert result.band.name == "measured floor" and "against itself" in result.band.source
    with pytest.raises(LogprobsMismatch, match="measured floor"):
        assert_logprobs_match(ref, noisy(1e-2), floor=floor)
    with pytest.raises(ValueError, match="floor has shape"):
        assert_logprobs_match(ref, like_floor, floor=floor[:2])

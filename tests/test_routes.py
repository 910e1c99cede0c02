"""Routing agreement: both sides' routed experts compared token by token and layer by layer, counted exactly on
constructed routes and measured on the tiny MoE the project makes (bf16 against fp32 flips some)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import CI

from tim_report.analysis import analyze
from tim_report.io import load, save_batch
from tim_report.testing import make_batch

REPO = Path(__file__).resolve().parent.parent
MOE = REPO / "models" / "tiny-mixtral"
PROMPTS = REPO / "examples" / "prompts.jsonl"


def routed(flip_rows=(), layers=3, k=2, seed=0):
    """A batch whose two sides route every token alike, except the tokens `flip_rows` at layer 1 (one expert
    swapped), whose trainer log-probs are also 0.3 nats off."""
    b = make_batch(n_seqs=16, mean_len=32, noise=0.001, seed=seed)
    rng = np.random.default_rng(seed)
    ro = np.stack([rng.permutation(8)[:k] for _ in range(b.n_tokens * layers)]).reshape(b.n_tokens, layers, k)
    tr = ro[:, :, ::-1].copy()  # the same sets in another order: not a flip
    for t in flip_rows:
        tr[t, 1, 0] = next(e for e in range(8) if e not in ro[t, 1])
        b.trainer_logp[t] = b.rollout_logp[t] - 0.3
    b.rollout_routes, b.trainer_routes = ro, tr
    return b


def test_flips_are_counted_exactly_per_layer_and_per_token():
    b = routed(flip_rows=range(0, 100, 10))
    ra = analyze(b).diagnosis["routing_agreement"]
    n = b.n_tokens
    assert ra["available"] and (ra["layers"], ra["k"]) == (3, 2)
    assert ra["layer_flip_share"] == [0.0, pytest.approx(10 / n), 0.0]
    assert ra["any_flip_share"] == pytest.approx(10 / n) and ra["decision_flip_share"] == pytest.approx(10 / (3 * n))
    assert ra["kl_k3_flipped"] > 100 * ra["kl_k3_unflipped"] and ra["kl_explained"] > 0.9
    f = next(f for f in analyze(b).diagnosis["findings"] if f["id"] == "routing_flips")
    assert f["severity"] == "warn" and "routing explains" in f["title"]


def test_identical_routes_say_routing_replay():
    ra = analyze(routed()).diagnosis["routing_agreement"]
    assert ra["identical"] and ra["any_flip_share"] == 0 and ra["kl_explained"] is None
    f = next(f for f in analyze(routed()).diagnosis["findings"] if f["id"] == "routing_flips")
    assert f["severity"] == "info" and "routing replay (R3)" in f["title"]


def test_one_side_empty_and_misaligned_routes_say_what_they_hold():
    b = routed()
    b.trainer_routes = None
    ra = analyze(b).diagnosis["routing_agreement"]
    assert not ra["available"] and "rollout side's routed experts only" in ra["reason"]
    b = routed()
    b.trainer_routes = b.trainer_routes[:-3]
    d = analyze(b).diagnosis
    assert "misaligned" in d["routing_agreement"]["reason"]
    assert next(f for f in d["findings"] if f["id"] == "routes_unusable")["severity"] == "warn"
    b = routed()
    b.rollout_routes = np.zeros((b.n_tokens, 0, 2), np.int32)
    assert "empty" in analyze(b).diagnosis["routing_agreement"]["reason"]


def test_routes_round_trip_through_the_canonical_file(tmp_path):
    b = routed(flip_rows=[3])
    save_batch(b, tmp_path / "r.npz")
    back = load(tmp_path / "r.npz")
    assert np.array_equal(back.rollout_routes, b.rollout_routes) and np.array_equal(back.trainer_routes, b.trainer_routes)


@pytest.mark.skipif(not (MOE / "model.safetensors").exists() and not CI, reason="models/tiny-mixtral not present")
def test_bf16_against_fp32_on_the_tiny_moe_flips_routes_that_carry_the_kl():
    from tim_report.capture import CaptureOptions, EngineSpec, capture
    from tim_report.capture.spec import Sampling

    fp32, bf16 = EngineSpec("hf", "fp32"), EngineSpec("hf", "bf16")
    opts = CaptureOptions(model=str(MOE), prompts=str(PROMPTS), rollouts=[fp32, bf16], trainers=[fp32], routes=True,
                          sampling=Sampling(max_new_tokens=24, n_samples=2), max_prompts=4, device="cpu", top_k_logprobs=0)
    batches = capture(opts)
    b = batches[(bf16, fp32)]  # bf16 re-scores fp32's samples: both sides' routes recorded
    assert b.rollout_routes.shape == b.trainer_routes.shape == (b.n_tokens, 2, 2)
    ra = analyze(b).diagnosis["routing_agreement"]
    assert 0 < ra["any_flip_share"] < 0.5 and ra["kl_k3_flipped"] > ra["kl_k3_unflipped"]
    same = batches[(fp32, fp32)]  # the sampler's routes are not recorded: one side only, said so
    assert same.rollout_routes is None and "trainer side's routed experts only" in analyze(same).diagnosis["routing_agreement"]["reason"]

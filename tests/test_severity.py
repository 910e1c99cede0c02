"""Severity by consequence and the side at fault, on batches whose truth is known (issue 33).

A constant trainer offset of −0.001 or −0.01 nats is a real systematic effect but immaterial to PPO and TIS: a warn
that says why it is small and from which length a sequence-level cap would fire, never "Do not train". The same
shape at −0.1 nats, and every bug fixture, stays an error. The side is named, or undetermined with the evidence and
the tokens that would decide it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import tim_report
from tim_report.analysis import analyze
from tim_report.testing import make_batch, make_sampled_batch, shifted


def offset(noise: float, nats: float):
    b = make_batch(noise=noise)
    return replace(b, trainer_logp=b.trainer_logp + nats)


def lead(report) -> dict:
    return report.diagnosis["findings"][0]


@pytest.mark.parametrize("nats", [-0.001, -0.01])
@pytest.mark.parametrize("noise", [0.0, 1e-4])
def test_a_tiny_constant_offset_is_a_warn_never_do_not_train(noise, nats):
    batch = offset(noise, nats)
    r = analyze(batch)
    d = r.diagnosis
    assert d["regime"] == "elevated"
    assert not [f for f in d["findings"] if f["severity"] == "error"]
    assert r.routing.get("blocked_by_bug") is None and "Do not train" not in tim_report.analyze(batch).to_markdown()
    f = lead(r)
    assert f["id"] == "processed_logprobs" and f["severity"] == "warn"
    c = f["consequence"]
    assert not c["material"] and c["ppo_clip_share"] == 0 and c["outside_cap_share"] == 0
    assert c["bias"] == pytest.approx(nats, rel=0.05)
    assert c["cap_length"] == pytest.approx(math.log(2) / abs(nats), rel=0.05)  # 693 and 69 tokens
    assert c["seq_weight_p90"] == pytest.approx(math.exp(c["bias"] * c["p90_length"]), rel=1e-9)
    assert f["consequence_text"].startswith("Small: per-token bias")
    assert f"from {round(math.log(2) / abs(nats))} tokens on" in f["consequence_text"]
    # a constant offset moves both mean ratios alike: no token count says which side it is on
    assert f["side"]["side"] == "undetermined" and f["side"]["tokens_to_decide"] is None
    assert f["side_text"].startswith("Side: undetermined") and "no token count decides it" in f["side_text"]


def test_the_small_offset_says_when_it_stops_being_small():
    f = lead(analyze(offset(0.0, -0.001)))
    assert f["consequence"]["cap_length"] > f["consequence"]["p90_length"]
    assert "It stops being small at longer sequences" in f["consequence_text"]
    f = lead(analyze(offset(0.0, -0.01)))  # 69 tokens, under the batch's p90 of ~175: sequence-level IS already feels it
    assert "With sequence-level importance sampling it already matters" in f["consequence_text"]


def test_a_large_offset_is_material_and_blocks_training():
    r = analyze(offset(0.0, -0.1))
    f = lead(r)
    assert f["severity"] == "error" and f["consequence"]["material_by"] == ["bias"]
    assert f["consequence_text"].startswith("Material: the per-token bias −0.1 nats is 2× the dense bf16 band")
    assert r.diagnosis["regime"] == "systematic" and r.routing["blocked_by_bug"]


@pytest.mark.parametrize("noise", [0.002, 0.01, 0.03])
def test_noise_states_no_consequence(noise):
    d = analyze(make_batch(noise=noise, seed=3)).diagnosis
    assert d["regime"] == "numerical_noise"
    assert not [f for f in d["findings"] if "consequence" in f]


def test_an_off_by_one_is_material_and_its_side_is_the_alignment():
    f = lead(analyze(shifted(make_batch(n_seqs=16, mean_len=64))))
    assert f["id"] == "shift" and f["severity"] == "error"
    assert f["consequence"]["ppo_clip_share"] > 0.5 and "tokens" in f["consequence"]["material_by"]
    assert f["side"] == {"side": "undetermined", "basis": "alignment", "tokens_to_decide": None,
                         **{k: f["side"][k] for k in f["side"] if k not in ("side", "basis", "tokens_to_decide")}}
    assert "token ids each side scored" in f["side_text"]


def test_a_mild_temperature_names_its_side_on_8000_tokens():
    """T = 0.8 on the rollout (trainer at T = 1): the rollout's mean ratio is 1, the trainer's inverse is not."""
    b = make_sampled_batch(0.8, "rollout", n_seqs=130)
    f = next(f for f in analyze(b).diagnosis["findings"] if f["id"] == "temperature")
    assert b.n_tokens > 8000 and f["severity"] == "error"
    assert f["side"]["side"] == "trainer" and f["side_text"].startswith("Side: the trainer")
    f = next(f for f in analyze(make_sampled_batch(0.8, "trainer", n_seqs=130)).diagnosis["findings"]
             if f["id"] == "temperature")
    assert f["side"]["side"] == "rollout"


def test_an_undecided_side_says_how_many_tokens_would_decide_it():
    b = make_sampled_batch(0.8, "rollout", n_seqs=8)
    f = next(f for f in analyze(b).diagnosis["findings"] if f["id"] == "temperature")
    s = f["side"]
    assert s["side"] == "undetermined" and s["tokens"] < s["tokens_to_decide"] < 20 * s["tokens"]
    assert "tokens would decide it" in f["side_text"] and f"{s['tokens']:,} tokens" in f["side_text"]
    # the estimate holds: with that many tokens the side is named
    more = make_sampled_batch(0.8, "rollout", n_seqs=8 * math.ceil(2 * s["tokens_to_decide"] / s["tokens"]), seed=1)
    f = next(f for f in analyze(more).diagnosis["findings"] if f["id"] == "temperature")
    assert f["side"]["side"] == "trainer"

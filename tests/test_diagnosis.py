"""Diagnosis on synthetic batches: schema, clean noise never warns, each detector fires on its fault.

The real-logit fault fixtures (tests/data/faults) are in test_diagnosis_faults.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tim_report.analysis import analyze
from tim_report.config import FINDING_IDS, REGIMES, SEVERITIES, DiagnosisThresholds
from tim_report.model import StepBatch
from tim_report.model import dumps
from tim_report.testing import make_batch


def diag(batch: StepBatch, **kw) -> dict:
    return analyze(batch, **kw).diagnosis


def ids(d: dict, severities=("warn", "error")) -> set[str]:
    return {f["id"] for f in d["findings"] if f["severity"] in severities}


def with_trainer(batch: StepBatch, trainer: np.ndarray, **kw) -> StepBatch:
    return replace(batch, trainer_logp=np.minimum(trainer, 0.0), **kw)


def test_schema_is_what_the_renderers_read():
    d = diag(make_batch(n_seqs=16, mean_len=64, noise=0.01))
    assert set(d) >= {"regime", "verdict", "evidence", "what_to_check", "findings", "precision_gap"}
    assert d["regime"] in REGIMES
    assert isinstance(d["verdict"], str) and d["verdict"].endswith(".") and "\n" not in d["verdict"]
    assert all(isinstance(v, (int, float)) or v is None for v in d["evidence"].values())
    assert d["precision_gap"]["available"] is False
    assert "capture --shadow" in d["precision_gap"]["how_to_get"]
    json.loads(dumps(d))  # JSON-able, no NaN


def test_finding_schema_on_a_fault():
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    d = diag(with_trainer(b, np.roll(b.trainer_logp, -1)))
    assert d["findings"]
    for f in d["findings"]:
        assert set(f) == {"id", "severity", "title", "problem", "evidence", "likely_cause", "what_to_check"}
        assert f["id"] in FINDING_IDS and f["severity"] in SEVERITIES
        assert all(isinstance(v, (int, float)) or v is None for v in f["evidence"].values())


def test_identical():
    b = make_batch(n_seqs=8, mean_len=32)
    d = diag(with_trainer(b, b.rollout_logp.copy()))
    assert d["regime"] == "identical" and d["findings"] == []
    assert d["verdict"].startswith("Identical")


@pytest.mark.parametrize("n_seqs,mean_len", [(1, 4), (2, 16), (8, 64), (64, 128), (256, 256)])
@pytest.mark.parametrize("noise", [0.002, 0.01, 0.03])
def test_clean_noise_never_warns(n_seqs, mean_len, noise):
    d = diag(make_batch(n_seqs=n_seqs, mean_len=mean_len, noise=noise, seed=n_seqs))
    assert not ids(d), d["findings"]
    assert d["regime"] == "numerical_noise", d["verdict"]


@settings(max_examples=40, deadline=None)
@given(n_seqs=st.integers(1, 40), mean_len=st.integers(2, 200), noise=st.floats(1e-4, 0.03), seed=st.integers(0, 10**6))
def test_clean_noise_never_warns_property(n_seqs, mean_len, noise, seed):
    b = make_batch(n_seqs=n_seqs, mean_len=mean_len, noise=noise, seed=seed)
    d = diag(b)
    assert not ids(d), d["findings"]
    if b.n_tokens >= 64:  # on a handful of tokens a 2-SE margin is itself noisy: 2 tokens at 0.08 nats may read elevated
        assert d["regime"] in ("numerical_noise", "identical")


def _shift(batch: StepBatch, k: int) -> np.ndarray:
    """trainer[t] = trainer[t+k] within each sequence (edge tokens keep their own value)."""
    tr = batch.trainer_logp
    out = tr.copy()
    seq = batch.seq_index()
    src = np.arange(tr.shape[0]) + k
    ok = (src >= 0) & (src < tr.shape[0])
    ok[ok] &= seq[src[ok]] == seq[ok]
    out[ok] = tr[src[ok]]
    return out


@pytest.mark.parametrize("k", [1, -1])
def test_shift(k):
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    d = diag(with_trainer(b, _shift(b, k)))
    f = next(f for f in d["findings"] if f["id"] == "shift")
    assert f["severity"] == "error" and f["evidence"]["shift"] == k
    assert d["regime"] == "systematic"
    assert "one_side_broken" not in ids(d)


@pytest.mark.parametrize("t", [0.7, 0.8, 1.2, 1.5])
def test_temperature(t):
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    # rollout tempered at t, trainer at 1: trainer = t·rollout (+ the per-position normaliser, 0 here)
    d = diag(with_trainer(b, t * b.rollout_logp + (b.trainer_logp - b.rollout_logp)))
    f = next(f for f in d["findings"] if f["id"] == "temperature")
    assert f["evidence"]["temperature_ratio"] == pytest.approx(t, abs=0.05)
    assert d["regime"] == "systematic"


def test_processed_logprobs():
    b = make_batch(n_seqs=16, mean_len=64, noise=0.0)
    rng = np.random.default_rng(0)
    kept = np.where(rng.random(b.n_tokens) < 0.4, 0.0, rng.uniform(np.log(0.9), 0, b.n_tokens))  # log kept mass
    ro = np.minimum(b.rollout_logp - kept, 0.0)  # renormalised: rollout ≥ trainer
    ro[rng.random(b.n_tokens) < 0.1] = 0.0
    d = diag(replace(b, rollout_logp=ro, trainer_logp=np.minimum(b.rollout_logp, ro)))
    assert "processed_logprobs" in ids(d, ("error",))
    assert "temperature" not in ids(d)


def test_dummy_zero():
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    ro = b.rollout_logp.copy()
    tool = np.zeros(b.n_tokens, bool)
    tool[b.offsets[0] + 3:b.offsets[0] + 13] = True
    ro[tool] = 0.0
    tr = b.trainer_logp.copy()
    tr[tool] = -3.0
    d = diag(replace(b, rollout_logp=ro, trainer_logp=tr))
    f = next(f for f in d["findings"] if f["id"] == "dummy_zero")
    assert f["severity"] == "error" and f["evidence"]["tokens"] == 10 and f["evidence"]["in_runs_share"] == 1.0
    # masking the tool tokens out fixes it
    d2 = diag(replace(b, rollout_logp=ro, trainer_logp=tr, mask=~tool))
    assert not ids(d2)


def test_one_side_broken():
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    rng = np.random.default_rng(3)
    d = diag(with_trainer(b, -rng.exponential(4.0, b.n_tokens)))
    f = next(f for f in d["findings"] if f["id"] == "one_side_broken")
    assert f["severity"] == "error" and f["evidence"]["ppl_ratio"] > 3
    assert d["regime"] == "systematic" and "trainer" in f["title"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy says exp overflowed: it did, to inf
def test_a_side_with_log_probs_of_minus_thousands_does_not_overflow():
    # a broken kernel can give log-probs far below −709, where exp(−mean logp) overflows a float
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    d = diag(with_trainer(b, b.rollout_logp * 1000 - 2000))
    assert d["regime"] == "systematic" and "one_side_broken" in ids(d, ("error",))
    json.loads(dumps(d))


def test_small_batches_do_not_fire_statistical_detectors():
    b = make_batch(n_seqs=2, mean_len=8, noise=0.01)
    d = diag(with_trainer(b, 1.3 * b.rollout_logp))
    assert "temperature" not in ids(d)  # 16 tokens are too few to claim a temperature


def test_elevated_without_a_specific_fault():
    b = make_batch(n_seqs=32, mean_len=64, noise=0.15, seed=4)
    d = diag(b)
    assert d["regime"] == "elevated" and not ids(d, ("error",))
    assert d["what_to_check"]


def test_drift_with_length():
    b = make_batch(n_seqs=64, mean_len=128, noise=0.01, seed=5)
    d = diag(with_trainer(b, b.trainer_logp - 0.015))  # a small signed bias: not one-sided enough for processed_logprobs
    f = next(f for f in d["findings"] if f["id"] == "drift_with_length")
    assert f["severity"] == "warn" and f["evidence"]["exponent"] > 0.75


def test_thresholds_are_overridable():
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    tr = _shift(b, 1)
    strict = DiagnosisThresholds().override({"shift_ratio": "0.0001"})
    assert "shift" not in ids(diag(with_trainer(b, tr), diagnosis_thresholds=strict))
    assert diag(b, diagnosis_thresholds=strict)["thresholds"]["shift_ratio"] == 0.0001
    with pytest.raises(KeyError):
        DiagnosisThresholds().override({"nope": "1"})


def test_precision_gap_with_shadow():
    b = make_batch(n_seqs=16, mean_len=64, noise=0.0)
    rng = np.random.default_rng(1)
    beta = 0.3 * rng.standard_normal(b.n_tokens)  # large enough to clip
    alpha = 0.01 * rng.standard_normal(b.n_tokens)
    shadow = np.minimum(b.rollout_logp + alpha, 0.0)
    tr = np.minimum(shadow + beta, 0.0)
    adv = np.repeat(rng.standard_normal(b.n_seqs), b.seq_lengths)
    d = diag(replace(b, trainer_logp=tr, shadow_logp=shadow, advantage=adv))
    g = d["precision_gap"]
    assert g["available"] and g["beta_share_sq"] > 0.9
    lo, hi = math.log(0.8), math.log(1.28)
    b_ = tr - shadow
    assert g["clip_fraction_beta"] == pytest.approx(np.mean((b_ < lo) | (b_ > hi)))
    assert abs(g["corr_beta_advantage"]) < 0.2
    assert sum(r["tokens"] for r in g["by_probability"]) == b.n_tokens
    f = next(f for f in d["findings"] if f["id"] == "precision_gap")
    assert f["severity"] == "info"
    # configurable ε
    g2 = analyze(replace(b, trainer_logp=tr, shadow_logp=shadow),
                 thresholds=__import__("tim_report.analysis", fromlist=["Thresholds"]).Thresholds(ppo_eps_low=0.5, ppo_eps_high=0.5)).diagnosis["precision_gap"]
    assert g2["clip_fraction_beta"] < g["clip_fraction_beta"] and g2["eps"] == [0.5, 0.5]


@pytest.mark.parametrize("n_tokens", [1, 2, 3])
def test_tiny_batches_do_not_crash(n_tokens):
    ro = -np.linspace(0.1, 2.0, n_tokens)
    b = StepBatch(rollout_logp=ro, trainer_logp=ro - 0.01, offsets=np.array([0, n_tokens]), mask=np.ones(n_tokens, bool),
                  shadow_logp=ro - 0.005, advantage=np.ones(n_tokens))
    d = diag(b)
    assert d["regime"] == "numerical_noise" and not ids(d)
    json.loads(dumps(d))


def test_excluded_tokens_are_not_diagnosed():
    b = make_batch(n_seqs=8, mean_len=64, noise=0.01)
    ro = b.rollout_logp.copy()
    ro[::7] = np.nan
    d = diag(replace(b, rollout_logp=ro))
    assert d["regime"] == "numerical_noise" and not ids(d)


def test_greedy_processed_logprobs_all_zero():
    b = make_batch(n_seqs=8, mean_len=32, noise=0.0)
    d = diag(replace(b, rollout_logp=np.zeros(b.n_tokens)))
    assert d["regime"] == "systematic" and "dummy_zero" in ids(d, ("error",))


def test_declared_processing_is_info_not_a_bug():
    from tim_report.io import load
    from pathlib import Path

    b = load(Path(__file__).parent / "data" / "faults" / "top_p_0.9_bf16.npz")
    assert ids(diag(b), ("error",)) >= {"processed_logprobs"}
    meta = {**b.meta, "sampling": {"temperature": 1.0, "top_p": 0.9, "top_k": 0, "logprobs": "processed", "truncated": True}}
    d = diag(replace(b, meta=meta))
    f = next(f for f in d["findings"] if f["id"] == "processed_logprobs")
    assert f["severity"] == "info" and "top_p=0.9" in f["title"] and f["evidence"]["declared_in_meta"] == 1
    assert "processed_logprobs" not in ids(d) and d["regime"] in ("numerical_noise", "elevated")
    assert "as the batch declares" in d["verdict"] or d["regime"] == "numerical_noise"

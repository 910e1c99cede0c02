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
from tim_report.catalogue.findings import FINDINGS
from tim_report.catalogue.severity import SIDED, STATED
from tim_report.catalogue.verdicts import REGIMES
from tim_report.config import SEVERITIES, DiagnosisThresholds
from tim_report.errors import BadInput
from tim_report.model import StepBatch, dumps
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
        base = {"id", "severity", "title", "problem", "evidence", "likely_cause", "what_to_check"}
        stated = {"consequence", "consequence_text", "side", "side_text"}  # what a systematic finding does, its side
        sided = {"side", "side_text"}
        assert set(f) == (base | stated if f["id"] in STATED and f["severity"] != "info"
                          else base | sided if f["id"] in SIDED and f["severity"] != "info" else base)
        assert f["id"] in FINDINGS and f["severity"] in SEVERITIES
        assert all(isinstance(v, (int, float)) or v is None for v in f["evidence"].values())


def test_identical():
    b = make_batch(n_seqs=8, mean_len=32)
    d = diag(with_trainer(b, b.rollout_logp.copy()))
    assert d["regime"] == "identical" and d["findings"] == []
    assert d["verdict"].startswith("Identical")


@pytest.mark.parametrize("n_seqs,mean_len", [(1, 4), (2, 16), (8, 64), (64, 128), (256, 256)])
@pytest.mark.parametrize("noise", [0.002, 0.01, 0.03])
def test_clean_noise_never_warns(n_seqs, mean_len, noise):
    b = make_batch(n_seqs=n_seqs, mean_len=mean_len, noise=noise, seed=n_seqs)
    d = diag(b)
    if b.n_tokens < DiagnosisThresholds().min_usable_tokens:  # too few tokens for any verdict: an input problem
        assert ids(d) == {"unusable_input"} and d["verdict"].startswith("Unusable input: only")
        return
    assert not ids(d), d["findings"]
    assert d["regime"] == "numerical_noise", d["verdict"]


@settings(max_examples=40, deadline=None)
@given(n_seqs=st.integers(1, 40), mean_len=st.integers(2, 200), noise=st.floats(1e-4, 0.03), seed=st.integers(0, 10**6))
def test_clean_noise_never_warns_property(n_seqs, mean_len, noise, seed):
    b = make_batch(n_seqs=n_seqs, mean_len=mean_len, noise=noise, seed=seed)
    d = diag(b)
    assert not ids(d) - {"unusable_input"}, d["findings"]
    assert ("unusable_input" in ids(d)) == (b.n_tokens < DiagnosisThresholds().min_usable_tokens)
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
    assert f["evidence"]["tokens"] == 10 and f["evidence"]["in_runs_share"] == 1.0
    # 10 placeholders of 1,024 tokens: PPO clips 0.98% of tokens because of them, under the 1% that makes it material
    assert f["severity"] == "warn" and f["consequence"]["ppo_clip_share"] == pytest.approx(10 / b.n_tokens)
    assert f["side"]["side"] == "rollout" and f["consequence_text"].startswith("Small:")
    wider = tool.copy()
    wider[b.offsets[1] + 3:b.offsets[1] + 13] = True  # 20 placeholders: 1.95% of the tokens clipped, material
    ro[wider], tr[wider] = 0.0, -3.0
    f = next(f for f in diag(replace(b, rollout_logp=ro, trainer_logp=tr))["findings"] if f["id"] == "dummy_zero")
    assert f["severity"] == "error" and f["consequence_text"].startswith("Material: PPO clips 1.9")
    ro[wider & ~tool], tr[wider & ~tool] = b.rollout_logp[wider & ~tool], b.trainer_logp[wider & ~tool]
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
                 thresholds=__import__("tim_report.analysis", fromlist=["Thresholds"]).Thresholds(ppo_eps_low=0.5, ppo_eps_high=0.5)
                 ).diagnosis["precision_gap"]
    assert g2["clip_fraction_beta"] < g["clip_fraction_beta"] and g2["eps"] == [0.5, 0.5]


@pytest.mark.parametrize("n_tokens", [1, 2, 3])
def test_tiny_batches_do_not_crash(n_tokens):
    ro = -np.linspace(0.1, 2.0, n_tokens)
    b = StepBatch(rollout_logp=ro, trainer_logp=ro - 0.01, offsets=np.array([0, n_tokens]), mask=np.ones(n_tokens, bool),
                  shadow_logp=ro - 0.005, advantage=np.ones(n_tokens))
    d = diag(b)
    assert ids(d) == {"unusable_input"} and d["verdict"].startswith(f"Unusable input: only {n_tokens} usable tokens")
    json.loads(dumps(d))


def test_excluded_tokens_are_not_diagnosed():
    b = make_batch(n_seqs=8, mean_len=64, noise=0.01)
    ro = b.rollout_logp.copy()
    ro[::20] = np.nan  # 5%: below the share that makes the batch unusable
    d = diag(replace(b, rollout_logp=ro))
    assert d["regime"] == "numerical_noise" and not ids(d)


def test_mostly_nan_or_probabilities_is_unusable_not_ok():
    """65% NaN trainer log-probs, or probabilities saved as log-probs, read 'ok' / 'identical' from the few tokens left."""
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    tr = b.trainer_logp.copy()
    tr[np.random.default_rng(0).random(tr.shape[0]) < 0.65] = np.nan
    d = diag(replace(b, trainer_logp=tr))
    assert d["regime"] == "systematic" and d["findings"][0]["id"] == "unusable_input"
    assert d["verdict"].startswith("Unusable input: only 3") and "NaN trainer log-probs on 6" in d["verdict"]
    probs = replace(b, rollout_logp=np.exp(b.rollout_logp), trainer_logp=np.exp(b.trainer_logp))
    probs.rollout_logp[:3] = probs.trainer_logp[:3] = 0.0  # underflowed probabilities: 0.0 reads as a valid log-prob
    d = diag(probs)
    assert d["regime"] == "systematic" and d["findings"][0]["id"] == "unusable_input"
    assert "both sides' values look like probabilities" in d["verdict"]
    with pytest.raises(BadInput, match="no usable tokens: the trainer side's values look like probabilities"):
        diag(replace(b, trainer_logp=np.exp(b.trainer_logp)))  # no token left at all: bad input, as before, saying why


def test_greedy_processed_logprobs_all_zero():
    b = make_batch(n_seqs=8, mean_len=32, noise=0.0)
    d = diag(replace(b, rollout_logp=np.zeros(b.n_tokens)))
    assert d["regime"] == "systematic" and "dummy_zero" in ids(d, ("error",))


def test_declared_processing_is_info_not_a_bug():
    from pathlib import Path

    from tim_report.io import load

    b = load(Path(__file__).parent / "data" / "faults" / "top_p_0.9_bf16.npz")
    assert ids(diag(b), ("error",)) >= {"processed_logprobs"}
    meta = {**b.meta, "sampling": {"temperature": 1.0, "top_p": 0.9, "top_k": 0, "logprobs": "processed", "truncated": True}}
    d = diag(replace(b, meta=meta))
    f = next(f for f in d["findings"] if f["id"] == "processed_logprobs")
    assert f["severity"] == "info" and "top_p=0.9" in f["title"] and f["evidence"]["declared_in_meta"] == 1
    assert "processed_logprobs" not in ids(d) and d["regime"] in ("numerical_noise", "elevated")
    assert "truncated sampling (top_p=0.9)" in d["verdict"].lower() or d["regime"] == "numerical_noise"


# ---------------------------------------------------------------- where the mismatch sits (localise.py)

LOCALISING = {"first_token", "position_onset", "turn_boundary"}


def _with_turns(batch: StepBatch, n_turns: int = 3, tool: int = 5) -> StepBatch:
    """The batch as multi-turn: each sequence cut into `n_turns` trained spans, each followed by `tool` masked tokens."""
    mask, turn = np.ones(batch.n_tokens, bool), np.zeros(batch.n_tokens, np.int32)
    for i in range(batch.n_seqs):
        sl = batch.tokens_of(i)
        n = sl.stop - sl.start
        span = n // n_turns
        for k in range(n_turns):
            lo = sl.start + k * span
            turn[lo:sl.stop] = k
            if k < n_turns - 1 and span > tool:
                mask[lo + span - tool:lo + span] = False  # tool output closing turn k
    return replace(batch, mask=mask, turn=turn)


@settings(max_examples=30, deadline=None)
@given(n_seqs=st.integers(1, 40), mean_len=st.integers(2, 260), noise=st.floats(1e-4, 0.03), seed=st.integers(0, 10**6),
       turns=st.booleans())
def test_clean_noise_is_not_localised_property(n_seqs, mean_len, noise, seed, turns):
    """Clean bf16 / fp16-sized noise (with or without turns) never reads as a first-token, onset or turn fault, even as info."""
    b = make_batch(n_seqs=n_seqs, mean_len=mean_len, noise=noise, seed=seed)
    d = diag(_with_turns(b) if turns else b)
    assert not ids(d, SEVERITIES) & LOCALISING, d["findings"]


def test_first_token():
    b = make_batch(n_seqs=32, mean_len=64, noise=0.01, seed=7)
    tr = b.trainer_logp.copy()
    tr[b.offsets[:-1]] -= 1.5  # the first token scored another way (a temperature / BOS difference)
    d = diag(with_trainer(b, tr))
    f = next(f for f in d["findings"] if f["id"] == "first_token")
    assert f["severity"] == "warn" and d["regime"] == "elevated"
    assert f["evidence"]["ratio"] > 10 and f["evidence"]["share_of_abs_delta"] > 0.5 and f["evidence"]["sequences"] == 32
    assert "first response token" in d["verdict"]
    assert not ids(d) & {"position_onset", "turn_boundary"}


@pytest.mark.parametrize("onset,mean_len", [(40, 200), (97, 200), (433, 700)])  # 700: binned for PELT, placed exactly
def test_position_onset(onset, mean_len):
    b = make_batch(n_seqs=64, mean_len=mean_len, noise=0.01, seed=8)
    rng = np.random.default_rng(8)
    pos = np.arange(b.n_tokens) - np.repeat(b.offsets[:-1], b.seq_lengths)
    extra = np.where(pos >= onset, 0.08 * rng.standard_normal(b.n_tokens), 0.0)  # fp8-KV-cache-sized noise from `onset` on
    d = diag(with_trainer(b, b.trainer_logp + extra))
    f = next(f for f in d["findings"] if f["id"] == "position_onset")
    assert f["severity"] == "warn" and abs(f["evidence"]["position"] - onset) <= 2
    assert f["evidence"]["abs_delta_mean_after"] > 3 * f["evidence"]["abs_delta_mean_before"]


@pytest.mark.parametrize("onset,boundary", [(97, 96), (129, 128), (65, 64), (257, 256), (100, None), (150, None)])
def test_an_onset_one_past_a_tile_or_power_of_two_is_a_kernel_hint(onset, boundary):
    b = make_batch(n_seqs=64, mean_len=220 if onset < 200 else 400, noise=0.01, seed=8)
    rng = np.random.default_rng(8)
    pos = np.arange(b.n_tokens) - np.repeat(b.offsets[:-1], b.seq_lengths)
    d = diag(with_trainer(b, b.trainer_logp + np.where(pos >= onset, 0.08 * rng.standard_normal(b.n_tokens), 0.0)))
    f = next(f for f in d["findings"] if f["id"] == "position_onset")
    assert f["evidence"]["position"] == onset and f["evidence"]["kernel_boundary"] == boundary
    if boundary is None:
        assert "kernel" not in f["title"] and "Kernel" not in f["likely_cause"]
    else:
        assert f["title"].endswith(f"; {onset} = {boundary} + 1, one past a multiple of 32"
                                   + (" and a power of two" if boundary & (boundary - 1) == 0 else "") + ": a kernel-boundary hint")
        assert f["likely_cause"].startswith("Kernel-boundary hint")


def test_a_gradual_rise_below_the_ratio_is_not_an_onset():
    b = make_batch(n_seqs=64, mean_len=200, noise=0.01, seed=9)
    pos = np.arange(b.n_tokens) - np.repeat(b.offsets[:-1], b.seq_lengths)
    rng = np.random.default_rng(9)
    d = diag(with_trainer(b, b.trainer_logp + np.where(pos >= 97, 0.006 * rng.standard_normal(b.n_tokens), 0.0)))
    assert "position_onset" not in ids(d, SEVERITIES)


def test_turn_boundary():
    b = _with_turns(make_batch(n_seqs=24, mean_len=120, noise=0.01, seed=10))
    tr = b.trainer_logp.copy()
    seq = b.seq_index()
    first_of_turn = np.flatnonzero((b.turn[1:] != b.turn[:-1]) & (seq[1:] == seq[:-1])) + 1
    for k in range(2):  # the first two tokens of every later turn see another context
        tr[first_of_turn + k] -= 1.0
    d = diag(with_trainer(b, tr))
    f = next(f for f in d["findings"] if f["id"] == "turn_boundary")
    assert f["severity"] == "warn" and f["evidence"]["turns_affected"] == [1, 2]
    assert f["evidence"]["abs_delta_by_offset"][0] > 10 * f["evidence"]["abs_delta_by_offset"][3]
    assert "first_token" not in ids(d, SEVERITIES)
    # the same batch without turn information says nothing about turns
    assert "turn_boundary" not in ids(diag(with_trainer(replace(b, turn=None), tr)), SEVERITIES)


@pytest.mark.parametrize("versions,severity", [(["7", "8"], "info"), (["3", "8"], "warn"), (["a", "b"], "info"),
                                               (["8", "8"], None), (["7,8", "8"], "info")])
def test_mixed_policy_versions(versions, severity):
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    d = diag(replace(b, weight_version=np.array([versions[i % 2] for i in range(16)])))
    f = next((f for f in d["findings"] if f["id"] == "mixed_policy_versions"), None)
    assert (f["severity"] if f else None) == severity
    if f:
        assert "staleness" in f["title"]


def test_mixed_versions_are_said_on_identical_batches_too():
    b = make_batch(n_seqs=8, mean_len=32)
    d = diag(with_trainer(b, b.rollout_logp.copy(), weight_version=np.array(["1", "2"] * 4)))
    assert d["regime"] == "identical" and [f["id"] for f in d["findings"]] == ["mixed_policy_versions"]


# ---------------------------------------------------------------- published bands by model class and precision


@pytest.mark.parametrize("meta,cls,why", [
    ({"model_class": "moe"}, "moe", "model_class=moe"), ({"model_class": "dense", "model": "Mixtral-8x7B"}, "dense", "model_class"),
    ({"num_experts": 64}, "moe", "num_experts"), ({"model": "Qwen/Qwen3-30B-A3B"}, "moe", "Qwen3-30B-A3B"),
    ({"model": "mistralai/Mixtral-8x7B"}, "moe", "Mixtral"), ({"model": "Qwen2.5-7B-Instruct"}, "dense", "no MoE marker"),
    ({"model": "llama-3-8b-a100-run"}, "dense", "no MoE marker"), ({}, "dense", "no MoE marker")])
def test_model_class_from_meta(meta, cls, why):
    from tim_report.analysis.bands import model_class

    got, reason = model_class(meta)
    assert got == cls and why in reason


def _kl_batch(kl_noise: float, meta: dict) -> StepBatch:
    b = make_batch(n_seqs=32, mean_len=64, noise=0.0, seed=11)
    rng = np.random.default_rng(11)
    return replace(b, trainer_logp=np.minimum(b.rollout_logp + kl_noise * rng.standard_normal(b.n_tokens), 0.0),
                   meta={**b.meta, **meta})


def test_an_moe_band_reads_a_kl_that_is_high_for_a_dense_model_as_noise():
    dense = diag(_kl_batch(0.2, {}))  # KL k3 ≈ 2e-2: above the dense ceiling 1e-2, inside MoE's 1e-3 to 1e-1
    moe = diag(_kl_batch(0.2, {"model_class": "moe"}))
    assert 1e-2 < dense["evidence"]["kl_k3"] < 1e-1
    assert dense["band"]["name"] == "dense bf16" and dense["regime"] == "elevated"
    assert moe["band"]["name"] == "MoE bf16" and moe["regime"] == "numerical_noise"
    assert "typical for an MoE bf16 model" in moe["band"]["reading"] and "dense bf16 model it would be high" in moe["band"]["reading"]
    assert "model_class=moe" in moe["band"]["why"] and moe["thresholds"]["noise_kl_max"] == 0.1
    assert "MoE bf16" in moe["verdict"]
    # an explicit ceiling wins over the band's
    strict = DiagnosisThresholds().override({"noise_kl_max": "0.01"})
    assert diag(_kl_batch(0.2, {"model_class": "moe"}), diagnosis_thresholds=strict)["regime"] == "elevated"


def test_fp8_band():
    d = diag(_kl_batch(0.01, {"rollout_dtype": "fp8"}))
    assert d["band"]["precision"] == "fp8" and "rollout_dtype=fp8" in d["band"]["why"]


def test_the_onset_screen_bounds_every_pair_of_segments():
    """position_onset skips its change-point search when no two segments of ≥ m points can differ by the ratio: the
    screen's gap must never be smaller than the largest difference of two such segments' weighted means."""
    from tim_report.analysis.localise import _widest_level_gap

    for seed in range(20):
        rng = np.random.default_rng(seed)
        n, m = int(rng.integers(6, 30)), int(rng.integers(1, 4))
        values, w = rng.normal(0, 1, n) + (np.arange(n) > n // 2) * rng.normal(0, 2), rng.integers(1, 50, n).astype(float)
        means = [np.average(values[a:b], weights=w[a:b]) for a in range(n) for b in range(a + m, n + 1)]
        assert _widest_level_gap(values, w, m) >= max(means) - min(means) - 1e-12


def test_trainer_zeros_blame_the_trainer_and_do_not_crash():
    """A trainer that never recomputed (all 0.0) was blamed on 'the rollout side scoring another model', or crashed
    detect_temperature with a ZeroDivisionError."""
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    d = diag(replace(b, trainer_logp=np.zeros(b.n_tokens)))
    f = d["findings"][0]
    assert f["id"] == "dummy_zero" and f["severity"] == "error" and f["evidence"]["trainer_side"] == 1
    assert f["title"].endswith("every trainer log-prob is 0.0") and "trainer" in f["likely_cause"]
    assert "rollout side" not in json.dumps(d)


@pytest.mark.parametrize("side", ["rollout", "trainer"])
@pytest.mark.parametrize("t", [0.6, 0.7, 1.5])
def test_temperature_on_either_side_names_the_side_and_holds_the_truth(t, side):
    """Tokens sampled at T, one side reporting the sampler's log-probs and the other T = 1: the stated range holds the
    true T_rollout / T_trainer (the fit alone reached about half its log), and the side that is off is named."""
    from tim_report.testing import make_sampled_batch

    d = diag(make_sampled_batch(t, side, seed=3))
    f = next(f for f in d["findings"] if f["id"] == "temperature")
    true = t if side == "rollout" else 1 / t
    near, far = f["evidence"]["temperature_ratio"], f["evidence"]["temperature_ratio_far"]
    assert min(near, far) <= true <= max(near, far)
    assert abs(math.log(near)) < 0.9 * abs(math.log(true))  # the fit alone is shrunk towards 1: why a range
    off = "trainer" if side == "rollout" else "rollout"
    assert f"the {off} is off" in f["title"] and f["evidence"]["fitted_on_trainer"] == (side == "trainer")


@pytest.mark.parametrize("side", ["rollout", "trainer"])
def test_the_side_scoring_another_model_is_named(side):
    from tim_report.testing import make_sampled_batch

    d = diag(make_sampled_batch(1.0, "rollout", unrelated=side, seed=4))
    f = next(f for f in d["findings"] if f["id"] == "one_side_broken")
    assert f["evidence"]["trainer_broken"] == (side == "trainer")
    assert f"so the {side} side is the one that is off" in f["title"] and f["problem"].startswith(f"the {side} side")


def test_tail_advice_says_noise_only_where_it_is_noise():
    """'Expected for numerical noise' was said inside batches diagnosed systematic."""
    b = make_batch(n_seqs=16, mean_len=64, noise=0.01)
    broken = diag(replace(b, trainer_logp=np.zeros(b.n_tokens)))
    assert broken["regime"] == "systematic" and "low_prob_tail" in {f["id"] for f in broken["findings"]}
    assert "xpected for numerical noise" not in json.dumps(broken)
    tail = next(f for f in broken["findings"] if f["id"] == "low_prob_tail")
    noise = FINDINGS["low_prob_tail"].check({**tail["evidence"], "regime": "numerical_noise"})
    assert noise.startswith("Expected for numerical noise")

"""Confident disagreements (issue 42): tokens the engine sampled with p ≥ 0.5 that the trainer puts more than 2 nats
lower, counted per step, and the spliced_tokens finding when they exceed the clean rate (a Poisson test on the count);
planted by splicing random ids into real tiny-model samples that the trainer then scores."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import build_site

from tim_report.analysis import analyze
from tim_report.analysis.stats import poisson_tail
from tim_report.config import CONFIDENT_GAP, CONFIDENT_P, DiagnosisThresholds
from tim_report.testing import TINY_MODEL, make_batch, sample_versioned_batch, shifted

MODEL = str(Path(__file__).resolve().parents[1] / TINY_MODEL)


def ids(report) -> dict[str, str]:
    return {f["id"]: f["severity"] for f in report.diagnosis["findings"]}


def plant(batch, k: int, seed: int = 0):
    """`batch` with k of its confident tokens (p_rollout ≥ 0.5) put 6 nats lower by the trainer."""
    confident = np.flatnonzero(batch.rollout_logp >= math.log(CONFIDENT_P))
    at = np.random.default_rng(seed).choice(confident, size=k, replace=False)
    trainer = batch.trainer_logp.copy()
    trainer[at] = batch.rollout_logp[at] - 6.0
    return replace(batch, trainer_logp=trainer)


@pytest.mark.parametrize("k, lam", [(0, 3.0), (1, 0.0), (1, 0.1), (3, 0.13), (5, 2.0), (12, 2.0), (60, 40.0), (40, 60.0),
                                    (1400, 1264.0), (2000, 1264.0)])
def test_the_poisson_tail_is_scipys(k, lam):
    from scipy.stats import poisson

    expected = 1.0 if k == 0 else float(poisson.sf(k - 1, lam))
    assert poisson_tail(k, lam) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_confident_disagreements_are_counted_per_step():
    b = make_batch(n_seqs=32, mean_len=64)
    m = analyze(b).metrics
    assert m["confident_disagree"] == 0 and m["confident_disagree_rate"] == 0
    planted = plant(b, 7)
    d = planted.trainer_logp - planted.rollout_logp
    truth = int(((planted.rollout_logp >= math.log(CONFIDENT_P)) & (d < -CONFIDENT_GAP)).sum())
    m = analyze(planted).metrics
    assert m["confident_disagree"] == truth == 7 and m["confident_disagree_rate"] == pytest.approx(7 / planted.n_tokens)


def test_a_few_planted_tokens_are_named_with_where_they_are():
    b = plant(make_batch(n_seqs=32, mean_len=64), 5)
    r = analyze(b)
    assert ids(r) == {"spliced_tokens": "warn"} and r.diagnosis["regime"] == "elevated"
    f = r.diagnosis["findings"][0]
    ev = f["evidence"]
    assert ev["count"] == 5 and ev["p_value"] < DiagnosisThresholds().confident_alpha and ev["expected"] < 0.2
    seq, pos = (int(x) for x in ev["where"].split(";")[0].removeprefix("sequence ").split(" (")[0].split(" position "))
    at = b.offsets[seq] + pos
    assert b.trainer_logp[at] == pytest.approx(b.rollout_logp[at] - 6.0)  # the first named is a planted token
    assert "spliced" in f["problem"] and "inference-atlas #192" in f["likely_cause"] and ev["where"] in f["what_to_check"]


def test_the_bar_rises_with_the_batch_and_a_couple_are_not_named():
    two = analyze(plant(make_batch(n_seqs=32, mean_len=64), 2))
    assert "spliced_tokens" not in ids(two)  # fewer than confident_min_count
    big = make_batch(n_seqs=1600, mean_len=64)  # ~100k tokens: the clean rate expects 6.5
    assert "spliced_tokens" not in ids(analyze(plant(big, 8)))
    assert "spliced_tokens" in ids(analyze(plant(big, 20)))


def test_silent_beside_a_fault_of_every_token_and_says_non_finite_rollout_values():
    b = make_batch(n_seqs=32, mean_len=64)
    shift = analyze(shifted(replace(b)))  # shifted() changes the batch it is given
    assert shift.metrics["confident_disagree"] > 3 and "spliced_tokens" not in ids(shift) and "shift" in ids(shift)
    planted = plant(b, 5)
    planted.rollout_logp = planted.rollout_logp.copy()
    untouched = np.flatnonzero(planted.trainer_logp == b.trainer_logp)[:2]
    planted.rollout_logp[untouched] = [np.nan, -np.inf]
    ev = next(f for f in analyze(planted).diagnosis["findings"] if f["id"] == "spliced_tokens")["evidence"]
    assert ev["rollout_nonfinite"] == 2  # the data problems' count, not counted again


def test_the_page_report_md_and_index_row_carry_the_count(tmp_path):
    site = build_site(tmp_path, [("spliced", plant(make_batch(n_seqs=32, mean_len=64), 5))])
    page, md = (site / "spliced" / "index.html").read_text(), (site / "spliced" / "report.md").read_text()
    assert "confident disagreements</a><td><span class=\"warntext\">⚠ 5 tokens" in page
    assert "| confident disagreements | 5 |" in md and "5 tokens the engine sampled with p ≥ 0.5 are put more than 2 nats" in md
    row = json.loads((site / "index.json").read_text())["runs"][0]
    assert row["confident_disagree"] == 5 and "spliced_tokens" in row["findings"]


def test_random_ids_spliced_into_real_samples_are_named(tiny_versions):
    """tiny-qwen2 v3 samples 128 sequences of 48 tokens in bf16; five of the tokens it was sure of (1 in 1,229, ten times
    inference-atlas' rate) are replaced by random ids after sampling, and the engine goes on from them: its log-probs
    are its bf16 scores of the spliced sequences, but at each splice the score of the token it sampled. The fp32
    trainer scores the spliced ids. Spliced this sparsely, nothing else fires: the finding names them alone."""
    import torch
    from transformers import AutoModelForCausalLM

    clean = sample_versioned_batch(tiny_versions, [0], model_dir=MODEL, seqs_per_lag=128, new_tokens=48)
    assert "spliced_tokens" not in ids(analyze(clean)) and analyze(clean).metrics["confident_disagree"] == 0
    rng = np.random.default_rng(0)
    at = rng.choice(np.flatnonzero(clean.rollout_logp >= math.log(CONFIDENT_P)), size=5, replace=False)
    token_ids = clean.token_ids.copy()
    token_ids[at] = rng.integers(3, 2000, size=5)
    seqs = torch.tensor(np.concatenate([np.stack(clean.prompt_ids), token_ids.reshape(128, 48)], axis=1))
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    model.load_state_dict(tiny_versions[-1])

    def scores(dtype) -> np.ndarray:
        with torch.no_grad():
            logits = model.to(dtype=dtype)(input_ids=seqs).logits[:, 3:-1].float()
        return torch.log_softmax(logits, -1).gather(2, seqs[:, 4:, None])[..., 0].reshape(-1).double().numpy()

    rollout = scores(torch.bfloat16)
    rollout[at] = clean.rollout_logp[at]  # what the engine sampled there, before the splice
    spliced = replace(clean, token_ids=token_ids, rollout_logp=rollout, trainer_logp=scores(torch.float32))
    r = analyze(spliced)
    assert r.metrics["confident_disagree"] == 5 and ids(r) == {"spliced_tokens": "warn"}, r.diagnosis["findings"]

"""Both sides' top-k log-probs: captured by the transformers engine, saved and read back, compared (top-1
agreement, KL on the union of the two top-k sets with its bounds), and shown on the page and in report.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import CI

from tim_report.analysis import analyze
from tim_report.cli import main
from tim_report.config import TOPK_MAX
from tim_report.io import load, save_batch
from tim_report.model import StepBatch

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "tiny-qwen2"
PROMPTS = REPO / "examples" / "prompts.jsonl"
need_model = pytest.mark.skipif(not (MODEL / "model.safetensors").exists() and not CI, reason="models/tiny-qwen2 not present")


def hand_batch(swap_order: bool = False) -> StepBatch:
    """Position 0: both sides give {0: .6, 1: .3}. Position 1: rollout {0: .5, 1: .3}, trainer {1: .4, 2: .35}."""
    ids_a = np.array([[0, 1], [0, 1]], np.int32)
    p_a = np.array([[.6, .3], [.5, .3]])
    ids_b = np.array([[0, 1], [1, 2]], np.int32)
    p_b = np.array([[.6, .3], [.4, .35]])
    if swap_order:  # a file need not list best first: the top-1 is the argmax, not column 0
        ids_b, p_b = ids_b[:, ::-1].copy(), p_b[:, ::-1].copy()
    return StepBatch(rollout_logp=np.log([.6, .3]), trainer_logp=np.log([.6, .4]), offsets=np.array([0, 2]),
                     mask=np.ones(2, bool), rollout_topk_ids=ids_a, rollout_topk_logp=np.log(p_a).astype(np.float32),
                     trainer_topk_ids=ids_b, trainer_topk_logp=np.log(p_b).astype(np.float32))


@pytest.mark.parametrize("swap_order", [False, True])
def test_hand_computed_top1_and_union_kl(swap_order):
    t = analyze(hand_batch(swap_order)).topk
    assert t["available"] and t["tokens"] == 2 and t["k"] == {"rollout": 2, "trainer": 2}
    assert t["top1_differ"] == 0.5 and t["top1_differ_count"] == 1  # position 1: token 0 vs token 1
    # position 1, by hand. Outside mass m_P = .2, m_Q = .25; k-th probabilities .3 (rollout), .35 (trainer).
    # Token 2 (trainer only) gets p̂ = min(.3, .2 / 1) = .2; token 0 (rollout only) q̂ = min(.35, .25 / 1) = .25;
    # nothing is left for the "other" bucket on either side.
    kl1 = .5 * math.log(.5 / .25) + .3 * math.log(.3 / .4) + .2 * math.log(.2 / .35)
    assert t["kl_union"] == pytest.approx(kl1 / 2, rel=1e-6)  # position 0 contributes 0
    assert t["kl_union_max"] == pytest.approx(kl1, rel=1e-6)
    # lower bound: shared top-k {1} apart, the rest lumped: p_o = .7, q_o = .6
    lower1 = .3 * math.log(.3 / .4) + .7 * math.log(.7 / .6)
    assert t["kl_lower"] == pytest.approx(lower1 / 2, rel=1e-6)
    # total variation: position 0 known to within min(.1, .1); position 1: ½|.3-.4| + [½|.7-.6|, ½(.7+.6)]
    assert t["tv_lower"] == pytest.approx((0.0 + 0.05 + 0.05) / 2, abs=1e-7)
    assert t["tv_upper"] == pytest.approx((0.1 + 0.05 + 0.65) / 2, abs=1e-7)
    assert t["hidden_tv"] == pytest.approx((0.1 + 0.6) / 2, abs=1e-7)
    assert t["loose"] is True  # 40% of the mass outside the shared top-k on average
    rows = {r["bucket"]: r for r in t["by_probability"]}
    assert rows["0.1–0.5"]["top1_differ"] == 1.0 and rows["0.1–0.5"]["kl_union_share"] == pytest.approx(1.0)


def test_identical_sides_and_missing_topk():
    b = hand_batch()
    b.trainer_topk_ids, b.trainer_topk_logp, b.trainer_logp = b.rollout_topk_ids, b.rollout_topk_logp, b.rollout_logp
    t = analyze(b).topk
    assert t["top1_differ"] == 0 and t["kl_union"] == 0 and t["kl_lower"] == 0 and t["tv_lower"] == 0
    b.trainer_topk_ids = None
    t = analyze(b).topk
    assert t["available"] is False and "top-k" in t["reason"] and "--top-k-logprobs" in t["how_to_get"]


def test_truncated_rollout_keeps_zero_probabilities_out_of_the_kl():
    """A top-p rollout lists −inf for tokens outside its kept set: p = 0 there, so missing tokens get p̂ = 0."""
    b = hand_batch()
    b.rollout_topk_logp = np.log(np.array([[1.0, 1e-300], [0.625, 0.375]])).astype(np.float32)  # −inf in float32
    b.rollout_topk_logp[0, 1] = -np.inf
    t = analyze(b).topk
    assert np.isfinite(t["kl_union"]) and t["kl_union"] > 0
    assert t["mass_outside_topk"]["rollout"] == pytest.approx(0.0, abs=1e-7)


@need_model
def test_hf_scorer_topk_is_the_full_log_softmax_topk():
    import torch
    from transformers import AutoModelForCausalLM

    from tim_report.capture.hf import HFEngine

    prompts = [[1, 882, 198, 300, 301], [1, 882, 198]]
    comps = [[400, 401, 402, 403], [500, 501]]
    engine = HFEngine(str(MODEL), "fp32", logit_chunk_mb=0, max_batch_tokens=8)  # one row per chunk, two micro-batches
    out = engine.score(prompts, comps, temperature=0.8, topk=7)
    model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.float32).eval()
    for (lp, top), p, c in zip(out, prompts, comps):
        with torch.no_grad():
            logits = model(torch.tensor([p + c])).logits[0]
        full = torch.log_softmax(logits[len(p) - 1 : len(p) - 1 + len(c)] / 0.8, -1)
        ref = torch.topk(full, 7, dim=-1)
        assert top.ids.shape == (len(c), 7) and top.ids.dtype == np.int32 and top.logp.dtype == np.float32
        np.testing.assert_array_equal(top.ids, ref.indices.numpy())
        np.testing.assert_allclose(top.logp, ref.values.numpy(), rtol=1e-5, atol=2e-6)
        np.testing.assert_allclose(lp, full[torch.arange(len(c)), torch.tensor(c)].double().numpy(), rtol=1e-6, atol=2e-6)
    # without top-k the scorer returns plain arrays, as before
    assert isinstance(engine.score(prompts[:1], comps[:1])[0], np.ndarray)


def run(*args):
    return CliRunner().invoke(main, [*map(str, args)])


@need_model
def test_capture_with_topk_shows_on_the_page_and_in_summary(tmp_path):
    out = tmp_path / "b.npz"
    r = run("capture", "--model", MODEL, "--prompts", PROMPTS, "--rollout", "hf:bf16", "--trainer", "hf:fp32",
            "--max-prompts", "2", "--n-samples", "2", "--max-new-tokens", "12", "--top-k-logprobs", "8", "-o", out)
    assert r.exit_code == 0, r.output
    b = load(out)
    assert b.rollout_topk_ids.shape == b.trainer_topk_ids.shape == (b.n_tokens, 8)
    assert b.meta["top_k_logprobs"] == 8
    # the sampler's top-k holds the sampled token's own (processed) log-prob wherever the token is in it
    hit = b.rollout_topk_ids == b.token_ids[:, None]
    rows = hit.any(axis=1)
    assert rows.mean() > 0.5
    np.testing.assert_allclose(b.rollout_topk_logp[hit], b.rollout_logp[rows], atol=1e-6)
    site = tmp_path / "site"
    r = run("build", out, "-o", site)
    assert r.exit_code == 0, r.output
    t = json.loads((site / "b" / "summary.json").read_text())["topk"]
    assert t["available"] and t["tokens"] == b.n_tokens
    assert 0 <= t["top1_differ"] < 0.2 and 0 < t["kl_union"] < 1e-2  # bf16 noise: small, not zero
    assert t["kl_lower"] <= t["kl_union"] * (1 + 1e-9) + 1e-12
    page = (site / "b" / "index.html").read_text()
    assert 'id="topk"' in page and "top-1 differs" in page and "KL on the top-k union" in page
    md = (site / "b" / "report.md").read_text()
    assert "<summary>Whole distribution (top-k)</summary>" in md and "| top-1 differs |" in md and "| KL on the top-k union |" in md


@need_model
def test_capture_without_topk_says_why(tmp_path):
    out = tmp_path / "b.npz"
    r = run("capture", "--model", MODEL, "--prompts", PROMPTS, "--rollout", "hf:fp32", "--trainer", "hf:fp32",
            "--max-prompts", "1", "--n-samples", "4", "--max-new-tokens", "8", "--top-k-logprobs", "0", "-o", out)
    assert r.exit_code == 0, r.output
    assert load(out).rollout_topk_ids is None
    site = tmp_path / "site"
    assert run("build", out, "-o", site).exit_code == 0
    t = json.loads((site / "b" / "summary.json").read_text())["topk"]
    assert t["available"] is False and t["reason"]
    assert "Not available" in (site / "b" / "index.html").read_text()


def test_round_trip_keeps_the_arrays(tmp_path):
    b = hand_batch()
    save_batch(b, tmp_path / "c.npz")
    back = load(tmp_path / "c.npz")
    for name in ("rollout_topk_ids", "rollout_topk_logp", "trainer_topk_ids", "trainer_topk_logp"):
        np.testing.assert_array_equal(getattr(back, name), getattr(b, name))
    assert analyze(back).topk["top1_differ"] == 0.5


@pytest.mark.parametrize("case", ["ids_logp_differ", "rows_not_tokens", "one_dimensional", "too_many_columns",
                                  "three_of_four", "float_ids"])
def test_bad_topk_shapes_are_one_line_exit_2(tmp_path, case):
    b = hand_batch()
    save_batch(b, tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz") as z:
        arrays = dict(z)
    if case == "ids_logp_differ":
        arrays["trainer_topk_logp"] = arrays["trainer_topk_logp"][:, :1]
    elif case == "rows_not_tokens":
        arrays["rollout_topk_ids"] = np.zeros((3, 2), np.int32)
        arrays["rollout_topk_logp"] = np.zeros((3, 2), np.float32)
    elif case == "one_dimensional":
        arrays["rollout_topk_ids"] = np.zeros(2, np.int32)
    elif case == "too_many_columns":
        arrays["rollout_topk_ids"] = np.zeros((2, TOPK_MAX + 1), np.int32)
        arrays["rollout_topk_logp"] = np.zeros((2, TOPK_MAX + 1), np.float32)
    elif case == "three_of_four":
        del arrays["trainer_topk_logp"]
    elif case == "float_ids":
        arrays["rollout_topk_ids"] = arrays["rollout_topk_ids"].astype(np.float32)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    r = run("build", bad, "-o", tmp_path / "site")
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("tim-report: error: ") and "bad.npz" in lines[0], r.output
    assert "topk" in lines[0] and "Traceback" not in r.output
    assert not (tmp_path / "site").exists()

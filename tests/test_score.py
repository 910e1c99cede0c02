"""score_logprobs: the log-probs capture computes (one shared routine), with padding, prompts and left padding."""

from __future__ import annotations

import copy
import inspect
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tim_report  # noqa: E402
from tim_report.capture import hf, score  # noqa: E402

MODEL = Path(__file__).resolve().parents[1] / "models" / "tiny-qwen2"
pytestmark = pytest.mark.skipif(not (MODEL / "model.safetensors").exists(), reason="models/tiny-qwen2 not present")

PROMPTS = [[1, 882, 198], [1, 882, 198, 300]]
COMPLETIONS = [[400, 401, 402, 403, 404], [500, 501]]


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()


def right_padded():
    seqs = [p + c for p, c in zip(PROMPTS, COMPLETIONS)]
    width = max(map(len, seqs))
    ids = torch.zeros((2, width), dtype=torch.long)
    am = torch.zeros_like(ids)
    lm = torch.zeros_like(ids)
    for i, (s, p) in enumerate(zip(seqs, PROMPTS)):
        ids[i, : len(s)] = torch.tensor(s)
        am[i, : len(s)] = 1
        lm[i, len(p) : len(s)] = 1
    return ids, am, lm


def test_same_numbers_as_capture_bit_for_bit(model):
    ids, am, lm = right_padded()
    out = tim_report.score_logprobs(model, ids, am, lm)
    assert out.shape == (2, ids.shape[1] - 1) and out.dtype == torch.float64
    engine = hf.HFEngine(str(MODEL), "fp32")
    captured = engine.score(PROMPTS, COMPLETIONS)
    for i, (p, c) in enumerate(zip(PROMPTS, COMPLETIONS)):
        row = out[i].numpy()
        np.testing.assert_array_equal(row[len(p) - 1 : len(p) - 1 + len(c)], captured[i])
        assert np.isnan(np.delete(row, np.arange(len(p) - 1, len(p) - 1 + len(c)))).all()  # prompt and padding


def test_matches_a_plain_forward_pass_and_chunking(model):
    ids = torch.tensor([PROMPTS[0] + COMPLETIONS[0]])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1]
    plain = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0].double()
    out = tim_report.score_logprobs(model, ids[0])  # 1-D in, 1-D out; no mask: every next token
    assert out.shape == plain.shape
    np.testing.assert_allclose(out.numpy(), plain.numpy(), rtol=1e-6, atol=2e-6)
    one_row_chunks = score.score_logprobs(model, ids, logit_chunk_mb=0)[0]
    np.testing.assert_allclose(one_row_chunks.numpy(), out.numpy(), rtol=1e-6, atol=2e-6)


def test_left_padding_gives_the_unpadded_numbers(model):
    seq = PROMPTS[1] + COMPLETIONS[1]
    alone = tim_report.score_logprobs(model, torch.tensor([seq]))[0]
    ids = torch.tensor([[0, 0] + seq])
    am = torch.tensor([[0, 0] + [1] * len(seq)])
    left = tim_report.score_logprobs(model, ids, am)[0]
    assert torch.isnan(left[:2]).all()  # padding, and the first real token (it has no context)
    np.testing.assert_allclose(left[2:].numpy(), alone.numpy(), rtol=1e-5, atol=1e-5)


def test_its_output_goes_straight_into_the_assertion(model):
    ids, am, lm = right_padded()
    ref = tim_report.score_logprobs(model, ids, am, lm)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    r = tim_report.assert_logprobs_match(ref, tim_report.score_logprobs(bf16, ids, am, lm), precision="bf16")
    assert r.passed and r.numbers["tokens"] == sum(map(len, COMPLETIONS))


def test_bad_input(model):
    with pytest.raises(TypeError):
        tim_report.score_logprobs(torch.nn.Linear(2, 2), torch.tensor([[1, 2]]))
    with pytest.raises(ValueError):
        tim_report.score_logprobs(model, torch.tensor([[1, 2, 3]]), torch.tensor([[1, 1]]))
    with pytest.raises(ValueError):
        tim_report.score_logprobs(model, torch.zeros((1, 2, 3), dtype=torch.long))


def test_capture_has_no_scoring_code_of_its_own():
    src = inspect.getsource(hf.HFEngine.score)
    assert "token_logprobs(" in src and "log_softmax" not in src and "gather" not in src

"""Kernel tests on the shipped tiny model: correct variants pass, real bugs fail with the finding that names them.

    pytest examples/kernel_test --tim-report-dir reports/
    (add -p tim_report.pytest_plugin when tim-report is on PYTHONPATH rather than installed)

Each test swaps one piece of the model the way kernel libraries patch transformers (Liger-Kernel
replaces `Qwen2RMSNorm` and `apply_rotary_pos_emb` in `transformers.models.qwen2.modeling_qwen2`),
scores the same sampled tokens with `score_logprobs` and asserts they match the stock model's with
`assert_logprobs_match`. No tolerance is tuned here: `precision` names the arithmetic the candidate
uses and the assertion knows its noise. The `test_bug_*` tests are meant to fail: run the file to
see what a maintainer gets (docs/kernel-tests.md shows the output).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is a local folder: never ask a hub

import pytest
import torch

from tim_report import assert_logprobs_match, score_logprobs

MODEL = Path(__file__).resolve().parents[2] / "models" / "tiny-qwen2"
PROMPTS = ["import os\nimport sys\n\n\ndef main(argv):\n    ", "class Queue:\n    def __init__(self, maxsize=0):\n",
           "def _read_file(path, encoding='utf-8'):\n    with open(path", "    for i, line in enumerate(lines):\n",
           "    def __repr__(self):\n        return ", "try:\n    import _thread\nexcept ImportError:\n    ",
           "    if not isinstance(value, str):\n        raise TypeError(", "__all__ = ['"]
LENGTH = 96  # tokens per sequence, prompt included: 8 × 95 scored tokens

qwen2 = pytest.importorskip("transformers.models.qwen2.modeling_qwen2")
STOCK_ROPE = qwen2.apply_rotary_pos_emb


# ---------------------------------------------------------------------------- the model and the tokens


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def in_dtype(model):
    copies = {}

    def get(dtype):
        return copies.setdefault(dtype, copy.deepcopy(model).to(dtype))

    return get


@pytest.fixture(scope="module")
def tokens(model):
    return sample_tokens(model)


def sample_tokens(model) -> torch.Tensor:
    """Eight sequences sampled from the fp32 model at temperature 1 (seeded), prompt included: [8, LENGTH]."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL)
    tok.padding_side = "left"  # one batched generate: every row's next token in the same column
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    pads = (1 - batch.attention_mask).sum(1)
    n = LENGTH - int(batch.attention_mask.sum(1).min())
    torch.manual_seed(0)
    out = model.generate(**batch, do_sample=True, max_new_tokens=n, min_new_tokens=n, top_k=0, top_p=1.0,
                         temperature=1.0, pad_token_id=0)
    return torch.stack([row[p : p + LENGTH] for row, p in zip(out, pads.tolist())])


# ---------------------------------------------------------------------------- kernels under test


def rmsnorm_bf16_accumulation(self, x):
    """Correct but less precise: squares, mean and rsqrt in the input's dtype (bf16), no fp32 upcast."""
    var = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))


def rmsnorm_eps_outside_sqrt(self, x):
    """Bug: x / (sqrt(mean x²) + eps) instead of x / sqrt(mean x² + eps)."""
    xf = x.float()
    rms = xf.pow(2).mean(-1, keepdim=True).sqrt()
    return self.weight * (xf / (rms + self.variance_epsilon)).to(x.dtype)


def rope_one_ahead(inv_freq, queries: bool = True, keys: bool = False):
    """A rotary kernel that reads the cos/sin cache at position + 1 for queries and/or keys.

    RoPE is relative (q·k depends on the two positions' difference), so shifting q and k alike changes
    nothing: that is a correct kernel. Shifting one of them is the bug: every query sees every key one
    step further away."""
    step = torch.cat([inv_freq, inv_freq])

    def apply(q, k, cos, sin, *args, **kwargs):
        c, s = step.cos().to(cos.dtype), step.sin().to(sin.dtype)
        cos_next, sin_next = cos * c - sin * s, sin * c + cos * s  # angle of the next position
        q_rot, _ = STOCK_ROPE(q, k, *((cos_next, sin_next) if queries else (cos, sin)), *args, **kwargs)
        _, k_rot = STOCK_ROPE(q, k, *((cos_next, sin_next) if keys else (cos, sin)), *args, **kwargs)
        return q_rot, k_rot

    return apply


@torch.inference_mode()
def fused_linear_logprobs(model, input_ids, chunk: int = 64, temperature: float = 1.0, drop_last: bool = False):
    """A fused linear + cross-entropy kernel (reduction='none') as log-probs: the LM head applied chunk by
    chunk, log-sum-exp in fp32, never holding [tokens, vocab] logits. `drop_last` is the bug: the kernel
    treats each row's last position as the one without a label and leaves its output at 0."""
    hidden = model.model(input_ids=input_ids).last_hidden_state[:, :-1]
    labels = input_ids[:, 1:]
    weight = model.lm_head.weight
    out = torch.zeros(labels.shape, dtype=torch.float32)
    stop = labels.shape[1] - 1 if drop_last else labels.shape[1]
    for start in range(0, stop, chunk):
        end = min(start + chunk, stop)
        logits = (hidden[:, start:end] @ weight.T).float() / temperature
        target = logits.gather(-1, labels[:, start:end, None])[..., 0]
        out[:, start:end] = target - torch.logsumexp(logits, -1)
    return out


# ---------------------------------------------------------------------------- correct: these pass


def test_bf16_matches_fp32(model, in_dtype, tokens):
    assert_logprobs_match(score_logprobs(model, tokens), score_logprobs(in_dtype(torch.bfloat16), tokens),
                          precision="bf16", token_ids=tokens[:, 1:])


def test_fp16_matches_fp32(model, in_dtype, tokens):
    assert_logprobs_match(score_logprobs(model, tokens), score_logprobs(in_dtype(torch.float16), tokens),
                          precision="fp16", token_ids=tokens[:, 1:])


def test_rmsnorm_bf16_accumulation(in_dtype, tokens):
    bf16 = in_dtype(torch.bfloat16)
    reference = score_logprobs(bf16, tokens)
    with mock.patch.object(qwen2.Qwen2RMSNorm, "forward", rmsnorm_bf16_accumulation):
        candidate = score_logprobs(bf16, tokens)
    assert_logprobs_match(reference, candidate, precision="bf16", token_ids=tokens[:, 1:])


def test_fused_cross_entropy(model, tokens):
    assert_logprobs_match(score_logprobs(model, tokens), fused_linear_logprobs(model, tokens),
                          precision="fp32", token_ids=tokens[:, 1:])


def test_rope_shifted_alike_for_queries_and_keys(model, tokens):
    """Positions + 1 on both sides: the same relative positions, so the same model up to rounding."""
    reference = score_logprobs(model, tokens)
    inv_freq = model.model.rotary_emb.inv_freq
    with mock.patch.object(qwen2, "apply_rotary_pos_emb", rope_one_ahead(inv_freq, queries=True, keys=True)):
        candidate = score_logprobs(model, tokens)
    assert_logprobs_match(reference, candidate, precision="fp32")


def test_rmsnorm_eps_outside_sqrt_is_below_bf16_noise(in_dtype, tokens):
    """The eps bug moves log-probs by ~1e-4 nats: a bf16 test cannot see it (test formulas in fp32)."""
    bf16 = in_dtype(torch.bfloat16)
    reference = score_logprobs(bf16, tokens)
    with mock.patch.object(qwen2.Qwen2RMSNorm, "forward", rmsnorm_eps_outside_sqrt):
        candidate = score_logprobs(bf16, tokens)
    assert_logprobs_match(reference, candidate, precision="bf16")


# ---------------------------------------------------------------------------- bugs: these fail


def test_bug_rmsnorm_eps_outside_sqrt(model, tokens):
    reference = score_logprobs(model, tokens)
    with mock.patch.object(qwen2.Qwen2RMSNorm, "forward", rmsnorm_eps_outside_sqrt):
        candidate = score_logprobs(model, tokens)
    assert_logprobs_match(reference, candidate, precision="fp32", token_ids=tokens[:, 1:])


def test_bug_rope_positions_shifted_by_one(model, in_dtype, tokens):
    bf16 = in_dtype(torch.bfloat16)
    reference = score_logprobs(bf16, tokens)
    with mock.patch.object(qwen2, "apply_rotary_pos_emb", rope_one_ahead(model.model.rotary_emb.inv_freq)):
        candidate = score_logprobs(bf16, tokens)
    assert_logprobs_match(reference, candidate, precision="bf16", token_ids=tokens[:, 1:])


def test_bug_fused_cross_entropy_drops_last_token(model, tokens):
    assert_logprobs_match(score_logprobs(model, tokens), fused_linear_logprobs(model, tokens, drop_last=True),
                          precision="fp32", token_ids=tokens[:, 1:])


def test_bug_softmax_temperature_left_in(model, in_dtype, tokens):
    """An engine's log-prob path in bf16 that still divides the logits by the sampling temperature (0.9)."""
    assert_logprobs_match(score_logprobs(model, tokens),
                          fused_linear_logprobs(in_dtype(torch.bfloat16), tokens, temperature=0.9),
                          precision="bf16", token_ids=tokens[:, 1:])

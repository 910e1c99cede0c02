"""The weight digests' numbers (io/weights.py, analysis/lag/digests.py; docs/sync.md), each beside its source.

A digest is exact: it hashes every byte of the weights in the engine's dtype, so two digests are equal or not and no
noise band applies. What is sized here is what the digest keeps to count the changed share, and how far the engine's
changed share may fall below the trainer's before the update is said to have been rounded away.
"""

from __future__ import annotations

# The precisions a digest casts to: what engines hold dense weights in. fp8 is left out: an engine's fp8 weights
# carry scales of its own (per tensor, per block), so the trainer's plain cast is not what the engine holds.
DIGEST_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

# The changed share is counted over every element of a model of up to this many elements, and above it over a strided
# sample of about this many (every s-th element in name order, s the smallest prime ≥ elements / this): 2**22 keeps
# 8 MiB of bf16 per digest, whatever the model, and a standard error of sqrt(p(1 − p) / 2**22) ≈ 6e-5 on a share p of
# 1.5% (0.4% of it). SmolLM2-135M (134.5M elements) is sampled every 37th element; tiny-qwen2 (1.6M) whole
# (docs/sync.md, "What it costs").
DIGEST_SAMPLE = 1 << 22

# A step may carry a few digests per side (the version its tokens were sampled with, the trainer's own, one per engine
# replica); a meta value with more than this many is not a digest record but something else, and is not read.
MAX_DIGEST_RECORDS = 64

# updates_rounded_away: the engine's weights changed between two versions in less than this share of what the
# trainer's, cast to the engine's dtype, changed. A sync that copies the cast weights changes exactly the trainer's
# share (the ratio is 1: the same elements, counted at the same positions); a delta added in the engine's bf16 keeps
# only the deltas above half a rounding step, measured at 0.06–0.2 of the trainer's share on tiny-qwen2 with AdamW
# at lr 1e-5 (examples/training_loop/train.py --bug bf16-sync, docs/sync.md). Half leaves room for neither.
ROUNDED_SHARE_RATIO = 0.5

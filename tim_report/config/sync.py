"""The weight digests' numbers (io/weights.py, analysis/lag/digests.py; docs/sync.md), each beside its source.

A digest is exact: it hashes every byte of the weights in the engine's dtype, so two digests are equal or not and no
noise band applies. What is sized here is what the digest keeps to count the changed share, and how far the engine's
changed share may fall below the trainer's before the update is said to have been rounded away.
"""

from __future__ import annotations

# The precisions a digest casts to: what engines hold dense weights in. fp8 is left out: an engine's fp8 weights
# carry scales of its own (per tensor, per block), so the trainer's plain cast is not what the engine holds.
DIGEST_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

# The changed share is counted over every element of a tensor of up to this many elements, and over a strided sample of
# about this many above (every s-th element, s the smallest prime ≥ its elements / this), weighted by the tensors'
# sizes: at most 8 KiB of bf16 kept per tensor for the next digest's share (SmolLM2-135M, 272 tensors: 1.65 MiB; a 7B
# Llama, 291 tensors: at most 2.3 MiB), and a standard error of about sqrt(p(1 − p) / sampled elements): 1.3e-4 on a
# share p of 1.5% over SmolLM2's 865,070 sampled elements (docs/sync.md, "What it costs"). Per tensor, so a sync's
# stream of gathered tensors is digested one tensor at a time, without knowing the model's size first.
DIGEST_SAMPLE = 1 << 12

# A step may carry a few digests per side (the version its tokens were sampled with, the trainer's own, one per engine
# replica); a meta value with more than this many is not a digest record but something else, and is not read.
MAX_DIGEST_RECORDS = 64

# updates_rounded_away: the engine's weights changed between two versions in less than this share of the elements the
# trainer's, cast to the engine's dtype, changed (and its digest is not the trainer's). A sync that copies the cast
# weights changes exactly the trainer's elements (the ratio is 1, counted at the same positions, and the digests are
# equal); a delta added in the engine's bf16 keeps only the deltas above half a rounding step. Measured on tiny-qwen2
# with AdamW (examples/training_loop/train.py --bug bf16-sync --digests, three steps each): 0.25-0.29 at lr 1e-6,
# 0.40-0.44 at 1e-5, 0.47-0.49 at 3e-5, 0.72-0.75 at 1e-4 (docs/sync.md). Tensors under each other's names change
# more elements than the trainer's (the ratio is above 1), and read as weights_mismatch.
ROUNDED_SHARE_RATIO = 0.9

"""bisect's thresholds: the first site beyond its floor (tim-report bisect, assert_layers_match; analysis/bisect.py)."""

# A site is beyond its floor when the candidate's local error is this many times the floor's at the median token, or
# BISECT_BEYOND_P99 times at the 99th percentile. Measured on models/tiny-llama6 (bf16 against fp32, docs/bisect.md):
# an RMSNorm in bf16 without the fp32 upcast, in every layer, reads ≤ 1.3× at the median and ≤ 2.0× at p99 (noise);
# the smallest planted bug, an attention without its 1/√d scaling, 5×; a swapped activation 15×, eps 1e-6 → 1e-3 160×.
BISECT_BEYOND_MEDIAN = 3.0
BISECT_BEYOND_P99 = 4.0
# No floor is taken below a quarter of one unit roundoff of the candidate's precision (per token, relative): when the
# floor setup computes exactly what the reference does (an fp32 candidate with a patch) it measures zero.
BISECT_ROUNDOFF = {"fp32": 2.0 ** -24, "bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
BISECT_MIN_FLOOR_ROUNDOFFS = 0.25

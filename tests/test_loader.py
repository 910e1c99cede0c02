"""The loader reads each framework's layout into the same StepBatch."""

from __future__ import annotations

import io
import json
import pickle

import numpy as np
import pytest
import torch

from tim_report.analysis import analyze
from tim_report.errors import BadInput
from tim_report.io import LoadOptions, describe, load, save_batch
from tim_report.testing import make_batch, to_padded


def same_metrics(a, b):
    ma, mb = analyze(a).metrics, analyze(b).metrics
    for k in ("tokens", "sequences", "kl_k1", "kl_k3", "ess", "ess_seq", "chi2_seq", "abs_delta_median", "ppl_trainer"):
        assert ma[k] == pytest.approx(mb[k], rel=1e-6), k


def test_verl_pt_padded_equals_flat(verl_pt, batch):
    loaded = load(verl_pt)
    assert loaded.meta["layout"] == "padded"
    assert loaded.meta["keys"]["rollout"] == "rollout_log_probs" and loaded.meta["keys"]["trainer"] == "old_log_probs"
    assert loaded.meta["step"] == 7  # from the file name
    np.testing.assert_array_equal(loaded.offsets, batch.offsets)
    np.testing.assert_array_equal(loaded.token_ids, batch.token_ids)
    np.testing.assert_allclose(loaded.reward, batch.reward, rtol=1e-6)
    assert list(loaded.group) == list(batch.group)
    same_metrics(loaded, batch)  # padded (float32 on disk) and flat give the same numbers


def test_trl_npz_names(trl_npz, batch):
    loaded = load(trl_npz)
    assert loaded.meta["keys"]["rollout"] == "sampling_per_token_logps"
    assert loaded.meta["keys"]["mask"] == "completion_mask"
    same_metrics(loaded, batch)


def test_openrlhf_sequences_wider_than_logprobs_are_right_aligned(tmp_path, batch):
    d = to_padded(batch, rollout_key="rollout_log_probs", trainer_key="action_log_probs", mask_key="action_mask",
                  tokens_key="responses", dtype=np.float64)
    prompt = np.full((batch.n_seqs, 5), 7, np.int64)
    np.savez(tmp_path / "orl.npz", rollout_log_probs=d["rollout_log_probs"], action_log_probs=d["action_log_probs"],
             action_mask=d["action_mask"], sequences=np.concatenate([prompt, d["responses"]], axis=1))
    loaded = load(tmp_path / "orl.npz")
    np.testing.assert_array_equal(loaded.token_ids, batch.token_ids)
    assert any("last" in n for n in loaded.notes)


def test_tool_tokens_inside_response_stay_out_of_the_metrics(tmp_path, batch):
    d = to_padded(batch, dtype=np.float64)
    attention = (d["response_mask"] > 0).astype(np.int64)
    d["response_mask"][:, 1] = 0  # a tool token in every response
    d["old_log_probs"][:, 1] = -20.0
    np.savez(tmp_path / "multi.npz", attention_mask=attention, **d)
    loaded = load(tmp_path / "multi.npz")
    assert loaded.n_tokens == batch.n_tokens  # tool tokens kept in the flat arrays...
    assert int(loaded.mask.sum()) == batch.n_tokens - batch.n_seqs  # ...but not trained on
    assert analyze(loaded).metrics["abs_delta_max"] < 1


def test_slime_ragged_lists_in_pt(tmp_path, batch):
    seqs = [batch.tokens_of(i) for i in range(batch.n_seqs)]
    torch.save({
        "rollout_log_probs": [batch.rollout_logp[s].tolist() for s in seqs],
        "log_probs": [torch.tensor(batch.trainer_logp[s]) for s in seqs],
        "loss_masks": [[1] * (s.stop - s.start) for s in seqs],
        "token_text": [[f"t{j}" for j in range(s.start, s.stop)] for s in seqs],
    }, tmp_path / "slime.pt")
    loaded = load(tmp_path / "slime.pt")
    assert loaded.meta["layout"] == "ragged"
    assert loaded.token_strings(slice(0, 2)) == ["t0", "t1"]
    same_metrics(loaded, batch)


def test_prime_rl_style_jsonl(tmp_path, batch):
    lines = []
    for i in range(batch.n_seqs):
        s = batch.tokens_of(i)
        lines.append(json.dumps({"inference_logprobs": batch.rollout_logp[s].tolist(),
                                 "trainer_logprobs": batch.trainer_logp[s].tolist(),
                                 "completion_ids": batch.token_ids[s].tolist(), "prompt": f"question {i}"}))
    (tmp_path / "prime.jsonl").write_text("\n".join(lines) + "\n")
    loaded = load(tmp_path / "prime.jsonl")
    assert loaded.prompt_string(3) == "question 3"
    same_metrics(loaded, batch)


def test_canonical_round_trip(tmp_path, batch):
    batch.token_text = [f"<{i}>" for i in range(batch.n_tokens)]
    batch.prompt_ids = [np.arange(i + 1) for i in range(batch.n_seqs)]
    batch.shadow_logp = batch.trainer_logp - 0.001
    batch.meta.update(step=12, rollout_engine="vllm")
    save_batch(batch, tmp_path / "canon.npz")
    loaded = load(tmp_path / "canon.npz")
    assert loaded.meta["step"] == 12 and loaded.meta["rollout_engine"] == "vllm"
    assert loaded.token_strings(slice(0, 2)) == ["<0>", "<1>"]
    np.testing.assert_array_equal(loaded.prompt_ids[4], np.arange(5))
    np.testing.assert_allclose(loaded.shadow_logp, batch.shadow_logp)
    same_metrics(loaded, batch)


def test_token_text_2d_str_array_in_npz(tmp_path, batch):
    d = to_padded(batch, dtype=np.float64)
    text = np.full(d["responses"].shape, "", dtype="<U8")
    text[d["response_mask"] > 0] = [f"w{i}" for i in range(batch.n_tokens)]
    np.savez(tmp_path / "t.npz", token_text=text, **d)
    assert load(tmp_path / "t.npz").token_strings(slice(3, 5)) == ["w3", "w4"]


def test_key_override_picks_another_trainer(tmp_path, batch):
    d = to_padded(batch, dtype=np.float64)
    d["log_probs"] = d["old_log_probs"] - 1.0
    np.savez(tmp_path / "k.npz", **d)
    assert load(tmp_path / "k.npz").meta["keys"]["trainer"] == "old_log_probs"
    over = load(tmp_path / "k.npz", LoadOptions(keys={"trainer": "log_probs"}))
    assert over.meta["keys"]["trainer"] == "log_probs"
    assert analyze(over).metrics["bias"] < -0.9


def test_describe_explains_roles(verl_pt):
    info = describe(verl_pt)
    assert info["roles"]["rollout"]["key"] == "rollout_log_probs"
    assert info["roles"]["advantage"]["key"] is None
    assert {e["key"] for e in info["keys"]} >= {"rollout_log_probs", "old_log_probs", "response_mask", "uid"}
    assert info["layout"] == "padded" and "alignment" in info


class FakeDataProto:
    """Stands in for verl's DataProto: needs full unpickling."""

    def __init__(self, batch, non_tensor_batch, meta_info):
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info


def test_pickled_dataproto_needs_allow_pickle(tmp_path, batch):
    d = to_padded(batch, dtype=np.float64)
    proto = FakeDataProto({k: torch.from_numpy(v) for k, v in d.items() if v.dtype.kind != "U"},
                          {"uid": d["uid"].astype(object)}, {"global_steps": 3})
    path = tmp_path / "proto.pt"
    torch.save(proto, path, pickle_module=pickle)
    with pytest.raises(BadInput, match="--allow-pickle"):
        load(path)
    with pytest.warns(UserWarning, match="allow-pickle"):
        loaded = load(path, LoadOptions(allow_pickle=True))
    same_metrics(loaded, batch)
    assert list(loaded.group) == list(batch.group)


def test_bf16_tensors_are_widened(tmp_path, batch):
    d = to_padded(batch, dtype=np.float64)
    torch.save({"rollout_log_probs": torch.from_numpy(d["rollout_log_probs"]).bfloat16(),
                "old_log_probs": torch.from_numpy(d["old_log_probs"]).bfloat16(),
                "response_mask": torch.from_numpy(d["response_mask"])}, tmp_path / "bf16.pt")
    assert load(tmp_path / "bf16.pt").rollout_logp.dtype == np.float64


def test_groups_from_n_in_meta(tmp_path):
    b = make_batch(12, 10, seed=2)
    b.group = None
    b.meta["n"] = 4
    save_batch(b, tmp_path / "g.npz")
    loaded = load(tmp_path / "g.npz")
    assert list(loaded.group) == ["0"] * 4 + ["1"] * 4 + ["2"] * 4


def test_docs_list_every_key_name():
    from pathlib import Path

    from tim_report.io import ROLE_ALIASES

    doc = (Path(__file__).parent.parent / "docs" / "formats.md").read_text()
    for role, names in ROLE_ALIASES.items():
        row = next(line for line in doc.splitlines() if line.startswith(f"| {role} |"))
        assert row == f"| {role} | " + ", ".join(f"`{n}`" for n in names) + " |"


def test_a_read_that_meets_cpythons_ast_race_is_done_again(tmp_path, monkeypatch):
    """CPython 3.11 (python/cpython#106905): numpy's header parse in two threads at once can raise a spurious
    SystemError; the member is read again under a lock instead of calling a valid file corrupt."""
    import numpy as np


    save_batch(make_batch(4, 8), tmp_path / "b.npz")
    real, calls = np.lib.format.read_array_header_1_0, []

    def racing(stream, *a, **k):
        if isinstance(stream, io.BytesIO):  # a member's data being read (its header was read when the file opened)
            calls.append(1)
            if len(calls) == 1:
                raise SystemError("AST constructor recursion depth mismatch (before=33, after=30)")
        return real(stream, *a, **k)

    monkeypatch.setattr(np.lib.format, "read_array_header_1_0", racing)
    assert load(tmp_path / "b.npz").n_tokens > 0 and len(calls) > 1

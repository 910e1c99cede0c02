"""tim_report.save_step: a training loop's tensors → the canonical .npz, read back token for token; a step's rank
files merged by build; bad input refused with one line; nothing half-written; the background writer."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import ROOT

import tim_report
from tim_report.errors import BadInput
from tim_report.io import load, sources
from tim_report.io.step_writer import StepWriter
from tim_report.service.build import BuildOptions, build


def padded(seed: int = 0, b: int = 4, t: int = 7):
    """[B, T] tensors as a trainer holds them: bf16 rollout, fp32 trainer, right padding, one untrained token."""
    g = torch.Generator().manual_seed(seed)
    rollout = -torch.rand(b, t, generator=g).bfloat16() * 3
    trainer = rollout.float() + torch.randn(b, t, generator=g) * 0.01
    mask = torch.ones(b, t, dtype=torch.long)
    mask[0, 5:] = 0  # padding
    mask[1, 2] = 0  # an untrained token inside the sequence
    mask[2, 3:] = 0
    ids = torch.arange(b * t).view(b, t) + 100
    return rollout, trainer, mask, ids


def test_padded_bf16_tensors_round_trip_token_exact(tmp_path):
    rollout, trainer, mask, ids = padded()
    path = tim_report.save_step(tmp_path, rollout, trainer, mask=mask, token_ids=ids, step=5, rank=0, model="m",
                                rollout_engine="vllm", rollout_dtype="bf16", trainer_engine="fsdp", trainer_dtype="fp32",
                                group=np.array(["a", "a", "b", "b"], dtype=object), reward=torch.tensor([1.0, 0.0, 1.0, 0.5]),
                                advantage=torch.tensor([0.5, -0.5, 0.5, -0.5]),
                                prompt_ids=torch.tensor([[0, 7, 8], [9, 10, 11], [0, 0, 12], [13, 14, 15]]),
                                prompt_mask=torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1], [1, 1, 1]]))
    assert path == tmp_path / "step_5" / "rank_0.npz"
    b = load(path)
    # right padding cut after each row's last trained token; the untrained token inside row 1 stays, untrained
    lengths = [5, 7, 3, 7]
    assert b.offsets.tolist() == [0, *np.cumsum(lengths).tolist()]
    keep = torch.zeros_like(mask, dtype=torch.bool)
    for i, n in enumerate(lengths):
        keep[i, :n] = True
    assert np.array_equal(b.rollout_logp, rollout.float()[keep].double().numpy())  # bf16 → exactly the same numbers
    assert np.array_equal(b.trainer_logp, trainer[keep].double().numpy())
    assert b.mask.tolist() == mask[keep].bool().tolist() and not b.mask[5 + 2]
    assert b.token_ids.tolist() == ids[keep].tolist()
    assert b.group.tolist() == ["a", "a", "b", "b"] and b.reward.tolist() == [1.0, 0.0, 1.0, 0.5]
    assert b.advantage.tolist() == np.repeat([0.5, -0.5, 0.5, -0.5], lengths).tolist()
    assert [p.tolist() for p in b.prompt_ids] == [[7, 8], [9, 10, 11], [12], [13, 14, 15]]
    assert b.meta["step"] == 5 and b.meta["model"] == "m" and b.meta["rollout_dtype"] == "bf16"
    assert b.meta["logp_dtypes"] == {"rollout": "bfloat16", "trainer": "float32"}


def test_flat_float64_numpy_with_offsets_tool_mask_turns_topk_and_token_rewards(tmp_path):
    rng = np.random.default_rng(1)
    offsets = np.array([0, 3, 8, 12])
    rollout = -rng.exponential(size=12)  # float64: kept float64
    trainer = rollout + 1e-12
    tool = np.ones(12, int)
    tool[4:6] = 0  # a tool's output inside sequence 1
    k = 3
    path = tim_report.save_step(tmp_path / "one.npz", rollout, trainer, offsets=offsets, tool_mask=tool,
                                turn=np.array([0] * 3 + [0, 0, 0, 0, 1] + [0] * 4), reward=np.arange(12.0),
                                rollout_topk_ids=rng.integers(0, 50, (12, k)), rollout_topk_logp=-rng.random((12, k)),
                                trainer_topk_ids=rng.integers(0, 50, (12, k)), trainer_topk_logp=-rng.random((12, k)))
    b = load(path)
    assert np.array_equal(b.rollout_logp, rollout) and np.array_equal(b.trainer_logp, trainer)  # 1e-12 survives
    assert b.mask.sum() == 10 and not b.mask[4:6].any() and b.meta["tool_tokens"] == 2
    assert b.reward.tolist() == [3.0, 3 + 4 + 5 + 6 + 7.0, 8 + 9 + 10 + 11.0]  # token-level rewards summed
    assert b.turn.tolist()[7] == 1 and b.rollout_topk_ids.shape == (12, k)


def test_rank_files_of_a_step_are_merged_by_build(tmp_path):
    run = tmp_path / "run"
    for step in (1, 2):
        for rank in (1, 0):  # written out of order: read in rank order
            rollout, trainer, mask, ids = padded(seed=10 * step + rank)
            tim_report.save_step(run, rollout, trainer, mask=mask, token_ids=ids + 1000 * rank, step=step, rank=rank,
                                 world_size=2, group=np.array([f"p{i // 2}" for i in range(4)]))
    found = sources(run)
    assert [(s.run_id, len(s.paths)) for s in found] == [("step_1", 2), ("step_2", 2)]
    b = load(found[0])
    r0, r1 = load(run / "step_1" / "rank_0.npz"), load(run / "step_1" / "rank_1.npz")
    assert b.n_seqs == 8 and np.array_equal(b.rollout_logp, np.concatenate([r0.rollout_logp, r1.rollout_logp]))
    assert b.token_ids[r0.n_tokens] == 1100 and b.meta["ranks"] == "0, 1" and b.meta["step"] == 1
    assert b.group.tolist().count("p0") == 4  # one prompt's samples on two ranks stay one group
    out = tmp_path / "site"
    build([run], out, BuildOptions(formats=("json",)))
    assert (out / "step_1").is_dir() and (out / "step_2").is_dir()
    (run / "step_2" / "rank_1.npz").unlink()
    with pytest.raises(BadInput, match=r"1 of 2 ranks have no file here \(rank 1\): the step cannot be read whole"):
        load(sources(run)[1])  # never a silent partial step (tests/test_hostile_steps.py: its row in a build)


@pytest.mark.parametrize("kwargs, words", [
    (dict(rollout_logp=np.zeros((2, 3)), trainer_logp=np.zeros((2, 4))), "'trainer_logp' is [2, 4] but 'rollout_logp' is [2, 3]"),
    (dict(rollout_logp=np.zeros((2, 3)), trainer_logp=np.zeros((2, 3)), mask=np.ones((2, 2))), "'mask' is [2, 2]"),
    (dict(rollout_logp=np.zeros(5), trainer_logp=np.zeros(5)), "give 'offsets'"),
    (dict(rollout_logp=np.zeros(5), trainer_logp=np.zeros(5), offsets=[0, 2, 4]), "'offsets' must rise from 0 to the token count 5"),
    (dict(rollout_logp=np.zeros((2, 3), int), trainer_logp=np.zeros((2, 3))), "expected floats"),
    (dict(rollout_logp=np.zeros((2, 3)), trainer_logp=np.zeros((2, 3)), mask=np.zeros((2, 3))), "the mask selects no tokens"),
    (dict(rollout_logp=np.zeros((2, 3)), trainer_logp=np.zeros((2, 3)), group=["a"]), "'group' is [1]"),
    (dict(rollout_logp=np.zeros((2, 3)), trainer_logp=np.zeros((2, 3)), rollout_topk_ids=np.zeros((2, 3, 2), int)), "all four"),
    (dict(rollout_logp=np.zeros((2, 3)), trainer_logp=np.zeros((2, 3)), prompt_ids=[[1], [2], [3]]), "3 prompts for 2 sequences"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, kwargs, words):
    with pytest.raises(BadInput) as err:
        tim_report.save_step(tmp_path, step=0, **kwargs)
    assert words in str(err.value) and "\n" not in str(err.value) and str(err.value).startswith("save_step: ")
    assert not any(tmp_path.rglob("*"))


def test_a_folder_needs_a_step_and_a_rank_inside_the_world(tmp_path):
    with pytest.raises(BadInput, match="give step="):
        tim_report.save_step(tmp_path, np.zeros((1, 2)), np.zeros((1, 2)))
    with pytest.raises(BadInput, match="rank 2 is not in"):
        tim_report.save_step(tmp_path, np.zeros((1, 2)), np.zeros((1, 2)), step=0, rank=2, world_size=2)


def test_a_failed_write_leaves_neither_file_nor_temporary(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np.lib.format, "write_array", broken)
    rollout, trainer, mask, _ = padded()
    with pytest.raises(BadInput, match="rank_0.npz: cannot be written: disk full"):
        tim_report.save_step(tmp_path, rollout, trainer, mask=mask, step=1)
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_temporary_being_written_is_not_a_step(tmp_path):
    rollout, trainer, mask, _ = padded()
    tim_report.save_step(tmp_path, rollout, trainer, mask=mask, step=1, rank=0)
    (tmp_path / "step_1" / ".rank_1.npz.4242.tmp").write_bytes(b"PK\x03\x04 half")
    assert [len(s.paths) for s in sources(tmp_path)] == [1]


def test_background_copies_before_returning_and_writes_in_order(tmp_path):
    rollout, trainer, mask, _ = padded()
    buffer = trainer.clone()
    with StepWriter(max_pending=1) as writer:
        paths = [tim_report.save_step(tmp_path, rollout, buffer, mask=mask, step=s, background=writer) for s in range(3)]
        expected = buffer.clone()
        buffer.fill_(-99.0)  # the loop reuses its buffer at once: the saved step must not see it
    assert all(p.is_file() for p in paths)
    b = load(paths[2])
    assert (b.trainer_logp > -10).all() and b.trainer_logp[0] == float(expected[0, 0])


def test_background_errors_surface_on_flush(tmp_path):
    (tmp_path / "step_1").write_text("a file where the step folder should be")
    rollout, trainer, mask, _ = padded()
    writer = StepWriter()
    with pytest.raises(BadInput, match="is a symbolic link or not a folder"):  # refused at the call, before any work
        tim_report.save_step(tmp_path, rollout, trainer, mask=mask, step=1, background=writer)
    writer.flush()
    writer.close()


def test_background_true_is_flushed_at_exit(tmp_path):
    code = ("import numpy as np, tim_report\n"
            f"tim_report.save_step({str(tmp_path)!r}, -np.ones((2, 3), np.float32), -np.ones((2, 3), np.float32), step=4,"
            " background=True)\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    assert load(tmp_path / "step_4" / "rank_0.npz").n_tokens == 6


def test_import_loads_no_torch_and_save_step_is_lazy():
    code = "import sys, tim_report; f = tim_report.save_step; w = tim_report.StepWriter; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == "False"

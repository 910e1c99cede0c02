"""Red team, round two: the writer inside the training loop (save_step, StepWriter) under hostile conditions.

Families, as the red team ran them: real links planted where save_step writes (symbolic and hard, at the step
folder, at the old predictable temporary name, at the final name); values that are not a step, a rank or a world
(negative, fractional, NaN, huge, a string, a NUL byte in the folder, a meta nested past the recursion limit); and a
full disk, a real tmpfs of 64 KiB mounted for the test (root; skipped where mounting is not allowed, a failure under
TIM_REPORT_CI=1 only when the machine could mount), written from a real training process that must exit non-zero.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, small_tmpfs

import tim_report
from tim_report.errors import BadInput
from tim_report.io import load
from tim_report.io.step_files import step_target
from tim_report.io.step_writer import StepWriter, write
from tim_report.testing import make_batch

LOGP = -np.ones((2, 3), np.float32)


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def one_line(err: pytest.ExceptionInfo, *words: str) -> str:
    text = str(err.value)
    assert "\n" not in text and all(w in text for w in words), text
    return text


# ---- links planted where save_step writes -------------------------------------------------------------------

@pytest.mark.parametrize("background", [False, True])
def test_a_symlink_at_the_step_folder_is_refused_and_its_target_untouched(tmp_path, background):
    victim = tmp_path / "victim"
    victim.mkdir()
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "step_1").symlink_to(victim)
    with pytest.raises(BadInput) as err:
        tim_report.save_step(steps, LOGP, LOGP, step=1, background=background)
    one_line(err, "step_1", "symbolic link")
    assert files_under(victim) == []


def test_a_link_swapped_in_after_the_call_is_refused_at_the_write(tmp_path):
    """The background write opens the step folder no-follow: a link planted between the call and the write (what
    the call's own check cannot see) is refused then, and the folder it points to stays empty."""
    victim = tmp_path / "victim"
    victim.mkdir()
    target = step_target(tmp_path / "steps", 3, 0, None)[0]
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "step_3").symlink_to(victim)
    with pytest.raises(BadInput) as err:
        write(target, make_batch(n_seqs=2, mean_len=4))
    one_line(err, "step_3", "symbolic link")
    assert files_under(victim) == []


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_links_at_the_temporary_and_final_names_are_never_written_through(tmp_path, link):
    """The red team's links: at `.rank_0.npz.<pid>.tmp` (the name a writer used to pick, for this very process) and at
    `rank_0.npz` itself. The file is written, the linked files keep their bytes."""
    steps = tmp_path / "steps"
    (steps / "step_1").mkdir(parents=True)
    victims = []
    for name in (f".rank_0.npz.{os.getpid()}.tmp", "rank_0.npz"):
        victim = tmp_path / f"victim-{len(victims)}"
        victim.write_bytes(b"precious")
        (os.symlink if link == "symlink" else os.link)(victim, steps / "step_1" / name)
        victims.append(victim)
    path = tim_report.save_step(steps, LOGP, LOGP, step=1)
    assert [v.read_bytes() for v in victims] == [b"precious", b"precious"]
    assert not path.is_symlink() and load(path).n_tokens == 6
    leftovers = [p.name for p in (steps / "step_1").iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]
    assert leftovers == [f".rank_0.npz.{os.getpid()}.tmp"]  # the planted one, left alone; none of ours


def test_temporary_names_are_unpredictable(tmp_path, monkeypatch):
    seen = []
    real_open = os.open

    def spy(path, flags, *args, **kwargs):
        if str(path).endswith(".tmp"):
            seen.append((str(path), flags))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    for _ in range(2):
        tim_report.save_step(tmp_path, LOGP, LOGP, step=1)
    assert len({p for p, _ in seen}) == 2  # a new random name each time
    assert all(f & os.O_EXCL and f & os.O_NOFOLLOW and f & os.O_CREAT for _, f in seen)


# ---- values that are not a step, a rank or a world ---------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    (dict(step=1, rank=-1), "rank=-1 is outside 0"),
    (dict(step=1, rank=1.7), "rank=1.7 is not an integer (float)"),
    (dict(step=-3), "step=-3 is outside 0"),
    (dict(step=2.9), "step=2.9 is not an integer"),
    (dict(step=2.0), "step=2.0 is not an integer"),
    (dict(step="3"), "step='3' is not an integer (str)"),
    (dict(step=float("nan")), "step=nan is not an integer"),
    (dict(step=float("inf")), "step=inf is not an integer"),
    (dict(step=2**64), "is outside 0"),
    (dict(step=True), "step=True is a bool"),
    (dict(step=1, world_size=10**12), "world_size=1000000000000 is outside 1"),
    (dict(step=1, world_size=0), "world_size=0 is outside 1"),
    (dict(step=1, rank=2, world_size=2), "rank 2 is not in 0 … world_size - 1 (1)"),
    (dict(step=1, rank=np.int64(3), world_size=np.int32(2)), "rank 3 is not in"),
    (dict(step=1, meta="not a dict"), "meta is str"),
    (dict(step=1, background="yes"), "background=str"),
])
def test_a_step_rank_or_world_that_is_not_one_is_refused_before_anything_is_made(tmp_path, kwargs, words):
    with pytest.raises(BadInput) as err:
        tim_report.save_step(tmp_path / "steps", LOGP, LOGP, **kwargs)
    assert one_line(err, words).startswith("save_step: ")
    assert not (tmp_path / "steps").exists()


def test_numpy_and_tensor_integers_are_steps_and_ranks(tmp_path):
    import torch

    path = tim_report.save_step(tmp_path, LOGP, LOGP, step=np.int64(4), rank=torch.tensor(1), world_size=np.uint8(2))
    assert path == tmp_path / "step_4" / "rank_1.npz" and load(path).meta["world_size"] == 2


def test_a_nul_byte_and_a_meta_nested_too_deep_are_one_line_and_leave_no_folder(tmp_path):
    with pytest.raises(BadInput) as err:
        tim_report.save_step(str(tmp_path / "a\0b"), LOGP, LOGP, step=1)
    one_line(err, "NUL byte")
    deep: dict = {}
    node = deep
    for _ in range(100_000):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(BadInput) as err:
        tim_report.save_step(tmp_path / "steps", LOGP, LOGP, step=1, meta=deep)
    one_line(err, "meta cannot be written as JSON", "RecursionError")
    assert files_under(tmp_path) == []


def test_a_meta_a_raised_recursion_limit_lets_json_write_is_refused_too(tmp_path):
    """A loop that raised its recursion limit wrote a meta nested 5,000 deep, which no reader (json under the default
    limit) could read back: what save_step writes must read back."""
    import sys

    before = sys.getrecursionlimit()
    deep: dict = {}
    node = deep
    for _ in range(5_000):
        node["x"] = {}
        node = node["x"]
    sys.setrecursionlimit(20_000)
    try:
        with pytest.raises(BadInput) as err:
            tim_report.save_step(tmp_path / "steps", LOGP, LOGP, step=1, meta=deep)
    finally:
        sys.setrecursionlimit(before)
    one_line(err, "meta nests more than 64 levels deep")
    assert files_under(tmp_path) == []


# ---- a full disk, from a real training process ---------------------------------------------------------------

NOISE = "np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32) - 5"  # 128 KiB, incompressible


def loop(out: Path, body: str) -> subprocess.CompletedProcess:
    code = f"import numpy as np, tim_report\nlogp = {NOISE}\n{body}\nprint('loop done', flush=True)\n"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OUT": str(out)})


def test_a_full_disk_is_one_line_in_the_loop_and_leaves_no_temporary(tmp_path):
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        with pytest.raises(BadInput) as err:
            tim_report.save_step(disk, -np.abs(np.random.default_rng(0).standard_normal((64, 512))).astype(np.float32) - 5,
                                 np.zeros((64, 512), np.float32) - 5, step=1)
        one_line(err, "rank_0.npz", "No space left on device")
        assert [p.name for p in disk.rglob("*") if p.is_file()] == []


def test_background_true_into_a_full_disk_exits_non_zero_with_one_line(tmp_path):
    """The red team's case: the last step's write fails at interpreter exit. Before, "Exception ignored in atexit
    callback" and exit 0; now one line and exit 1, and nothing half-written."""
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        res = loop(disk, "tim_report.save_step(__import__('os').environ['OUT'], logp, logp, step=1, background=True)")
        assert res.returncode == 1, res.stderr
        assert "loop done" in res.stdout
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "No space left on device" in lines[0] and "rank_0.npz" in lines[0], res.stderr
        assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr
        assert [p.name for p in disk.rglob("*") if p.is_file()] == []


def test_a_failed_background_write_is_raised_at_the_next_call(tmp_path):
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        body = ("import os, time\nfrom tim_report.errors import BadInput\nw = tim_report.StepWriter()\n"
                "tim_report.save_step(os.environ['OUT'], logp, logp, step=1, background=w)\n"
                "time.sleep(1)\n"
                "try:\n    tim_report.save_step(os.environ['OUT'], logp, logp, step=2, background=w)\n"
                "except BadInput as e:\n    print('raised in the loop:', e)\n    raise SystemExit(3)\n")
        res = loop(disk, body)
        assert res.returncode == 3, res.stderr
        assert "raised in the loop: " in res.stdout and "step_1/rank_0.npz: cannot be written: No space left" in res.stdout


def test_a_writer_left_open_is_flushed_at_exit(tmp_path):
    res = loop(tmp_path, "import os\nw = tim_report.StepWriter()\n"
                         "tim_report.save_step(os.environ['OUT'], logp, logp, step=7, background=w)")
    assert res.returncode == 0, res.stderr
    assert load(tmp_path / "step_7" / "rank_0.npz").n_tokens == 64 * 512


def test_a_closed_writer_is_one_line():
    w = StepWriter()
    w.close()
    with pytest.raises(BadInput) as err:
        tim_report.save_step("unused", LOGP, LOGP, step=1, background=w)
    one_line(err, "closed")

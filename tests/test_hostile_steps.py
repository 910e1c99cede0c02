"""Red team, round two: steps that cannot be read whole, and routes that are not expert ids.

Families: a run folder's step missing a rank, holding a rank outside its world or a rank file whose name does not
parse, a step folder whose name does not parse (step_-3, step_2.9), a world size of 10⁶ or 10¹² recorded in a file
(written by hand: save_step refuses them): each is the documented unreadable step (its row, exit 3), never a silent
partial step, with bounded work and output. And routed-expert ids 2³² apart (int64) or above 2⁶³ (uint64), which a
cast to int32 read as identical (routing replay).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, run

import tim_report
from tim_report.analysis import analyze
from tim_report.errors import BadInput
from tim_report.io import load, save_batch, sources
from tim_report.io.canonical import batch_arrays, write_npz
from tim_report.testing import make_batch


def saved(run_dir: Path, step: int, rank: int, world: int | None = 2, seed: int = 0) -> Path:
    b = make_batch(n_seqs=4, mean_len=8, seed=10 * step + rank + seed)
    return tim_report.save_step(run_dir, b.rollout_logp.astype(np.float32)[None, :], b.trainer_logp.astype(np.float32)[None, :],
                                step=step, rank=rank, world_size=world)


def hand_written(run_dir: Path, step: int, rank_name: str, meta: dict) -> Path:
    """A rank file save_step would refuse to write, as another program (or a hand) writes it."""
    b = make_batch(n_seqs=4, mean_len=8, seed=step)
    b.meta.update(meta)
    folder = run_dir / f"step_{step}"
    folder.mkdir(parents=True, exist_ok=True)
    write_npz(batch_arrays(b, True), folder / rank_name, 1)
    return folder / rank_name


def build_json(*args) -> tuple[object, dict]:
    res = run("build", *args)
    site = Path(args[args.index("-o") + 1])
    doc = json.loads((site / "index.json").read_text()) if (site / "index.json").exists() else {}
    return res, doc


@pytest.mark.parametrize("case, reason", [
    ("rank missing", "1 of 2 ranks have no file here (rank 1)"),
    ("rank outside the world", "records rank 5, outside its world of 2"),
    ("rank file name", "rank_-1.npz, whose rank does not parse"),
    ("step name", "its step does not parse"),
    ("world of 10**12", "records world_size 1000000000000, not a world size"),
    ("rank gap", "1 of 3 ranks have no file here (rank 1)"),
])
def test_a_step_that_cannot_be_read_whole_is_the_unreadable_step(tmp_path, case, reason):
    run_dir = tmp_path / "run"
    for step in (1, 2):
        for rank in (0, 1):
            saved(run_dir, step, rank)
    if case == "rank missing":
        (run_dir / "step_2" / "rank_1.npz").unlink()
    elif case == "rank outside the world":
        hand_written(run_dir, 2, "rank_1.npz", {"rank": 5, "world_size": 2, "step": 2})
    elif case == "rank file name":
        hand_written(run_dir, 2, "rank_-1.npz", {"rank": -1, "world_size": 2, "step": 2})
    elif case == "step name":
        (run_dir / "step_2").rename(run_dir / "step_-3")
    elif case == "world of 10**12":
        hand_written(run_dir, 2, "rank_1.npz", {"rank": 1, "world_size": 10**12, "step": 2})
        hand_written(run_dir, 2, "rank_0.npz", {"rank": 0, "world_size": 10**12, "step": 2})
    elif case == "rank gap":
        for rank in (0, 2):
            saved(run_dir, 3, rank, world=None)
    res, doc = build_json(run_dir, "-o", tmp_path / "site", "--format", "json")
    assert res.exit_code == 3, res.output
    assert [r["id"] for r in doc["runs"]][0] == "step_1"
    assert len(doc["unreadable"]) == 1 and reason in doc["unreadable"][0]["reason"], doc["unreadable"]
    assert "Traceback" not in res.output


def test_a_step_folder_given_alone_that_misses_a_rank_is_exit_2(tmp_path):
    saved(tmp_path / "run", 1, 0)
    res = run("build", tmp_path / "run" / "step_1", "-o", tmp_path / "site")
    assert res.exit_code == 2 and "1 of 2 ranks have no file here (rank 1)" in res.output
    assert not (tmp_path / "site").exists()


def test_a_world_of_a_million_is_bounded_work_and_output(tmp_path):
    """world_size 10⁶ recorded in a 32-token step's files: before, a 7.97 MB page listing every missing rank; 10¹²
    was a 2.3 GB MemoryError that stopped a watch for good. Now one line, in bounded memory and time."""
    run_dir = tmp_path / "run"
    saved(run_dir, 1, 0)
    saved(run_dir, 1, 1)
    hand_written(run_dir, 2, "rank_0.npz", {"rank": 0, "world_size": 10**6, "step": 2})
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "from tim_report.cli import main; sys.exit(main(sys.argv[1:], prog_name='tim-report'))")
    res = subprocess.run([sys.executable, "-c", code, "build", str(run_dir), "-o", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 3, res.stderr
    line = next(ln for ln in res.stderr.splitlines() if "step_2" in ln)
    assert "999999 of 1000000 ranks have no file here (rank 1, 2, 3, 4, 5, …)" in line and len(line) < 400
    assert sum(p.stat().st_size for p in (tmp_path / "site").rglob("*") if p.is_file()) < 2_000_000


def test_save_step_ranks_of_a_complete_world_still_merge(tmp_path):
    for rank in (1, 0):
        saved(tmp_path, 4, rank)
    b = load(sources(tmp_path)[0])
    assert b.meta["ranks"] == "0, 1" and b.n_seqs == 2


def test_a_renamed_rank_file_is_refused(tmp_path):
    saved(tmp_path, 1, 0)
    saved(tmp_path, 1, 1)
    (tmp_path / "step_1" / "rank_1.npz").rename(tmp_path / "step_1" / "rank_2.npz")
    with pytest.raises(BadInput, match="rank_2.npz records rank 1"):
        load(sources(tmp_path)[0])


# ---- routed experts at full width ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, offset", [(np.int64, 2**32), (np.uint64, 2**63)])
def test_expert_ids_that_do_not_fit_an_index_are_unusable_not_identical(tmp_path, dtype, offset):
    b = make_batch(n_seqs=8, mean_len=16, seed=1)
    ro = np.random.default_rng(0).integers(0, 8, (b.n_tokens, 2, 2)).astype(dtype)
    b.rollout_routes, b.trainer_routes = ro, ro + dtype(offset)  # a cast to int32 makes the two equal
    save_batch(b, tmp_path / "r.npz")
    back = load(tmp_path / "r.npz")
    assert back.trainer_routes.dtype == dtype and int(back.trainer_routes.max()) >= offset
    d = analyze(back).diagnosis
    ra = d["routing_agreement"]
    assert not ra["available"] and "not expert indices" in ra["reason"] and ra["problem"] == "not_experts"
    assert "routes_unusable" in {f["id"] for f in d["findings"]}
    assert "routing_flips" not in {f["id"] for f in d["findings"]}


def test_negative_expert_ids_are_unusable(tmp_path):
    b = make_batch(n_seqs=4, mean_len=8)
    b.rollout_routes = b.trainer_routes = -np.ones((b.n_tokens, 1, 2), np.int32)
    assert "not expert indices" in analyze(b).diagnosis["routing_agreement"]["reason"]


def test_a_step_of_a_trillion_ranks_does_not_stop_a_live_watch(tmp_path):
    """Before: a MemoryError (2.3 GB) in the rank bookkeeping, and every later step never built. Now the step is
    left out with one line and the steps after it are built."""
    from tim_report.service.build import BuildOptions
    from tim_report.service.watch import Watch, WatchOptions

    run_dir = tmp_path / "run"
    for rank in (0, 1):
        saved(run_dir, 1, rank)
        hand_written(run_dir, 2, f"rank_{rank}.npz", {"rank": rank, "world_size": 10**12, "step": 2})
        saved(run_dir, 3, rank)
    w = Watch(run_dir, tmp_path / "site", WatchOptions(build=BuildOptions(formats=("json",))))
    w.step()
    rnd = w.step()
    assert [r["id"] for r in rnd.new_rows] == ["step_1", "step_3"]
    said = [n for n in rnd.notes if "step_2" in n]
    assert len(said) == 1 and "records world_size 1000000000000, not a world size" in said[0] and "\n" not in said[0]

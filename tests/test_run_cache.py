"""Issue 22: the cache knows the same run however it is reached, and one bad step does not stop a run's build."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.testing import make_batch, write_prime_rl_run


def run_cli(*args, code: int = 0) -> CliRunner:
    res = CliRunner().invoke(main, [*map(str, args)])
    assert res.exit_code == code, res.output
    return res


def files(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}


def index_of(site: Path) -> dict:
    return json.loads((site / "index.json").read_text(encoding="utf-8"))


@pytest.fixture
def run6(tmp_path) -> Path:
    write_prime_rl_run(tmp_path / "inc" / "run", steps=6, n_seqs=6, mean_len=20, noise=0.01)
    return tmp_path / "inc" / "run"


def test_the_same_run_reached_from_another_folder_or_spelling_reuses_every_step(run6, tmp_path, monkeypatch):
    site = tmp_path / "site"
    monkeypatch.chdir(tmp_path)
    assert "6 analysed, 0 reused" in run_cli("build", "inc/run", "-o", "site").output
    before = files(site)
    assert "0 analysed, 6 reused" in run_cli("build", run6.resolve(), "-o", site.resolve()).output  # absolute
    monkeypatch.chdir(tmp_path / "inc")
    assert "0 analysed, 6 reused" in run_cli("build", "./run/", "-o", "../site").output  # another working directory
    assert files(site) == before
    summary = json.loads((site / "step_3" / "summary.json").read_text(encoding="utf-8"))
    assert summary["run"]["meta"]["file"] == "step_3"  # its own name: no spelling, no home dir
    assert str(tmp_path) not in (site / "step_3" / "index.html").read_text(encoding="utf-8")


def test_a_moved_run_folder_reuses_every_step_and_gives_the_same_site(run6, tmp_path):
    site = tmp_path / "site"
    run_cli("build", run6, "-o", site)
    moved = tmp_path / "elsewhere" / "deeper" / "run"
    moved.parent.mkdir(parents=True)
    shutil.move(run6, moved)
    assert "0 analysed, 6 reused" in run_cli("build", moved, "-o", site).output
    run_cli("build", moved, "-o", tmp_path / "fresh")
    assert files(site) == files(tmp_path / "fresh")
    (moved / "token_exports" / "step_2" / "rank_0.jsonl").rename(moved / "token_exports" / "step_2" / "rank_1.jsonl")
    assert "1 analysed, 5 reused" in run_cli("build", moved, "-o", site).output  # a renamed file is a changed step


def test_a_truncated_and_an_empty_step_are_rows_that_say_why_and_the_rest_is_built(run6, tmp_path):
    site = tmp_path / "site"
    run_cli("build", run6, "-o", site)
    exports = run6 / "token_exports"
    write_prime_rl_run(run6, steps=8, n_seqs=6, mean_len=20, noise=0.01)  # two new steps: 6 and 7 ...
    rank6 = exports / "step_6" / "rank_0.jsonl"
    rank6.write_bytes(rank6.read_bytes()[:700])  # ... 6 cut while being written
    (exports / "step_7" / "rank_0.jsonl").write_bytes(b"")  # ... 7 empty
    res = run_cli("build", run6, "-o", site, code=3)
    assert "6 batches: 0 analysed, 6 reused" in res.stdout
    lines = res.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"tim-report: error: {exports / 'step_6'}: rank_0.jsonl: ")
    assert "cut mid-record" in lines[0] and lines[0].endswith("(step_6 left out; the rest was built)")
    assert lines[1].startswith(f"tim-report: error: {exports / 'step_7'}: rank_0.jsonl: ")
    index = index_of(site)
    assert [r["id"] for r in index["runs"]] == [f"step_{s}" for s in range(6)]
    assert [(u["id"], u["step"], u["path"]) for u in index["unreadable"]] == [
        ("step_6", 6, "step_6"), ("step_7", 7, "step_7")]
    assert "cut mid-record" in index["unreadable"][0]["reason"]
    assert not (site / "step_6").exists() and (site / "step_5" / "index.html").is_file()
    html = (site / "index.html").read_text(encoding="utf-8")
    assert '<tr class="unreadable">' in html and "Step 6 could not be read" in html and "2 steps could not be read" in html
    md = (site / "report.md").read_text(encoding="utf-8")
    assert "**2 steps could not be read**" in md and "step\\_6" in md
    # the step written in full: built, the others reused, the index clean again, exit 0
    write_prime_rl_run(run6, steps=8, n_seqs=6, mean_len=20, noise=0.01)
    assert "8 batches: 2 analysed, 6 reused" in run_cli("build", run6, "-o", site).output
    assert index_of(site)["unreadable"] == [] and "could not be read" not in (site / "index.html").read_text("utf-8")


def test_an_unreadable_npz_step_is_left_out_with_jobs_too(tmp_path):
    run = tmp_path / "steps"
    run.mkdir()
    for s in range(4):
        save_batch(make_batch(n_seqs=6, mean_len=20, noise=0.01, seed=s), run / f"step_{s}.npz")
    data = (run / "step_2.npz").read_bytes()
    (run / "step_2.npz").write_bytes(data[: len(data) // 2])  # a zip cut in half: found by name, fails when read
    res = run_cli("build", run, "-o", tmp_path / "site", "--jobs", "2", code=3)
    assert "3 batches: 3 analysed" in res.stdout and "step_2 left out" in res.stderr
    assert [u["id"] for u in index_of(tmp_path / "site")["unreadable"]] == ["step_2"]


def test_a_fifo_among_a_steps_files_is_refused_before_it_is_read(run6, tmp_path):
    rank = run6 / "token_exports" / "step_4" / "rank_1.jsonl"
    os.mkfifo(rank)  # reading it would block the build for ever
    res = run_cli("build", run6, "-o", tmp_path / "site", code=3)
    assert "rank_1.jsonl: is a FIFO (named pipe), not a regular file" in res.stderr and "step_4 left out" in res.stderr


def test_a_run_whose_every_step_is_bad_and_a_bad_single_file_write_nothing(tmp_path):
    run = tmp_path / "steps"
    run.mkdir()
    for s in range(2):
        (run / f"step_{s}.npz").write_bytes(b"PK\x03\x04 not really a zip")
    res = run_cli("build", run, "-o", tmp_path / "site", code=2)
    assert res.output.count("tim-report: error:") == 1 and not (tmp_path / "site").exists()
    res = run_cli("build", run / "step_1.npz", "-o", tmp_path / "site", code=2)
    assert f"{run / 'step_1.npz'}: " in res.output and not (tmp_path / "site").exists()


def test_check_on_a_run_folder_names_the_bad_step_and_checks_the_rest(run6):
    exports = run6 / "token_exports"
    rank = exports / "step_2" / "rank_0.jsonl"
    rank.write_bytes(rank.read_bytes()[:500])
    res = run_cli("check", run6, code=2)
    lines = res.output.splitlines()
    assert len(lines) == 6 and lines[2].startswith(f"{exports / 'step_2'}: unreadable: rank_0.jsonl: ")
    assert all(": ok: " in line for i, line in enumerate(lines) if i != 2)
    res = run_cli("check", run6, "--json", code=2)
    bad = [json.loads(line) for line in res.output.splitlines() if "unreadable" in line]
    assert len(bad) == 1 and bad[0]["file"] == str(exports / "step_2") and not bad[0]["ok"]


def test_hashing_refuses_what_is_not_a_regular_file(tmp_path):
    from tim_report.errors import BadInput
    from tim_report.site.cache import file_digest

    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(BadInput, match="not a regular file"):
        file_digest(tmp_path / "pipe")
    (tmp_path / "f").write_bytes(b"abc")
    assert file_digest(tmp_path / "f") == bytes.fromhex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")

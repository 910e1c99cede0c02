"""Output never loses the user's data: nothing outside -o touched, nothing it did not write replaced,
nothing half-written whatever fails (full disk, a signal, a killed worker), every report kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import analyze_or_die

from tim_report.cli import main
from tim_report.errors import BadInput
from tim_report.io import save_batch
from tim_report.service.build import BuildOptions, build, unique_ids
from tim_report.testing import make_batch


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_exit_2(res, *phrases: str) -> str:
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tim-report: error: "), res.stderr
    assert "Traceback" not in res.output
    for p in phrases:
        assert p in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def npz(tmp_path):
    def make(name: str, seed: int = 0) -> Path:
        p = tmp_path / "in" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        save_batch(make_batch(n_seqs=6, mean_len=12, seed=seed), p)
        return p
    return make


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- never replace what tim-report did not write -----------------------------------------------------


def test_a_users_folder_inside_the_site_is_never_deleted(tmp_path, npz):
    site = tmp_path / "site"
    assert run("build", npz("a.npz"), "-o", site).exit_code == 0
    (site / "docs").mkdir()
    (site / "docs" / "thesis.txt").write_text("four years of work")
    one_line_exit_2(run("build", npz("docs.npz"), "-o", site), "site/docs", "not written by tim-report")
    assert (site / "docs" / "thesis.txt").read_text() == "four years of work"


def test_a_users_file_inside_a_run_folder_is_never_deleted(tmp_path, npz):
    """A changed option makes the run folder stale (not reused from the cache), so the build must replace it."""
    site = tmp_path / "site"
    assert run("build", npz("docs.npz"), "-o", site).exit_code == 0
    (site / "docs" / "thesis.txt").write_text("four years of work")
    before = tree(site)
    one_line_exit_2(run("build", npz("docs.npz"), "-o", site, "--ppo-eps", "0.1", "0.2"),
                    "site/docs/thesis.txt", "is not a file tim-report writes", "move it out")
    assert tree(site) == before
    assert not list(tmp_path.rglob(".tim-report-staging-*"))


def test_the_shared_assets_are_tim_reports_and_a_users_file_among_them_is_never_deleted(tmp_path, npz):
    site = tmp_path / "site"
    assert run("build", npz("docs.npz"), "-o", site).exit_code == 0
    assert sorted(p.name for p in (site / "assets").iterdir()) == ["style.css", "tim.js", "vega.js"]
    assert "assets" in (site / ".tim-report.json").read_text()
    assert run("build", npz("docs.npz"), "-o", site).exit_code == 0  # rewritten with the index, as tim-report's own
    (site / "assets" / "logo.png").write_text("mine")
    before = tree(site)
    one_line_exit_2(run("build", npz("docs.npz"), "-o", site), "site/assets/logo.png", "is not a file tim-report writes")
    assert tree(site) == before
    with pytest.raises(BadInput, match="reserved"):
        unique_ids(["assets"], given=True)  # no run folder takes its name


def test_move_into_refuses_a_run_folder_holding_anything_else_before_moving_anything(tmp_path):
    from tim_report.site.publish import MARKER, RUN_FILES, move_into

    out, staged = tmp_path / "site", tmp_path / "staged"
    for folder in (out / "r", staged / "r"):
        folder.mkdir(parents=True)
        for name in RUN_FILES:
            (folder / name).write_text(f"{folder.parent.name} {name}")
    (staged / "index.html").write_text("new index")
    (out / "index.html").write_text("old index")
    (out / MARKER).write_text('{"tool": "tim-report", "written": ["index.html", "r"]}')
    (out / "r" / "sub").mkdir()
    (out / "r" / "sub" / "data.csv").write_text("mine")
    before = tree(out)
    with pytest.raises(BadInput, match="sub: is not a file tim-report writes"):
        move_into(staged, out)
    assert tree(out) == before
    (out / "r" / "sub" / "data.csv").unlink()
    (out / "r" / "sub").rmdir()
    move_into(staged, out)  # only its own files left: replaced
    assert (out / "r" / "index.html").read_text() == "staged index.html" and (out / "index.html").read_text() == "new index"


def test_a_file_added_after_the_check_is_put_back_not_deleted(tmp_path):
    from tim_report.site.publish import _replace

    target, new, scratch = tmp_path / "site" / "r", tmp_path / "new", tmp_path / "scratch"
    for d in (target, new, scratch):
        d.mkdir(parents=True)
    (target / "report.md").write_text("old")
    (target / "late.txt").write_text("mine")
    (new / "report.md").write_text("new")
    with pytest.raises(BadInput, match="late.txt"):
        _replace(new, target, scratch)
    assert tree(target) == {"report.md": b"old", "late.txt": b"mine"}


def test_a_foreign_non_empty_folder_is_refused_before_any_work(tmp_path, npz):
    home = tmp_path / "project"
    home.mkdir()
    (home / "notes.md").write_text("mine")
    before = tree(home)
    one_line_exit_2(run("build", npz("a.npz"), "-o", home), "not empty and was not written by tim-report")
    assert tree(home) == before


@pytest.mark.parametrize("target", ["", "/"])
def test_empty_and_root_outputs_are_refused(npz, target):
    res = run("build", npz("a.npz"), "-o", target)
    one_line_exit_2(res)


def test_a_run_folder_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path, npz):
    site = tmp_path / "site"
    assert run("build", npz("a.npz"), "-o", site).exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    import shutil
    shutil.rmtree(site / "a")
    (site / "a").symlink_to(elsewhere, target_is_directory=True)
    one_line_exit_2(run("build", npz("a.npz"), "-o", site), "symbolic link")
    assert (elsewhere / "keep.txt").read_text() == "keep" and sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]


def test_output_under_a_regular_file_is_one_line(tmp_path, npz):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    one_line_exit_2(run("build", npz("a.npz"), "-o", blocker / "site"))
    assert blocker.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_is_one_line(tmp_path, npz):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        one_line_exit_2(run("build", npz("a.npz"), "-o", ro / "site"))
    finally:
        ro.chmod(0o700)


def test_rebuilding_replaces_only_its_own_runs(tmp_path, npz):
    site = tmp_path / "site"
    assert run("build", npz("a.npz"), npz("b.npz", 1), "-o", site).exit_code == 0
    before_b = tree(site / "b")
    assert run("build", npz("a.npz", 5), "-o", site).exit_code == 0  # a is replaced, b kept as it was
    assert tree(site / "b") == before_b
    assert (site / ".tim-report.json").is_file()


# ---- nothing half-written -----------------------------------------------------------------------------


def test_no_room_on_the_disk_is_one_line_and_changes_nothing(tmp_path, npz, monkeypatch):
    import shutil

    site = tmp_path / "site"
    assert run("build", npz("a.npz"), "-o", site).exit_code == 0
    before = tree(site)
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    one_line_exit_2(run("build", npz("a.npz", 3), npz("c.npz"), "-o", site), "no space left")
    assert tree(site) == before
    assert not list(tmp_path.rglob(".tim-report-staging-*"))


def test_a_write_that_fails_half_way_leaves_the_old_site(tmp_path, npz):
    """A file-size limit makes the page write fail mid-file (EFBIG), as a full disk would."""
    site = tmp_path / "site"
    assert run("build", npz("a.npz"), "-o", site).exit_code == 0
    before = tree(site)
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000)); "
            "from tim_report.cli import main; sys.exit(main(sys.argv[1:], prog_name='tim-report'))")
    res = subprocess.run([sys.executable, "-c", code, "build", str(npz("a.npz", 9)), "-o", str(site)],
                         capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "cannot write" in res.stderr
    assert tree(site) == before
    assert not list(tmp_path.rglob(".tim-report-staging-*"))


@pytest.mark.slow
def test_sigterm_during_the_build_leaves_nothing_behind(tmp_path):
    paths = []
    for i in range(6):
        p = tmp_path / "in" / f"s{i}.npz"
        p.parent.mkdir(parents=True, exist_ok=True)
        save_batch(make_batch(n_seqs=400, mean_len=400, seed=i), p)
        paths.append(str(p))
    site = tmp_path / "site"
    proc = subprocess.Popen([sys.executable, "-m", "tim_report", "build", *paths, "-o", str(site)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not list(site.glob(".tim-report-staging-*")) and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the build finished before the signal arrived")
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not list(tmp_path.rglob(".tim-report-staging-*"))
    assert not site.exists() or not (site / "index.html").exists()


# ---- every report kept ---------------------------------------------------------------------------------


def test_same_stems_never_overwrite_each_other(tmp_path):
    paths = []
    for sub, name in (("x", "a.npz"), ("y", "a.npz"), (".", "a-2.npz"), (".", "A.npz")):
        p = tmp_path / sub / name
        p.parent.mkdir(parents=True, exist_ok=True)
        save_batch(make_batch(n_seqs=4, mean_len=8, seed=len(paths)), p)
        paths.append(str(p))
    res = run("build", *paths, "-o", tmp_path / "site")
    assert res.exit_code == 0, res.output
    runs = sorted(p.name for p in (tmp_path / "site").iterdir() if p.is_dir() and p.name != "assets")
    assert len(runs) == 4 and len({r.lower() for r in runs}) == 4
    index = (tmp_path / "site" / "index.html").read_text()
    for r in runs:
        assert index.count(f'href="{r}/index.html"') == 1


def test_reserved_and_long_run_ids():
    assert unique_ids(["report.md", "index.html"]) == ["report.md-2", "index.html-2"]  # stems of report.md.npz, ...
    long = unique_ids(["x" * 300, "x" * 299 + "y"])
    assert all(len(r) <= 100 for r in long) and long[0] != long[1]
    for bad in (["index.html"], ["x" * 300], ["a", "a"]):
        with pytest.raises(BadInput):
            unique_ids(bad, given=True)


def test_run_id_index_html_is_one_line(npz, tmp_path):
    one_line_exit_2(run("build", npz("a.npz"), "--run-id", "index.html", "-o", tmp_path / "site"), "--run-id")


# ---- workers --------------------------------------------------------------------------------------------


def test_a_worker_that_dies_is_one_line(tmp_path, npz, monkeypatch):
    import tim_report.service.build as pipeline

    monkeypatch.setattr(pipeline, "analyze_file", analyze_or_die)
    with pytest.raises(BadInput, match="worker process died"):
        build([npz("a.npz"), npz("die.npz", 1)], tmp_path / "site", BuildOptions(jobs=2))
    assert not (tmp_path / "site").exists()


@pytest.mark.slow
def test_workers_exit_when_the_build_is_killed(tmp_path):
    paths = []
    for i in range(4):
        p = tmp_path / f"w{i}.npz"
        save_batch(make_batch(n_seqs=2000, mean_len=500, seed=i), p)
        paths.append(str(p))
    proc = subprocess.Popen([sys.executable, "-m", "tim_report", "build", *paths, "--jobs", "2", "-o", str(tmp_path / "s")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children() -> list[int]:
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        return [int(x) for x in out]

    deadline = time.time() + 30
    while time.time() < deadline and len(children()) < 2:
        time.sleep(0.05)
    workers = children()
    assert workers, "no worker started"
    proc.kill()
    proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(Path(f"/proc/{w}").exists() and "zombie" not in _state(w) for w in workers):
        time.sleep(0.1)
    alive = [w for w in workers if Path(f"/proc/{w}").exists() and "zombie" not in _state(w)]
    for w in alive:
        os.kill(w, signal.SIGKILL)
    assert alive == []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "zombie"

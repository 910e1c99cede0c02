"""The output promise when other processes are there too: a second build into the same folder, a build in another
PID namespace (a second container on the same volume), a kill -9 mid-move, links planted where tim-report writes,
an output folder that is a mount point. Concurrency is tested with real processes, never threads."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.site.layout import MARKER, OUTPUT_LOCK, STAGING_LOCK, STAGING_PREFIX
from tim_report.testing import make_batch

TOOL = [sys.executable, "-m", "tim_report"]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_exit_2(res, *phrases: str) -> str:
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tim-report: error: "), res.stderr
    for p in phrases:
        assert p in lines[0], lines[0]
    return lines[0]


def batch_file(folder: Path, name: str, seed: int = 0, n_seqs: int = 6, mean_len: int = 12) -> Path:
    p = folder / name
    p.parent.mkdir(parents=True, exist_ok=True)
    save_batch(make_batch(n_seqs=n_seqs, mean_len=mean_len, seed=seed), p)
    return p


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def marker(site: Path) -> set[str]:
    return set(json.loads((site / MARKER).read_text())["written"])


def staging_folders(site: Path) -> list[Path]:
    return sorted(site.glob(f"{STAGING_PREFIX}*"))


def index_links_only_existing_folders(site: Path) -> list[str]:
    ids = [r["id"] for r in json.loads((site / "index.json").read_text())["runs"]]
    assert all((site / i / "index.html").is_file() for i in ids), ids
    return ids


def can(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_build(paths: list[Path], site: Path, wait_for: str = "") -> subprocess.Popen:
    """A build of `paths` into `site`, started; returns once its staging folder (holding `wait_for`) is there."""
    proc = subprocess.Popen([*TOOL, "build", *map(str, paths), "-o", str(site)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not any((s / wait_for).exists() for s in staging_folders(site)):
        time.sleep(0.01)
    return proc


# ---- links planted where the marker is written ---------------------------------------------------------------


def test_a_symlink_or_hard_link_planted_at_the_marker_never_redirects_its_write(tmp_path):
    a = batch_file(tmp_path / "in", "a.npz")
    site = tmp_path / "site"
    assert run("build", a, "-o", site).exit_code == 0
    victim, other = tmp_path / "victim.json", tmp_path / "other.txt"
    victim.write_text((site / MARKER).read_text())  # someone's file, made to pass for the marker
    other.write_text("another file")
    before = victim.read_text()
    (site / (MARKER + ".tmp")).symlink_to(victim)  # the fixed temporary name earlier versions wrote through
    os.link(other, site / "index.json.tmp")
    (site / MARKER).unlink()
    os.link(victim, site / MARKER)  # a hard link: the marker's name, someone's inode
    assert run("build", batch_file(tmp_path / "in", "b.npz", 1), "-o", site).exit_code == 0
    assert victim.read_text() == before and other.read_text() == "another file"
    assert (site / MARKER).stat().st_ino != victim.stat().st_ino and "b" in marker(site)


def test_a_marker_or_lock_that_is_a_symlink_or_fifo_is_refused_and_its_target_untouched(tmp_path):
    a = batch_file(tmp_path / "in", "a.npz")
    site = tmp_path / "site"
    assert run("build", a, "-o", site).exit_code == 0
    victim = tmp_path / "victim.json"
    victim.write_text('{"written": ["a", "index.html"]}')
    (site / MARKER).unlink()
    (site / MARKER).symlink_to(victim)
    one_line_exit_2(run("build", batch_file(tmp_path / "in", "b.npz", 1), "-o", site), MARKER, "not a regular file")
    assert victim.read_text() == '{"written": ["a", "index.html"]}'
    (site / MARKER).unlink()
    (site / MARKER).write_text('{"tool": "tim-report", "written": ["a", "assets", "index.html", "index.json", "report.md"]}')
    (site / OUTPUT_LOCK).unlink()
    os.mkfifo(site / OUTPUT_LOCK)  # opening a FIFO for the lock must not hang
    res = subprocess.run([*TOOL, "build", str(a), "--ppo-eps", "0.1", "0.2", "-o", str(site)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and "not a regular file" in res.stderr and "Traceback" not in res.stderr, res.stderr


# ---- staging folders: only ours, only when dead ----------------------------------------------------------------


def test_a_users_folders_named_like_staging_folders_are_never_removed(tmp_path):
    beside = tmp_path / ".tim-report-999999999-x"  # what earlier versions took for a dead build's
    beside.mkdir()
    (beside / "thesis.txt").write_text("mine")
    site = tmp_path / "site"
    assert run("build", batch_file(tmp_path / "in", "a.npz"), "-o", site).exit_code == 0
    inside = site / f"{STAGING_PREFIX}notes"  # the prefix, but no lock file holding its own name
    inside.mkdir()
    (inside / "todo.txt").write_text("mine too")
    (site / f"{STAGING_PREFIX}forged").mkdir()
    (site / f"{STAGING_PREFIX}forged" / STAGING_LOCK).write_text("another name")
    assert run("build", batch_file(tmp_path / "in", "b.npz", 1), "-o", site).exit_code == 0
    assert (beside / "thesis.txt").read_text() == "mine" and (inside / "todo.txt").read_text() == "mine too"
    assert (site / f"{STAGING_PREFIX}forged" / STAGING_LOCK).read_text() == "another name"


@pytest.mark.slow
def test_a_staging_folder_left_by_kill_9_is_removed_by_the_next_build(tmp_path):
    site = tmp_path / "site"
    proc = start_build([batch_file(tmp_path / "in", f"big{i}.npz", i, n_seqs=400, mean_len=400) for i in range(6)], site)
    assert staging_folders(site), proc.communicate()
    proc.kill()
    proc.wait(timeout=60)
    left = staging_folders(site)
    assert left and (left[0] / STAGING_LOCK).is_file()
    assert run("build", batch_file(tmp_path / "in", "a.npz"), "-o", site).exit_code == 0
    assert not staging_folders(site)


LOCK_HOLDER = """
import fcntl, os, sys, time
from pathlib import Path
folder = Path(sys.argv[1]); folder.mkdir()
(folder / "index.html").write_text("a live build's page")
fd = os.open(folder / sys.argv[2], os.O_RDWR | os.O_CREAT, 0o600)
os.write(fd, folder.name.encode()); fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True); time.sleep(600)
"""


def test_a_live_builds_staging_folder_is_told_by_its_lock_not_its_pid(tmp_path):
    """Another PID namespace, simulated: the holder's pid means nothing to the build (its folder's name has no pid
    at all); only the lock it holds says it is alive. Killed, its folder is removed by the next build."""
    site = tmp_path / "site"
    assert run("build", batch_file(tmp_path / "in", "a.npz"), "-o", site).exit_code == 0
    live = site / f"{STAGING_PREFIX}othercontainer"
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(live), STAGING_LOCK], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert run("build", batch_file(tmp_path / "in", "b.npz", 1), "-o", site).exit_code == 0
        assert (live / "index.html").read_text() == "a live build's page"
    finally:
        holder.kill()
        holder.wait()
    assert run("build", batch_file(tmp_path / "in", "c.npz", 2), "-o", site).exit_code == 0
    assert not live.exists()


@pytest.mark.slow
def test_a_build_in_another_pid_namespace_never_removes_a_live_builds_staging_folder(tmp_path):
    """A real second PID namespace (`unshare --pid`), where the machine allows it (root here)."""
    namespace = ["unshare", "--pid", "--fork", "--mount-proc"]
    if not can([*namespace, "true"]):
        pytest.skip("unshare --pid is not allowed here; test_a_live_builds_staging_folder_is_told_by_its_lock_not_its_pid "
                    "covers the rule")
    site = tmp_path / "site"
    runs = [f"s{i:02d}" for i in range(64)]  # over one chunk (32): the first chunk's folders wait in staging
    slow = start_build([batch_file(tmp_path / "in", f"{r}.npz", i, n_seqs=100, mean_len=100) for i, r in enumerate(runs)],
                       site, wait_for=runs[0])
    assert staging_folders(site), slow.communicate()
    other = subprocess.run([*namespace, *TOOL, "build", str(batch_file(tmp_path / "in", "small.npz")), "-o", str(site)],
                           capture_output=True, text=True, timeout=300)
    assert other.returncode == 0, other.stderr
    if slow.poll() is not None:
        pytest.skip("the slow build ended before the other namespace's build ran")
    out, err = slow.communicate(timeout=600)
    assert slow.returncode == 0, err
    assert {*runs, "small"} <= marker(site)
    assert index_links_only_existing_folders(site) == runs
    assert not staging_folders(site)


# ---- concurrent builds into one folder, and kill -9 mid-move ---------------------------------------------------


@pytest.mark.slow
def test_concurrent_builds_into_one_folder_lose_no_marker_entry(tmp_path):
    site, built = tmp_path / "site", set()
    for round_ in range(3):
        names = [f"r{round_}_{k}" for k in range(8)]
        inputs = [batch_file(tmp_path / "in", f"{n}.npz", k) for k, n in enumerate(names)]
        procs = [subprocess.Popen([*TOOL, "build", str(p), "-o", str(site)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for p in inputs]
        errors = [p.communicate(timeout=600)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 8, errors
        built |= set(names)
        assert built <= marker(site), built - marker(site)
        assert all((site / n / "index.html").is_file() for n in built)
        assert len(index_links_only_existing_folders(site)) == 1  # the last build's index, its run in place
        assert not staging_folders(site)
    assert run("build", tmp_path / "in" / "r0_0.npz", "--ppo-eps", "0.1", "0.2", "-o", site).exit_code == 0


KILL_BETWEEN_RENAMES = """
import os, signal, sys
from pathlib import Path
real = os.rename
def rename(src, dst, *args, **kwargs):
    real(src, dst, *args, **kwargs)
    if Path(dst).name == ".old-a":  # the old run folder is aside, the new one not yet in
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename
from tim_report.cli import main
main(sys.argv[1:], prog_name="tim-report")
"""


def test_kill_9_between_the_two_renames_of_a_run_folder_is_undone_by_the_next_build(tmp_path):
    site = tmp_path / "site"
    a, b = batch_file(tmp_path / "in", "a.npz"), batch_file(tmp_path / "in", "b.npz", 1)
    assert run("build", a, b, "-o", site).exit_code == 0
    before = tree(site / "a")
    res = subprocess.run([sys.executable, "-c", KILL_BETWEEN_RENAMES, "build", str(batch_file(tmp_path / "in", "a.npz", 5)),
                          str(b), "-o", str(site)], capture_output=True, text=True, timeout=300)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert not (site / "a").exists() and staging_folders(site)  # the moment the kill left behind
    assert run("build", b, "-o", site).exit_code == 0  # any next build into the folder puts it back
    assert tree(site / "a") == before and "a" in marker(site)
    assert not staging_folders(site)


# ---- output folders on another device, odd names, a full stdout ------------------------------------------------


def test_every_rename_survives_a_cross_device_error(tmp_path, monkeypatch):
    """EXDEV (the output a mount point, staging on another device) on every rename between two folders."""
    real = os.rename

    def cross_device(src, dst, *args, **kwargs):
        if Path(src).parent != Path(dst).parent:
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", cross_device)
    site = tmp_path / "site"
    for seed in (0, 5, 6):
        assert run("build", batch_file(tmp_path / "in", "a.npz", seed), "-o", site).exit_code == 0
    assert index_links_only_existing_folders(site) == ["a"] and marker(site) >= {"a", "index.json"}
    assert sorted(p.name for p in site.iterdir()) == sorted([MARKER, OUTPUT_LOCK, "a", "assets", "index.html", "index.json",
                                                             "report.md"])
    assert sorted(p.name for p in (site / "assets").iterdir()) == ["style.css", "tim.js", "vega.js"]  # copied whole


@pytest.mark.slow
def test_an_output_that_is_a_mount_point_builds_again_and_again(tmp_path):
    """A real mount point (a tmpfs, in a private mount namespace), where the machine allows it (root here)."""
    if not can(["unshare", "-m", "sh", "-c", f"mount -t tmpfs none {tmp_path}"]):
        pytest.skip("mounting a tmpfs in a private mount namespace is not allowed here")
    site = tmp_path / "site"
    site.mkdir()
    a = batch_file(tmp_path / "in", "a.npz")
    a5 = batch_file(tmp_path / "in", "a5.npz", 5)
    build = " ".join(TOOL)
    script = (f"mount -t tmpfs none {site} && {build} build {a} -o {site} && {build} build {a5} --run-id a -o {site} "
              f"&& {build} build {a} -o {site} && echo ENTRIES && ls -A {site}")
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert set(res.stdout.split("ENTRIES")[1].split()) == {MARKER, OUTPUT_LOCK, "a", "assets", "index.html", "index.json",
                                                           "report.md"}


def test_an_output_name_over_255_bytes_is_one_line(tmp_path):
    one_line_exit_2(run("build", batch_file(tmp_path / "in", "a.npz"), "-o", tmp_path / ("x" * 300)), "File name too long")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_stdout_on_dev_full_is_one_line(tmp_path):
    a = batch_file(tmp_path / "in", "a.npz")
    for command in (["build", str(a), "-o", str(tmp_path / "site")], ["inspect", str(a)]):
        with open("/dev/full", "w") as full:
            res = subprocess.run([*TOOL, *command], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
        assert res.returncode == 2, res.stderr
        assert res.stderr.splitlines() == ["tim-report: error: cannot write to standard output (No space left on device)"]


def test_nothing_but_our_own_entries_makes_a_folder_ours(tmp_path):
    """A folder holding only the lock and a staging folder (a failed first build, a concurrent one) is not foreign."""
    site = tmp_path / "site"
    site.mkdir()
    (site / OUTPUT_LOCK).touch()
    (site / f"{STAGING_PREFIX}abc").mkdir()
    assert run("build", batch_file(tmp_path / "in", "a.npz"), "-o", site).exit_code == 0
    shutil.rmtree(site)

"""`build --executor ray`: the same site, byte for byte, as a local build; a task's BadInput or a dead
worker is one line, exit 2; Ray stops with the build and leaves no process behind; a missing Ray is one
line naming the install. The Ray tests start a local Ray of two CPUs (some 10-20 s each): marked slow. Each Ray driver
runs in a process of its own (a command, or tests/ray_driver.py): one that crashes fails its test, not the pytest worker."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import skip_or_fail

from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.testing import make_batch

TESTS = Path(__file__).resolve().parent


def cli(*args):
    return CliRunner().invoke(main, [*map(str, args)])


def need_ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        skip_or_fail('ray is not installed (pip install -e ".[ray]")')


def run_folder(folder: Path, n: int = 6) -> Path:
    folder.mkdir(parents=True)
    for s in range(1, n + 1):
        b = make_batch(n_seqs=12, mean_len=40, noise=0.01 * s, seed=s)
        save_batch(b, folder / f"step_{s}.npz")
    return folder


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def env() -> dict[str, str]:
    """tests/ and the repository on the path of the command and of its Ray workers (a task can be
    helpers.analyze_or_die)."""
    paths = (str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH"))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def children() -> set[int]:
    """Live (not zombie) processes whose parent is this one."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            out.add(int(stat.parent.name))
    return out


PR_SET_CHILD_SUBREAPER = 36


def tool_leaving(*args, timeout: float = 300) -> tuple[subprocess.CompletedProcess, list[int]]:
    """`tim-report ARGS` in a process of its own (a Ray driver that crashes takes down its process, not this one), and
    the processes it left running: while it runs this process is a subreaper, so what it leaves behind is re-parented
    here. Those are killed before returning."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = children()
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        res = subprocess.run([sys.executable, "-m", "tim_report", *map(str, args)], env=env(), capture_output=True,
                             text=True, timeout=timeout)
        deadline = time.time() + 10  # Ray's processes may take a moment to finish exiting
        while children() - before and time.time() < deadline:
            time.sleep(0.2)
        left = sorted(children() - before)
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return res, left


def driver(commands: list[list], die: bool = False) -> list[dict]:
    """Run `commands` in one process beside a Ray it started itself (tests/ray_driver.py); per command, its exit code,
    stdout, stderr and whether that Ray still runs after it."""
    spec = json.dumps({"die": die, "commands": [[str(a) for a in c] for c in commands]})
    res = subprocess.run([sys.executable, str(TESTS / "ray_driver.py"), spec], env=env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ray_build_is_byte_identical_and_leaves_nothing_running(tmp_path):
    need_ray()
    run = run_folder(tmp_path / "run")
    local = cli("build", run, "-o", tmp_path / "local", "--jobs", "1")
    assert local.exit_code == 0, local.output
    res, left = tool_leaving("build", run, "-o", tmp_path / "ray", "--executor", "ray", "--jobs", "2")
    assert res.returncode == 0, res.stderr[-3000:]

    def said(out: str) -> str:  # the summary lines, less the folder and the time taken
        return re.sub(r"in [0-9.]+ s", "in T s", out.replace("ray/", "local/"))

    assert said(res.stdout) == said(local.stdout)  # and no Ray noise on stdout
    assert files(tmp_path / "ray") == files(tmp_path / "local")
    assert len(files(tmp_path / "local")) > 6 * 3  # every step's page, report and summary, and the index
    assert left == []  # the local Ray was shut down with the build: none of its processes outlives it


@pytest.mark.slow
def test_bad_input_in_a_ray_task_is_one_line_exit_2(tmp_path):
    """A bad step of a run folder found in a Ray task is left out (exit 3, the rest built, one line); a bad file given
    on its own is exit 2 with nothing written. A build uses a Ray its caller started, and leaves it running."""
    need_ray()
    run = run_folder(tmp_path / "run", 3)
    (run / "step_2.npz").write_bytes(b"not a zip file")
    out = tmp_path / "site"
    folder, alone = driver([["build", run, "-o", out, "--executor", "ray"],
                            ["build", run / "step_2.npz", "-o", tmp_path / "alone", "--executor", "ray"]])
    assert folder["exit_code"] == 3, folder
    assert folder["stderr"].strip().splitlines() == [
        f"tim-report: error: {run / 'step_2.npz'}: not an .npz archive (numpy writes a zip of .npy files; this is not a zip) "
        "(step_2 left out; the rest was built)"]
    assert (out / "step_1" / "index.html").is_file() and not (out / "step_2").exists()
    assert alone["exit_code"] == 2, alone
    assert alone["stderr"].strip().splitlines() == [
        f"tim-report: error: {run / 'step_2.npz'}: not an .npz archive (numpy writes a zip of .npy files; this is not a zip)"]
    assert not (tmp_path / "alone").exists() and not list(tmp_path.rglob(".tim-report-staging-*"))
    assert folder["ray_running"] and alone["ray_running"]  # the caller's Ray is the caller's to stop


@pytest.mark.slow
def test_a_ray_worker_that_dies_is_one_line(tmp_path):
    need_ray()
    folder = run_folder(tmp_path / "in", 2)
    (folder / "step_2.npz").rename(folder / "die.npz")
    [res] = driver([["build", folder / "step_1.npz", folder / "die.npz", "-o", tmp_path / "site", "--executor", "ray"]],
                   die=True)
    assert res["exit_code"] == 2, res
    lines = res["stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tim-report: error: {folder / 'die.npz'}: the Ray task analysing it failed")
    assert not (tmp_path / "site").exists()


def test_missing_ray_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    run = run_folder(tmp_path / "run", 1)
    res = cli("build", run, "-o", tmp_path / "site", "--executor", "ray")
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        'tim-report: error: --executor ray: Ray is not installed: pip install -e ".[ray]" (or pip install "ray>=2.40")']
    assert not (tmp_path / "site").exists()


def test_ray_address_needs_the_ray_executor(tmp_path):
    res = cli("build", run_folder(tmp_path / "run", 1), "-o", tmp_path / "site", "--ray-address", "auto")
    assert res.exit_code == 2 and "--ray-address: applies to --executor ray only" in res.stderr

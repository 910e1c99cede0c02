"""Red team, round two: what `watch` and `export` read back and run.

Families: an index.json another hand edited (a site watch restarts on, a site export reads: `change_steps: 7`,
`[{"step": [1]}]`, steps of 10³⁰, 1e300, 2⁶³); `--interval inf` and `nan`; an `--on-alarm` command whose
grandchild outlives the timeout (a real process tree); and a full export folder (a real 64 KiB tmpfs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import small_tmpfs

from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.service import watch as watch_service
from tim_report.service.build import BuildOptions, build
from tim_report.service.watch import Alarm, Watch, WatchOptions, run_alarm
from tim_report.testing import make_batch


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A three-step site, its index.json as a build writes it."""
    root = tmp_path_factory.mktemp("site")
    run = root / "run"
    run.mkdir()
    for step in range(3):
        save_batch(make_batch(n_seqs=6, mean_len=12, seed=step), run / f"step_{step}.npz")
    build([run], root / "site", BuildOptions(formats=("json",)))
    return root / "site"


def edited(site: Path, tmp: Path, edit) -> Path:
    """A copy of the site whose index.json `edit(doc)` changed."""
    out = tmp / "edited"
    subprocess.run(["cp", "-a", str(site), str(out)], check=True)
    doc = json.loads((out / "index.json").read_text())
    edit(doc)
    (out / "index.json").write_text(json.dumps(doc))
    return out


def one_line(r, *words: str) -> None:
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert all(w in r.output for w in words) and "Traceback" not in r.output, r.output


EDITS = {
    "change_steps: 7": (lambda d: d.update(change_steps=7), "change_steps is int, not a list"),
    "change step [1]": (lambda d: d.update(change_steps=[{"step": [1], "metrics": ["kl_k3"]}]), "change_steps[0].step is not a number"),
    "change step 1e300": (lambda d: d.update(change_steps=[{"step": 1e300, "metrics": []}]), "beyond ±2⁵³"),
    "metrics 5": (lambda d: d.update(change_steps=[{"step": 1, "metrics": 5}]), "metrics is not a list"),
    "run 'x'": (lambda d: d.update(run="x"), "run is not an object"),
    "step 10**30": (lambda d: d["runs"][0].update(step=10**30), "runs[0].step is beyond ±2⁵³"),
    "step 1e300": (lambda d: d["runs"][1].update(step=1e300), "runs[1].step is beyond ±2⁵³"),
    "step 2**63": (lambda d: d["runs"][0].update(step=2**63), "runs[0].step is beyond ±2⁵³"),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_export_reads_an_edited_index_as_untrusted(site, tmp_path, case):
    pytest.importorskip("tensorboard")
    edit, words = EDITS[case]
    r = CliRunner().invoke(main, ["export", str(edited(site, tmp_path, edit)), "--tensorboard", str(tmp_path / "tb")])
    one_line(r, "index.json", words)
    assert not list((tmp_path / "tb").glob("events.*")) if (tmp_path / "tb").exists() else True


@pytest.mark.parametrize("case", list(EDITS))
def test_watch_restarted_on_an_edited_site_is_one_line(site, tmp_path, case):
    edit, words = EDITS[case]
    out = edited(site, tmp_path, edit)
    (tmp_path / "run").mkdir()
    r = CliRunner().invoke(main, ["watch", str(tmp_path / "run"), "-o", str(out), "--once", "--interval", "0.05"])
    one_line(r, "index.json", words)


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e9", "-inf"])
def test_interval_must_be_finite_and_positive(tmp_path, value):
    r = CliRunner().invoke(main, ["watch", str(tmp_path), "-o", str(tmp_path / "site"), "--once", "--interval", value])
    one_line(r, "--interval")


def test_an_alarm_commands_grandchild_is_ended_with_it(tmp_path, monkeypatch):
    """A notifier that starts a child and hangs: at the timeout the whole process group goes, the grandchild too."""
    monkeypatch.setattr(watch_service, "ALARM_TIMEOUT", 1.0)
    pid_file = tmp_path / "grandchild.pid"
    argv = ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"]
    alarm = Alarm("band", 3, "step_3", ["kl_k3"], 0.1, "step_3: outside the run's band")
    start = time.monotonic()
    said = run_alarm(argv, alarm, tmp_path)
    assert said == "alarm command stopped after 1 s: sh" and time.monotonic() - start < 30
    pid = int(pid_file.read_text())
    for _ in range(100):  # reaped by init once killed: gone within moments
        if not _alive(pid):
            break
        time.sleep(0.05)
    assert not _alive(pid), "the alarm command's grandchild outlived the timeout"


def test_an_alarm_command_that_leaves_a_child_behind_does_not_leak_it(tmp_path):
    pid_file = tmp_path / "child.pid"
    argv = ["sh", "-c", f"sleep 300 & echo $! > {pid_file}"]  # exits at once, its child still running
    assert run_alarm(argv, Alarm("band", 1, "step_1", [], None, "x"), tmp_path) is None
    pid = int(pid_file.read_text())
    for _ in range(100):
        if not _alive(pid):
            break
        time.sleep(0.05)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_export_into_a_full_disk_is_one_line_and_leaves_no_event_file(site, tmp_path):
    pytest.importorskip("tensorboard")
    big = edited(site, tmp_path, lambda d: d.update(change_steps=[
        {"step": 1, "metrics": ["kl_k3"], "sentence": "x" * 30_000, "run": "step_1"} for _ in range(8)]))
    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        res = subprocess.run([sys.executable, "-m", "tim_report", "export", str(big), "--tensorboard", str(disk / "tb")],
                             capture_output=True, text=True, timeout=300, env={**os.environ})
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "No space left on device" in lines[0], res.stderr
        assert list((disk / "tb").glob("events.*")) == []


def test_watch_restarted_on_a_good_site_still_knows_its_steps(site, tmp_path):
    w = Watch(tmp_path / "run", edited(site, tmp_path, lambda d: None), WatchOptions(build=BuildOptions(formats=("json",))))
    assert w.known_ids == {"step_0", "step_1", "step_2"}

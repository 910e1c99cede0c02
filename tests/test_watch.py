"""`tim-report watch`: a run folder that a second process fills step by step, followed into a site.

After every poll the site equals a fresh `build` of the steps it holds (index.json and each step's summary.json), no
step is read before all its files are written (a half-written rank file, a rank file that arrives later), and the
band alarm fires on the step where the mismatch jumps, not before. The command line stops cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tim_report.service.build import BuildOptions, build
from tim_report.service.watch import Poller, Round, Watch, WatchOptions, temporary
from tim_report.testing import write_prime_rl_run

STEPS, JUMP, RANKS = 10, 7, 2
JSON = BuildOptions(formats=("json",))

# The second process: copies a prepared run's rank files into the watched folder on command, one stdin line each:
# "copy S R" (whole file), "half S R" (its first half), "rest S R" (the other half), "stable S"; answers "ok".
WRITER = r"""
import shutil, sys
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
for line in sys.stdin:
    cmd, step, *rank = line.split()
    folder = dst / f"step_{step}"
    folder.mkdir(parents=True, exist_ok=True)
    if cmd == "stable":
        (folder / "STABLE").write_text("")
    else:
        name = f"rank_{rank[0]}.jsonl"
        data = (src / f"step_{step}" / name).read_bytes()
        with open(folder / name, "ab" if cmd == "rest" else "wb") as f:
            f.write(data if cmd == "copy" else data[: len(data) // 2] if cmd == "half" else data[len(data) // 2:])
    print("ok", flush=True)
"""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A 10-step, 2-rank prime-rl run whose mismatch jumps 5× at step 7, and each step's true token count."""
    src = tmp_path_factory.mktemp("prepared")
    write_prime_rl_run(src, steps=STEPS, n_seqs=8, mean_len=24, noise=lambda s: 0.01 if s < JUMP else 0.05, ranks=RANKS)
    full = build([src / "token_exports"], src / "site", JSON)
    return src / "token_exports", {r["id"]: r["tokens"] for r in full.rows}


class Writer:
    def __init__(self, src: Path, dst: Path):
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, str(src), str(dst)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def __call__(self, *commands: str) -> None:
        for c in commands:
            assert self.proc.stdin and self.proc.stdout
            self.proc.stdin.write(c + "\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline().strip() == "ok"

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def site_equals_fresh_build(site: Path, run: Path, scratch: Path) -> list[str]:
    """The ids the site holds, after checking it is byte for byte what a fresh build of those steps writes."""
    doc = json.loads((site / "index.json").read_text())
    ids = [r["id"] for r in doc["runs"]]
    fresh = scratch / "fresh"
    shutil.rmtree(fresh, ignore_errors=True)
    build([run / i if (run / i).exists() else run / f"{i}.npz" for i in ids], fresh, JSON)  # a step folder or file
    assert (fresh / "index.json").read_text() == (site / "index.json").read_text()
    for i in ids:
        assert (fresh / i / "summary.json").read_text() == (site / i / "summary.json").read_text(), i
    return ids


def test_watch_follows_a_run_written_step_by_step(prepared, tmp_path):
    src, tokens = prepared
    run, site = tmp_path / "run" / "token_exports", tmp_path / "site"
    watch = Watch(tmp_path / "run", site, WatchOptions(build=JSON, interval=0))
    writer = Writer(src, run)
    alarms, seen = [], []

    def poll(expect: list[str]) -> None:
        rnd = watch.step()
        alarms.extend(rnd.alarms)
        ids = site_equals_fresh_build(site, run, tmp_path) if (site / "index.json").exists() else []
        assert ids == expect
        doc = json.loads((site / "index.json").read_text()) if ids else {"runs": []}
        assert all(r["tokens"] == tokens[r["id"]] for r in doc["runs"])  # never a half-written step
        seen.append(ids)

    try:
        poll([])  # the folder does not exist yet
        done: list[str] = []
        for s in range(STEPS):
            if s == 4:  # a rank file written in two halves, the other rank only polls later
                writer("half 4 0")
                poll(done)
                writer("rest 4 0")
                poll(done)
                poll(done)  # rank 0 is settled, but steps have 2 ranks: step 4 waits for rank 1
                writer("copy 4 1")
                poll(done)  # rank 1 not settled yet
            else:
                writer(*(f"copy {s} {r}" for r in range(RANKS)))
                poll(done)  # new files: not settled until the next poll
            done = [*done, f"step_{s}"]
            poll(done)
            band = [a for a in alarms if a.kind == "band"]
            assert [a.step for a in band][:1] == ([JUMP] if s >= JUMP else [])  # the first alarm is at the jump
    finally:
        writer.close()
    assert seen[-1] == sorted(tokens, key=lambda i: int(i.split("_")[1]))
    band = [a for a in alarms if a.kind == "band"]
    assert "kl_k3" in band[0].metrics and band[0].line.startswith(f"step_{JUMP}: ")
    row = band[0].row  # the cause first: what the step is diagnosed with, or the band itself when alone it reads noise
    if row["findings"]:
        cause, _, rest = band[0].line.partition("; outside the run's band: ")
        assert rest and cause == f"step_{JUMP}: {row['glance']}"
    else:
        assert band[0].line.startswith(f"step_{JUMP}: outside the run's band: ")
        assert band[0].line.endswith(f"; the step alone reads {row['glance']}")
    env = band[0].env(site)
    assert env["TIM_REPORT_STEP"] == str(JUMP) and env["TIM_REPORT_PAGE"] == f"step_{JUMP}/index.html"
    assert env["TIM_REPORT_REGIME"] == band[0].row["regime"] and env["TIM_REPORT_GLANCE"] == band[0].row["glance"]
    assert float(env["TIM_REPORT_VALUE"]) == band[0].row[band[0].metrics[0]]
    # one alarm per event: no step is alarmed twice, by its band and again by a change point there
    assert len({a.step for a in alarms}) == len(alarms)
    # the site a watch wrote is the site `build RUN` writes: same index, every step reused from the cache
    again = build([tmp_path / "run"], site, JSON)
    assert again.analysed == 0 and again.reused == STEPS
    # a watch restarted on its own site raises no alarm for what the site already holds
    restarted = Watch(tmp_path / "run", site, WatchOptions(build=JSON, interval=0))
    rounds = [restarted.step(), restarted.step()]
    assert rounds[1].result is not None and rounds[1].result.analysed == 0
    assert not [a for r in rounds for a in r.alarms] and not [row for r in rounds for row in r.new_rows]


def test_stable_marker_and_temporary_names(prepared, tmp_path):
    src, _ = prepared
    run = tmp_path / "token_exports"
    writer = Writer(src, run)
    try:
        writer("copy 0 0", "copy 0 1", "stable 0", "copy 1 0", "copy 1 1")
        poller = Poller(run)
        assert poller.poll()[0] == []
        assert [s.run_id for s in poller.poll()[0]] == ["step_0"]  # step_1 has no STABLE yet, though its ranks settled
        writer("stable 1")
        (run / "step_2").mkdir()  # prime-rl made the next step's folder and wrote nothing yet: the others go on
        assert [s.run_id for s in poller.poll()[0]] == ["step_0", "step_1"]
    finally:
        writer.close()
    for name in (".step_3.npz", "step_3.npz.tmp", "step_3.tmp.npz", "step_3.npz~", "step_3.npz.part", "#step_3.npz"):
        assert temporary(Path(name)), name
    assert not temporary(Path("step_3.npz")) and not temporary(Path("rank_0.jsonl"))


def test_declared_ranks_hold_the_first_step(prepared, tmp_path):
    src, _ = prepared
    run = tmp_path / "token_exports"
    writer = Writer(src, run)
    try:
        writer("copy 0 0")
        poller = Poller(run, ranks=2)
        poller.poll()
        assert poller.poll()[0] == []  # settled, but one of two ranks
        writer("copy 0 1")
        poller.poll()
        assert [s.run_id for s in poller.poll()[0]] == ["step_0"]
    finally:
        writer.close()


def test_cli_on_alarm_and_sigterm_leave_a_complete_site(prepared, tmp_path):
    """The command itself: a live writer, an alarm command given its data in the environment (no shell), SIGTERM."""
    src, _ = prepared
    run, site, log = tmp_path / "run" / "token_exports", tmp_path / "site", tmp_path / "alarms.txt"
    hook = tmp_path / "hook.py"
    hook.write_text("import os, sys\nwith open(sys.argv[1], 'a') as f:\n"
                    "    f.write(os.environ['TIM_REPORT_ALARM'] + ' ' + os.environ['TIM_REPORT_STEP'] + ' '"
                    " + os.environ['TIM_REPORT_METRICS'] + '\\n')\n")
    cmd = [sys.executable, "-m", "tim_report", "watch", str(tmp_path / "run"), "-o", str(site), "--interval", "0.1",
           "--format", "json", "--on-alarm", f"{sys.executable} {hook} '{log}' ; touch {tmp_path / 'injected'}"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # RUN_DIR need not exist yet: the writer creates it a moment later (a mistyped one is exit 2 after --wait-for-run)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    writer = Writer(src, run)
    try:
        for s in range(STEPS - 1):
            writer(*(f"copy {s} {r}" for r in range(RANKS)))
            _wait_for(lambda s=s: f'"step_{s}"' in _read(site / "index.json"))
        _wait_for(lambda: log.exists() and f"band {JUMP} " in log.read_text())
        writer(*(f"copy {STEPS - 1} {r}" for r in range(RANKS)))
        time.sleep(0.25)  # the last step is being taken: SIGTERM may land before, during or after its build
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        writer.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    held = site_equals_fresh_build(site, run, tmp_path)  # whatever it holds, the site is a complete one
    assert held in ([f"step_{s}" for s in range(n)] for n in (STEPS - 1, STEPS))
    assert out.strip().splitlines()[-1] == f"stopped: {site}/ holds {len(held)} steps"
    line = next(x for x in out.splitlines() if x.startswith(f"alarm: step_{JUMP}: "))
    assert "outside the run's band: " in line and len(line) < 400  # the cause, then the first metric; not a list
    first = log.read_text().splitlines()[0].split()
    assert first[:2] == ["band", str(JUMP)] and "kl_k3" in first[2].split(",")
    assert not (tmp_path / "injected").exists()  # the alarm command is an argument list, never a shell line
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tim-report-")]  # no staging folder left


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _wait_for(cond, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_a_broken_or_half_written_file_holds_back_only_its_own_step(tmp_path):
    """A folder of step files: a broken JSON-lines file is said once and the other steps go on; a half-written .npz
    that looks settled fails to load, is left out (never published) and is taken once it is whole."""
    from tim_report.io import save_batch
    from tim_report.testing import make_batch

    run, site = tmp_path / "run", tmp_path / "site"
    run.mkdir()
    for s in range(6):
        save_batch(make_batch(n_seqs=6, mean_len=16, seed=s), run / f"step_{s}.npz")
    (run / "step_9.jsonl").write_text('{"rollout_log_probs": [-0.5, ')
    save_batch(make_batch(n_seqs=6, mean_len=16, seed=6), tmp_path / "step_6.npz")
    whole = (tmp_path / "step_6.npz").read_bytes()
    (run / "step_6.npz").write_bytes(whole[: len(whole) // 2])
    watch = Watch(run, site, WatchOptions(build=JSON, interval=0))
    notes = watch.step().notes + watch.step().notes
    assert len([n for n in notes if n.startswith(f"waiting: {run / 'step_9.jsonl'}: ")]) == 1, notes
    assert [n for n in notes if n.startswith(f"skipped: {run / 'step_6.npz'}: ")], notes
    assert site_equals_fresh_build(site, run, tmp_path) == [f"step_{s}" for s in range(6)]
    assert not [n for n in watch.step().notes if "step_9" in n or "step_6" in n]  # each said once while it lasts
    (run / "step_6.npz").write_bytes(whole)
    watch.step()
    rnd = watch.step()
    assert [r["id"] for r in rnd.new_rows] == ["step_6"]
    assert site_equals_fresh_build(site, run, tmp_path) == [f"step_{s}" for s in range(7)]


@pytest.mark.parametrize("args, problem", [
    (["--on-alarm", ""], "--on-alarm: is empty"),
    (["--on-alarm", "notify 'unclosed"], "--on-alarm: cannot split the command"),
])
def test_cli_bad_options_are_one_line(tmp_path, args, problem):
    from click.testing import CliRunner

    from tim_report.cli import main

    r = CliRunner().invoke(main, ["watch", str(tmp_path), "-o", str(tmp_path / "site"), "--once", *args])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and problem in r.output, r.output


def test_cli_refuses_a_foreign_output_folder(prepared, tmp_path):
    from click.testing import CliRunner

    from tim_report.cli import main

    src, _ = prepared
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "thesis.txt").write_text("mine")
    r = CliRunner().invoke(main, ["watch", str(src), "-o", str(tmp_path / "site"), "--once", "--interval", "0.05"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "was not written by tim-report" in r.output, r.output
    assert sorted(p.name for p in (tmp_path / "site").iterdir()) == ["thesis.txt"]


def test_cli_a_run_folder_that_does_not_exist_is_one_line(tmp_path):
    """A mistyped RUN_DIR used to print "holds 0 steps" and exit 0 (--once) or wait forever."""
    from click.testing import CliRunner

    from tim_report.cli import main

    for once in (["--once"], ["--wait-for-run", "0.3", "--interval", "0.1"]):
        r = CliRunner().invoke(main, ["watch", str(tmp_path / "token_exprots"), "-o", str(tmp_path / "site"), *once])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "token_exprots: no such run folder" in r.stderr, r.output
        assert r.stdout == ("" if once == ["--once"] else f"waiting up to 0.3 s for {tmp_path / 'token_exprots'} to appear "
                                                          "(Ctrl-C stops)\n")
    assert not (tmp_path / "site").exists()


def test_a_change_point_is_alarmed_once_as_metrics_join_it(tmp_path):
    """One change point paged twice when more metrics joined it: the step is the event, not each (step, metric)."""
    from types import SimpleNamespace

    watch = Watch(tmp_path / "run", tmp_path / "site", WatchOptions(build=JSON, interval=0))
    rows = [{"id": f"step_{s}", "step": s, "regime": "systematic" if s >= 9 else "numerical_noise",
             "glance": "systematic: off-by-one (…) (error), side undetermined, every position" if s >= 9 else
             "numerical noise", "side": "undetermined" if s >= 9 else None, "findings": ["shift"] if s >= 9 else [],
             "kl_k3": 1e-4 if s < 9 else 10.0, "ess": 0.99, "abs_delta_mean": 0.01} for s in range(12)]
    cp = {"step": 9, "run": "step_9", "metrics": ["kl_k3"], "sentence": "From step 9, KL k3 is 1e5× higher"}

    def news(metrics: list[str], n: int):
        watch.known_ids = {r["id"] for r in rows[:n - 1]}
        rnd = Round()
        watch._news(rnd, SimpleNamespace(rows=rows[:n], change_steps=[{**cp, "metrics": metrics}]))
        return [a for a in rnd.alarms if a.kind == "change_point"]

    watch.opts.history_window = 10**6  # no band alarm: this test is about the change point alone
    first = news(["kl_k3"], 11)
    assert len(first) == 1 and first[0].line.startswith("step_9: systematic: off-by-one")
    assert "; change point: From step 9" in first[0].line
    env = first[0].env(tmp_path / "site")
    assert (env["TIM_REPORT_REGIME"], env["TIM_REPORT_FINDING"], env["TIM_REPORT_SIDE"]) == ("systematic", "shift",
                                                                                             "undetermined")
    assert env["TIM_REPORT_PAGE"] == "step_9/index.html" and float(env["TIM_REPORT_VALUE"]) == 10.0
    assert news(["kl_k3", "ess", "abs_delta_mean"], 12) == []  # more metrics joined the same change point


def test_a_run_folder_awaited_is_said_at_once_and_ctrl_c_stops_it_cleanly(tmp_path):
    """A mistyped folder was silent for the whole --wait-for-run (120 s), and Ctrl-C then said "the staging folder was
    removed" with exit 130, though nothing was staged and Ctrl-C exits 0 (docs/watch.md)."""
    import selectors

    missing = tmp_path / "token_exprots"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "tim_report", "watch", str(missing), "-o", str(tmp_path / "site"),
                             "--interval", "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=60), "nothing said while waiting"
        assert proc.stdout.readline().rstrip("\n") == f"waiting up to 120 s for {missing} to appear (Ctrl-C stops)"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert err == "" and out.strip() == f"stopped while waiting for {missing} to appear; nothing was built"
    assert not (tmp_path / "site").exists()


def test_many_bad_steps_are_one_pass_each_said_as_it_is_met(tmp_path, monkeypatch):
    """`watch --once` over unusable steps rebuilt every ready step again for each bad one (quadratic: 800 steps 94 s)
    and said every "skipped" line at the end. Now one build analyses each step once, and each skip is said during it."""
    from tim_report.io import save_batch
    from tim_report.service import build as build_service
    from tim_report.service import watch as watch_service
    from tim_report.testing import make_batch

    run, good, bad = tmp_path / "run", range(0, 12, 2), range(1, 12, 2)
    run.mkdir()
    for s in good:
        save_batch(make_batch(n_seqs=4, mean_len=10, seed=s), run / f"step_{s}.npz")
    for s in bad:
        (run / f"step_{s}.npz").write_bytes(b"PK\x03\x04 not an archive at all")
    events: list[str] = []
    analysed: list[str] = []
    real_build, real_analyze = watch_service.build, build_service.analyze_file

    def counted_build(*args, **kw):
        result = real_build(*args, **kw)
        events.append("built")
        return result

    def counted_analyze(opts, src, run_id):
        analysed.append(run_id)
        return real_analyze(opts, src, run_id)

    monkeypatch.setattr(watch_service, "build", counted_build)
    monkeypatch.setattr(build_service, "analyze_file", counted_analyze)
    watch = Watch(run, tmp_path / "site", WatchOptions(build=JSON, interval=0), say=events.append)
    notes = watch.step().notes + watch.step().notes + watch.step().notes
    assert events.count("built") == 1, events  # one pass, not one build per bad step
    assert sorted(analysed) == sorted(f"step_{s}" for s in range(12))  # each step analysed once
    skips = [e for e in events if e.startswith("skipped: ")]
    assert len(skips) == len(bad) and all(any(f"step_{s}.npz: " in e for e in skips) for s in bad), skips
    assert events[-1] == "built" and not [n for n in notes if n.startswith("skipped")]  # said during the build
    assert site_equals_fresh_build(tmp_path / "site", run, tmp_path) == [f"step_{s}" for s in good]


def test_the_last_line_counts_what_the_published_index_holds(tmp_path):
    """A watched run folder deleted and made again with fewer steps: the last line said "holds 7 steps" while the
    index listed 2 (it counted every step the watch had ever seen)."""
    from tim_report.io import save_batch
    from tim_report.testing import make_batch

    run, site = tmp_path / "run", tmp_path / "site"

    def write(n: int, seed: int) -> None:
        run.mkdir()
        for s in range(n):
            save_batch(make_batch(n_seqs=4, mean_len=10, seed=seed + s), run / f"step_{s}.npz")

    write(7, 0)
    watch = Watch(run, site, WatchOptions(build=JSON, interval=0))
    watch.step(), watch.step()
    assert watch.held == 7
    shutil.rmtree(run)
    write(2, 100)
    watch.step(), watch.step()
    assert watch.held == len(json.loads((site / "index.json").read_text())["runs"]) == 2
    assert Watch(run, site, WatchOptions(build=JSON, interval=0)).held == 2  # a watch restarted on the site


def test_the_rows_before_a_step_found_by_binary_search_are_those_a_scan_finds():
    """A watch started on a run of N steps checks each of its N new rows against the rows before it; found by a binary
    search (`Earlier`: N·log N, where a scan of every row for each was minutes at 10,000 steps), they must be the very
    windows the scan finds: the band's (by lag mix) and whether every earlier step was identical."""
    import random

    from tim_report.analysis.history import window_rows
    from tim_report.analysis.lag.history import lag_key, same_lag
    from tim_report.service.watch import Earlier, identity_broken

    rng = random.Random(45)
    mixes = [None, {"0": 1.0}, {"0": 0.5, "1": 0.5}, {"1": 0.7, "unknown": 0.3}]
    rows = [{"id": f"s{i}", "step": step, "abs_delta_max": 0.0 if step < 40 else rng.choice([0.0, 0.1]),
             "lag_mix": rng.choice(mixes), "lag_kl_k3": {"0": rng.random()} if rng.random() < 0.7 else {}}
            for i, step in enumerate(rng.sample(range(200), 120) + [7, 7, 55])]  # ties too
    rng.shuffle(rows)
    near = Earlier(rows, window=6)
    assert near.ordered
    for row in rows:
        others = [r for r in rows if r is not row]
        assert near.identity_broken(row) == identity_broken(row, rows)
        kind = ("lag", lag_key(row)) if lag_key(row) is not None else ("all",)
        assert window_rows(near.before(kind, row), row["step"], 6) == window_rows(same_lag(row, others), row["step"], 6)
    assert sum(near.identity_broken(r) is not None for r in rows) >= 1  # the identical prefix does end somewhere

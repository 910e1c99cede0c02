"""`tim-report check --history SITE`: a new step against the run's own band (the rolling median of its
previous steps in SITE/index.json), on a run built with the CLI; bad history is one line, exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tim_report.analysis.history import band, check_history, window_rows
from tim_report.catalogue.metrics import HISTORY, metric
from tim_report.cli import main
from tim_report.config import HISTORY_MAX_BYTES, HISTORY_MIN_STEPS
from tim_report.io import save_batch
from tim_report.testing import make_batch

STEPS = 7  # more than HISTORY_MIN_STEPS, so a step after them has a band


def cli(*args):
    return CliRunner().invoke(main, [*map(str, args)])


@pytest.fixture(scope="module")
def run_site(tmp_path_factory):
    """A 7-step run of bf16-like noise built into a site with the CLI, plus two new steps 8 and 9."""
    tmp = tmp_path_factory.mktemp("history")
    (tmp / "run").mkdir()
    for s in range(1, STEPS + 1):
        save_batch(make_batch(n_seqs=16, mean_len=48, noise=0.01, seed=s), tmp / "run" / f"step_{s}.npz")
    save_batch(make_batch(n_seqs=16, mean_len=48, noise=0.01, seed=20), tmp / "step_8.npz")  # like the run
    save_batch(make_batch(n_seqs=16, mean_len=48, noise=0.04, seed=21), tmp / "step_9.npz")  # 4× the noise
    res = cli("build", tmp / "run", "-o", tmp / "site", "--format", "json")
    assert res.exit_code == 0, res.output
    return tmp


def test_step_inside_the_band_passes(run_site):
    r = cli("check", run_site / "step_8.npz", "--history", run_site / "site")
    assert r.exit_code == 0, r.output
    assert r.output.strip() == r.output.strip().splitlines()[0]  # one line
    assert "ok: numerical noise; " in r.output and f"within the run's band (steps 1-{STEPS})" in r.output


def test_step_outside_the_band_fails_one_line_per_metric(run_site):
    new = run_site / "step_9.npz"
    assert cli("check", new).exit_code == 0  # within verl's fixed limits: only the run's own band catches it
    r = cli("check", new, "--history", run_site / "site")
    assert r.exit_code == 1, r.output
    verdict, *lines = r.output.strip().splitlines()  # the verdict at a glance, then one line per metric
    assert verdict.startswith(f"{new}: fail: numerical noise; KL k3 ") and "within the run's band" not in verdict
    assert lines and all(line.startswith(f"{new}: history ") for line in lines)
    kl = next(line for line in lines if line.startswith(f"{new}: history kl_k3 = "))
    assert "above the run's band (median " in kl and f"of steps 1-{STEPS}; margin 1×, floor {metric('kl_k3').history_floor:g})" in kl
    value, bound = (float(x) for x in kl.split(" = ")[1].split(",")[0].split(" > "))
    assert value > bound
    # a looser margin takes KL back inside the band (phantom clipping's median is 0: only its floor counts)
    r = cli("check", new, "--history", run_site / "site", "--history-margin", "100")
    assert "history kl_k3" not in r.output and "history phantom_clip" in r.output


def test_window_and_floor_options(run_site):
    r = cli("check", run_site / "step_9.npz", "--history", run_site / "site", "--history-window", "5")
    assert r.exit_code == 1 and f"of steps {STEPS - 4}-{STEPS};" in r.output
    floors = [f"--history-floor={m}=1" for m in HISTORY]
    r = cli("check", run_site / "step_9.npz", "--history", run_site / "site", *floors)
    assert r.exit_code == 0, r.output
    r = cli("check", run_site / "step_9.npz", "--history", run_site / "site/index.json", "--json")
    doc = json.loads(r.output)
    assert r.exit_code == 1 and not doc["ok"] and doc["history"] == {"basis": f"steps 1-{STEPS}", "note": None}
    assert {v["id"] for v in doc["violations"] if v["kind"] == "history"} >= {"kl_k3"}


def test_too_few_earlier_steps_says_so_and_does_not_fail(run_site):
    early = run_site / "run" / "step_3.npz"  # steps 1 and 2 come before it
    r = cli("check", early, "--history", run_site / "site")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].startswith(f"{early}: ok: numerical noise; KL k3 ")
    assert r.output.splitlines()[1] == (f"{early}: history: 2 earlier steps (steps 1-2), fewer than {HISTORY_MIN_STEPS}: "
                                        "no band checked")


def _bad_history(tmp_path, kind):
    site = tmp_path / "site"
    site.mkdir()
    index = site / "index.json"
    if kind == "missing folder":
        return tmp_path / "nowhere"
    if kind == "corrupt":
        index.write_text('{"tool": "tim-report", "runs": [', encoding="utf-8")
    elif kind == "not ours":
        index.write_text('{"runs": "many"}', encoding="utf-8")
    elif kind == "string metric":
        index.write_text(json.dumps({"tool": "tim-report", "runs": [{"id": "a", "step": 1, "kl_k3": "0.1"}]}), encoding="utf-8")
    elif kind == "deep":
        index.write_text("[" * 100_000, encoding="utf-8")
    elif kind == "huge":
        with open(index, "wb") as f:
            f.truncate(HISTORY_MAX_BYTES + 1)  # sparse: costs no disk
    return site


@pytest.mark.parametrize("kind", ["missing folder", "no index.json", "corrupt", "not ours", "string metric", "deep", "huge"])
def test_bad_history_is_one_line_exit_2(tmp_path, kind):
    new = tmp_path / "step_8.npz"
    save_batch(make_batch(n_seqs=8, mean_len=16), new)
    r = cli("check", new, "--history", _bad_history(tmp_path, kind))
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tim-report: error: ") and "Traceback" not in r.output
    assert r.stdout == ""  # nothing checked against a history that cannot be read


@pytest.mark.parametrize("value", ["kl=1", "kl_k3=x", "ess=-1", "ess=nan"])
def test_bad_floor_is_exit_2(tmp_path, value):
    new = tmp_path / "s.npz"
    save_batch(make_batch(n_seqs=8, mean_len=16), new)
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.json").write_text('{"tool": "tim-report", "runs": []}', encoding="utf-8")
    r = cli("check", new, "--history", site, "--history-floor", value)
    assert r.exit_code == 2 and "--history-floor" in r.stderr


def test_window_is_the_steps_before_the_new_one():
    rows = [{"id": f"s{s}", "step": s} for s in (5, 1, 9, 3, 7, 2)]  # unsorted, and a later step (9)
    assert [r["step"] for r in window_rows(rows, 8, 3)] == [3, 5, 7]
    assert [r["step"] for r in window_rows(rows, None, 2)] == [7, 2]  # no step: the last rows as written
    plain = [{"id": "a", "step": None}, {"id": "b", "step": None}]
    assert window_rows(plain, 4, 5) == plain


def test_band_directions():
    assert band([0.01, 0.02, 0.03], "up", 1.0, 1e-4) == (0.02, 0.04)
    assert band([0.0, 0.0, 0.0], "up", 1.0, 1e-3) == (0.0, 1e-3)  # the floor, not a zero-width band
    med, low = band([0.9, 0.8, 0.7], "down", 0.5, 0.01)  # ESS: the margin applies to the deficit 1 − ESS
    assert med == 0.8 and low == pytest.approx(0.7)
    rows = [{"id": str(s), "step": s, "ess": 0.99, "kl_k3": None} for s in range(6)]
    res = check_history({"step": 6, "ess": 0.95, "kl_k3": 5.0}, rows)
    assert [v.id for v in res.violations] == ["ess"]  # kl_k3 has no history: not checked
    assert res.violations[0].line("f").startswith("f: history ess = 0.95 < 0.98, below the run's band (median 0.99 of steps 0-5")

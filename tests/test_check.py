"""`tim-report check`: exit codes, one line per violation, limits and --fail-on."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from tim_report.analysis import analyze
from tim_report.analysis.gate import evaluate, limits
from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.testing import make_batch


def run(*args):
    return CliRunner().invoke(main, ["check", *map(str, args)])


@pytest.fixture
def clean(tmp_path):
    p = tmp_path / "clean.npz"
    save_batch(make_batch(n_seqs=16, mean_len=48, noise=0.01), p)
    return p


@pytest.fixture
def shifted(tmp_path):
    b = make_batch(n_seqs=16, mean_len=48, noise=0.01)
    p = tmp_path / "shifted.npz"
    save_batch(replace(b, trainer_logp=np.roll(b.trainer_logp, 1)), p)
    return p


@pytest.fixture
def noisy(tmp_path):
    """Elevated (warn-free) mismatch that breaks the KL limit only when it is tightened."""
    p = tmp_path / "noisy.npz"
    save_batch(make_batch(n_seqs=16, mean_len=48, noise=0.05, seed=2), p)
    return p


def test_clean_passes(clean):
    r = run(clean)
    assert r.exit_code == 0, r.output
    assert r.output.strip().startswith(f"{clean}: ok: numerical noise; KL k3 ")


def test_fault_fails_with_one_line_each(shifted):
    r = run(shifted)
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert any(line.startswith(f"{shifted}: error shift: ") for line in lines)
    assert any(line.startswith(f"{shifted}: limit ") for line in lines)
    assert all(line.startswith(str(shifted)) for line in lines)


def test_several_files_any_failure_fails(clean, shifted):
    r = run(clean, shifted)
    assert r.exit_code == 1
    assert f"{clean}: ok" in r.output and f"{shifted}: error shift" in r.output


def test_limits(noisy):
    assert run(noisy).exit_code == 0
    r = run(noisy, "--max-kl-k3", "1e-4")
    assert r.exit_code == 1 and "limit kl_k3 = " in r.output and "(--max-kl-k3)" in r.output
    r = run(noisy, "--min-ess", "0.9999")
    assert r.exit_code == 1 and "ess = " in r.output
    r = run(noisy, "--max-outside-5x", "-1", "--max-phantom-clip", "0")
    assert r.exit_code == 1 and "outside_5x" in r.output and "phantom_clip" in r.output
    lines = r.output.strip().splitlines()  # the verdict at a glance, then one line per violated limit
    assert len(lines) == 3 and lines[0].startswith(f"{noisy}: fail: elevated; KL k3 ")


def test_fail_on(shifted):
    assert run(shifted, "--fail-on", "never", "--no-limits").exit_code == 0
    r = run(shifted, "--no-limits")
    assert r.exit_code == 1 and "limit" not in r.output


def test_fail_on_warn(tmp_path):
    b = make_batch(n_seqs=64, mean_len=128, noise=0.01, seed=5)
    p = tmp_path / "drift.npz"
    save_batch(replace(b, trainer_logp=np.minimum(b.trainer_logp - 0.015, 0)), p)  # drift_with_length warns
    assert run(p, "--no-limits").exit_code == 0
    r = run(p, "--no-limits", "--fail-on", "warn")
    assert r.exit_code == 1 and "warn drift_with_length" in r.output


def test_bad_input_exits_2(tmp_path, clean):
    assert run(tmp_path / "missing.npz").exit_code == 2
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    assert run(bad).exit_code == 2
    r = run(clean, "--set", "no_such=1")
    assert r.exit_code == 2 and "no_such" in r.output
    assert run(clean, "--set", "shift_ratio=abc").exit_code == 2
    r = run(clean, "--set", "shift_ratio")
    assert r.exit_code == 2 and "--set: 'shift_ratio' is not NAME=VALUE" in r.output
    assert run(clean, "--key", "oops").exit_code == 2


def test_unusable_batch_is_bad_input_one_line_exit_2(tmp_path, clean, shifted):
    """65% NaN trainer log-probs read `ok` (exit 0) from the third left; now an input problem whatever --fail-on says."""
    b = make_batch(n_seqs=16, mean_len=48, noise=0.01)
    tr = b.trainer_logp.copy()
    tr[np.random.default_rng(0).random(tr.shape[0]) < 0.65] = np.nan
    p = tmp_path / "nan.npz"
    save_batch(replace(b, trainer_logp=tr), p)
    r = CliRunner().invoke(main, ["check", str(p), str(shifted), str(clean), "--fail-on", "never", "--no-limits"])
    assert r.exit_code == 2
    bad = [line for line in r.output.splitlines() if "nan.npz" in line]
    assert len(bad) == 1 and bad[0].startswith(f"tim-report: error: {p}: Unusable input: only 3")
    assert "NaN trainer log-probs on 6" in bad[0] and f"{clean}: ok: " in r.output  # the other files are still checked
    row = json.loads(run(p, "--json").output.splitlines()[0])
    assert row["ok"] is False and row["input_problem"].startswith("Unusable input:") and row["violations"] == []
    assert run(p, "--set", "min_usable_share=0.3").exit_code == 0  # the limit is a diagnosis threshold


def test_set_override(shifted):
    assert run(shifted, "--no-limits").exit_code == 1
    r = run(shifted, "--no-limits", "--set", "shift_ratio=1e-9")
    assert "error shift:" not in r.output


def test_json_output(clean, shifted):
    r = run(clean, shifted, "--json")
    assert r.exit_code == 1
    rows = [json.loads(line) for line in r.output.strip().splitlines()]
    assert [row["ok"] for row in rows] == [True, False]
    assert any(v["id"] == "shift" for v in rows[1]["violations"])


def test_default_limits_are_verls_alerts():
    lim = {(x.metric, x.op): x.bound for x in limits()}
    assert lim == {("kl_k1", "max"): 0.1, ("kl_k3", "max"): 0.1, ("ess", "min"): 0.3, ("chi2_token", "max"): 1.0}


def test_evaluate_api():
    rep = analyze(make_batch(n_seqs=8, mean_len=32))
    res = evaluate(rep, limits(), "error")
    assert res.ok and res.regime == "numerical_noise"


@pytest.mark.parametrize("scope", ["GATE", "GATE_HISTORY"])
def test_check_computes_only_what_the_gate_reads_and_reads_it_as_build_does(tmp_path, scope):
    """`check` skips the ladders and the page-only families; what the gate, the history band and the routing read is
    the build's number, bit for bit, and the findings are the same."""
    from tim_report import analysis
    from tim_report.analysis.run_index import run_row

    b = replace(make_batch(n_seqs=40, mean_len=48, noise=0.01, seed=5), group=np.repeat(np.arange(10), 4))
    b.trainer_logp = np.roll(b.trainer_logp, 1)  # a finding to compare
    full, gate = analyze(b), analyze(b, scope=getattr(analysis, scope))
    assert gate.samples == [] and gate.verl == {} and "length_growth" not in gate.breakdowns
    assert set(gate.metrics["percentiles"]) == ({"q", "abs_delta"} if scope == "GATE_HISTORY" else {"q"})
    assert [f["id"] for f in gate.diagnosis["findings"]] == [f["id"] for f in full.diagnosis["findings"]]
    assert gate.diagnosis["regime"] == full.diagnosis["regime"] and gate.routing == full.routing
    for key in limits():
        assert gate.metrics[key.metric] == full.metrics[key.metric]
    row, full_row = run_row(gate), run_row(full)
    if scope == "GATE":  # no history band to read the |δ| median
        assert row.pop("abs_delta_median") is None
        full_row.pop("abs_delta_median")
    assert row == full_row

"""The verdict where the user looks (issue 33): one line per batch in `build`, `check` and `watch` that says the regime
and the leading finding with its side and place, `--json` for machines, and bad input refused the same everywhere."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from helpers import one_line_exit_2, run

from tim_report.catalogue.severity import GLANCE_MAX
from tim_report.io import save_batch
from tim_report.testing import make_batch, make_sampled_batch, shifted


@pytest.fixture
def faulty(tmp_path):
    """An off-by-one, a trainer offset of −0.001 nats, a rollout at T = 0.8 of 8,000 tokens, plain noise."""
    b = make_batch(n_seqs=16, mean_len=48)
    files = {"shift": shifted(b), "offset": replace(make_batch(noise=0.0), trainer_logp=make_batch(noise=0.0).trainer_logp - 0.001),
             "temp": make_sampled_batch(0.8, "rollout", n_seqs=130), "noise": make_batch(n_seqs=16, mean_len=48)}
    out = {}
    for name, batch in files.items():
        out[name] = tmp_path / f"{name}.npz"
        save_batch(batch, out[name])
    return out


def glance_of(line: str, name: str) -> str:
    """What a summary line says before its numbers."""
    assert line.startswith(f"{name}: "), line
    return line[len(name) + 2:].split("; ")[0]


def test_build_prints_a_verdict_line_per_batch(faulty, tmp_path):
    r = run("build", *faulty.values(), "-o", tmp_path / "site")
    assert r.exit_code == 0, r.output
    lines = {line.split(":")[0]: line for line in r.output.splitlines() if line.split(":")[0] in faulty}
    said = {name: glance_of(lines[name], name) for name in faulty}
    assert all(len(g) <= GLANCE_MAX for g in said.values())
    assert said["shift"] == ("systematic: off-by-one (trainer matches the rollout at t+1) (error), side undetermined, "
                             "every position")
    assert said["offset"].startswith("elevated: processed log-probs (") and "(warn, small)" in said["offset"]
    assert said["temp"].startswith("systematic: one-sided temperature (T_rollout / T_trainer 0.")  # low to high
    assert ", trainer side, every position" in said["temp"]
    assert said["noise"] == "numerical noise"
    assert "tokens, 16 sequences, median |δ|" in lines["noise"]  # the numbers follow the verdict
    index = json.loads((tmp_path / "site" / "index.json").read_text())
    row = next(r for r in index["runs"] if r["id"] == "shift")
    assert row["glance"] == said["shift"] and row["side"] == "undetermined"


def test_check_leads_with_the_verdict_and_json_has_it(faulty):
    r = run("check", faulty["shift"], faulty["offset"], "--no-limits")
    assert r.exit_code == 1
    lines = r.output.splitlines()
    assert lines[0].startswith(f"{faulty['shift']}: fail: systematic: off-by-one")
    assert "routes below" not in r.output and f"{faulty['shift']}: Do not train on this batch" in r.output
    offset = [line for line in lines if line.startswith(str(faulty["offset"]))]
    # a warn under --fail-on error: the batch passes, and its line still says what was found
    assert offset == [f"{faulty['offset']}: ok: elevated: processed log-probs (rollout ≥ trainer on 100%) (warn, small), "
                      "side undetermined, every position; KL k3 5e-7, ESS 1.0000, 8,272 tokens"]
    rows = [json.loads(x) for x in run("check", faulty["temp"], faulty["noise"], "--json").output.splitlines()]
    assert rows[0]["finding"] == "temperature" and rows[0]["side"] == "trainer" and rows[0]["glance"].startswith("systematic")
    assert rows[1]["glance"] == "numerical noise" and rows[1]["side"] is None and rows[1]["finding"] is None


def one_token(tmp_path):
    b = make_batch(n_seqs=1, mean_len=2)
    one = replace(b, rollout_logp=b.rollout_logp[:1], trainer_logp=b.trainer_logp[:1], offsets=np.array([0, 1]),
                  mask=b.mask[:1], token_ids=b.token_ids[:1])
    p = tmp_path / "one.npz"
    save_batch(one, p)
    return p


def test_a_batch_check_refuses_build_refuses(tmp_path):
    p = one_token(tmp_path)
    one_line_exit_2(run("check", p), str(p), "Unusable input: only 1 usable tokens")
    one_line_exit_2(run("build", p, "-o", tmp_path / "site"), str(p), "Unusable input: only 1 usable tokens")
    assert not (tmp_path / "site").exists()


def test_in_a_run_folder_the_unusable_step_is_its_red_row(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for s in range(3):
        save_batch(make_batch(n_seqs=4, mean_len=24, seed=s), run_dir / f"step_{s}.npz")
    one_token(tmp_path).rename(run_dir / "step_3.npz")
    r = run("build", run_dir, "-o", tmp_path / "site")
    assert r.exit_code == 3, r.output
    index = json.loads((tmp_path / "site" / "index.json").read_text())
    assert [u["id"] for u in index["unreadable"]] == ["step_3"] and "Unusable input" in index["unreadable"][0]["reason"]
    assert sorted(row["id"] for row in index["runs"]) == ["step_0", "step_1", "step_2"]


def test_a_pt_of_numpy_arrays_says_save_tensors_or_npz(tmp_path):
    torch = pytest.importorskip("torch")
    b = make_batch(n_seqs=4, mean_len=16)
    p = tmp_path / "arrays.pt"
    torch.save({"rollout_log_probs": b.rollout_logp, "old_log_probs": b.trainer_logp}, p)
    for cmd in (("check", p), ("build", p, "-o", tmp_path / "site"), ("inspect", p)):
        line = one_line_exit_2(run(*cmd), str(p), "save tensors", "use .npz")
        assert "--allow-pickle" not in line

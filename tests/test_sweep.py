"""Length sweep: the same engine pair at several generation lengths, and the growth exponent of |Σδ| and of the
per-sequence KL recovered on data whose growth is known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import CI

from tim_report.analysis import analyze
from tim_report.analysis.run_index import run_row
from tim_report.analysis.sweep import length_sweep, power_fit
from tim_report.cli import main
from tim_report.testing import make_batch

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "models" / "tiny-qwen2"
PROMPTS = REPO / "examples" / "prompts.jsonl"


def _rows(kind: str) -> list[dict]:
    rows = []
    for i, n in enumerate((32, 128, 512)):
        b = make_batch(n_seqs=64, mean_len=n, seed=i)
        rng = np.random.default_rng(i)
        b.rollout_logp = b.rollout_logp - 1.0  # room below 0, so no noise is cut at log p = 0
        # a random walk: independent 0.02-nat noise per token (|Σδ| ∝ √length); drift: every token 0.01 nats low
        b.trainer_logp = b.rollout_logp + (0.02 * rng.standard_normal(b.n_tokens) if kind == "walk" else -0.01)
        b.meta["sampling"] = {"max_new_tokens": n}
        rows.append(run_row(analyze(b, run_id=f"{kind}_{n}")))
    return rows


def test_random_walk_grows_as_the_square_root_and_drift_linearly():
    walk, drift = length_sweep(_rows("walk"))[0], length_sweep(_rows("drift"))[0]
    assert [p["max_new_tokens"] for p in walk["points"]] == [32, 128, 512]
    assert walk["abs_sum"]["exponent"] == pytest.approx(0.5, abs=0.1) and "random walk" in walk["abs_sum"]["reading"]
    assert drift["abs_sum"]["exponent"] == pytest.approx(1.0, abs=0.05) and drift["abs_sum"]["reading"].startswith("linear")
    assert walk["kl_seq"]["exponent"] == pytest.approx(1.0, abs=0.1)  # the same per-token KL at every length


def test_power_fit_recovers_a_known_exponent_and_says_when_it_cannot():
    x = np.array([100.0, 400.0, 1600.0, 6400.0])
    fit = power_fit(x, 3e-3 * x ** 1.4)
    assert fit["exponent"] == pytest.approx(1.4) and fit["exponent_se"] == pytest.approx(0.0, abs=1e-9)
    assert power_fit(x[:2], x[:2])["exponent_se"] is None
    assert power_fit(x, np.array([1.0, 0.0, 1.0, 1.0])) is None


def test_runs_without_a_length_cap_or_of_one_length_are_no_sweep():
    rows = _rows("walk")
    assert length_sweep([dict(r, max_new_tokens=None) for r in rows]) is None
    assert length_sweep([dict(r, max_new_tokens=64) for r in rows]) is None


@pytest.mark.skipif(not (MODEL / "model.safetensors").exists() and not CI, reason="models/tiny-qwen2 not present")
def test_capture_a_sweep_and_build_its_section(tmp_path):
    r = CliRunner().invoke(main, ["capture", "--model", str(MODEL), "--prompts", str(PROMPTS), "--rollout", "hf:fp32",
                                  "--trainer", "hf:bf16", "--max-prompts", "2", "--n-samples", "2",
                                  "--max-new-tokens", "6,24", "--top-k-logprobs", "0", "-o", str(tmp_path / "sweep")])
    assert r.exit_code == 0, r.output
    files = sorted(p.name for p in (tmp_path / "sweep").glob("*.npz"))
    assert files == ["hf-fp32__hf-bf16_len24.npz", "hf-fp32__hf-bf16_len6.npz"]
    r = CliRunner().invoke(main, ["build", *map(str, sorted((tmp_path / "sweep").glob("*.npz"))), "-o", str(tmp_path / "site")])
    assert r.exit_code == 0, r.output
    sweep = json.loads((tmp_path / "site" / "index.json").read_text())["runs"]
    assert sorted(row["max_new_tokens"] for row in sweep) == [6, 24]
    html = (tmp_path / "site" / "index.html").read_text()
    assert "Length sweep" in html and "from two lengths" in html
    assert "## Length sweep" in (tmp_path / "site" / "report.md").read_text()


def test_a_bad_length_list_is_one_line(tmp_path):
    r = CliRunner().invoke(main, ["capture", "--model", str(MODEL), "--prompts", str(PROMPTS), "--max-new-tokens", "8,x",
                                  "-o", str(tmp_path / "x.npz")])
    assert r.exit_code == 2 and "expected N or N,N" in r.output

"""Per-environment breakdown: a prime-rl dump whose `env_name` splits the batch, one environment noisier than the other."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tim_report import analyze, load
from tim_report.analysis.run_index import env_trend
from tim_report.service.build import BuildOptions, build
from tim_report.testing import make_batch, write_prime_rl_run


def _noisy_code(step, batch):
    """Sequences at odd indices ('code') get a trainer 0.2 nats off at random: their KL k3 is far above 'math'."""
    rng = np.random.default_rng(step)
    for i in range(1, batch.n_seqs, 2):
        sl = batch.tokens_of(i)
        batch.trainer_logp[sl] = np.minimum(batch.rollout_logp[sl] + 0.2 * rng.standard_normal(sl.stop - sl.start), 0.0)
    return batch


def _env(i):
    return "code" if i % 2 else "math"


@pytest.fixture
def run(tmp_path):
    write_prime_rl_run(tmp_path / "run", steps=3, n_seqs=16, noise=0.001, fault=_noisy_code, env_of=_env)
    return tmp_path / "run"


def test_each_environment_gets_its_own_numbers(run):
    report = analyze(load(run / "token_exports" / "step_0"))
    e = report.breakdowns["by_env"]
    assert e["unit"] == "environment" and e["name"] == ["code", "math"]
    assert e["sequences"] == [8, 8]
    code, math_ = e["k3_mean"]
    assert code > 100 * math_  # 0.2-nat noise against 0.001
    assert e["k3_share"][0] > 0.99 and abs(sum(e["k3_share"]) - 1) < 1e-9
    # the pooled batch is the token-weighted mean of its environments
    pooled = sum(k * n for k, n in zip(e["k3_mean"], e["tokens"])) / sum(e["tokens"])
    assert pooled == pytest.approx(report.metrics["kl_k3"], rel=1e-9)
    assert e["k3_vs_batch"][0] == pytest.approx(code / report.metrics["kl_k3"], rel=1e-9)
    assert sum(e["token_share"]) == pytest.approx(1.0)


def test_a_batch_without_environments_has_no_table():
    report = analyze(make_batch(n_seqs=8))
    assert "by_env" not in report.breakdowns


def test_page_summary_and_run_view_show_environments(run, tmp_path):
    site = tmp_path / "site"
    build([run], site, BuildOptions())
    step = json.loads((site / "step_0" / "summary.json").read_text())
    assert step["breakdowns"]["by_env"]["name"] == ["code", "math"]
    html = (site / "step_0" / "index.html").read_text()
    assert "By environment" in html and "<strong>code</strong> has the highest KL k3" in html
    md = (site / "step_0" / "report.md").read_text()
    assert "<summary>By environment</summary>" in md and "**code** has the highest KL k3" in md
    index = json.loads((site / "index.json").read_text())
    assert all(set(r["env_kl_k3"]) == {"code", "math"} for r in index["runs"])
    index_html = (site / "index.html").read_text()
    assert "By environment over the run" in index_html
    assert "## By environment over the run" in (site / "report.md").read_text()


def test_env_trend_follows_each_environment_over_steps():
    rows = [{"id": f"s{s}", "step": s, "env_kl_k3": {"a": 1e-4 * (s + 1), "b": 5e-4}} for s in range(4)]
    rows.append({"id": "unstepped", "step": None, "env_kl_k3": {"a": 1.0}})
    trend = env_trend(rows)
    assert [e["env"] for e in trend] == ["b", "a"]  # worst first: b 5e-4 against a's worst 4e-4
    a = trend[1]
    assert (a["first_step"], a["last_step"], a["worst_step"], a["steps"]) == (0, 3, 3, 4)
    assert a["last_over_first"] == pytest.approx(4.0)
    assert env_trend(rows[:1]) is None

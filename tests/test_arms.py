"""A/B arms: `compare A/ B/` with several steps per arm, each metric's level per arm with an interval, the effect
between arms with Welch's interval, and a verdict per metric — on arms whose true factor is known."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from tim_report.analysis.arms import compare_arms, metric_arms
from tim_report.catalogue.metrics import metric
from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.testing import make_run


def _rows(values: dict[str, list[float]], prefix: str = "s") -> list[dict]:
    n = len(next(iter(values.values())))
    return [{"id": f"{prefix}{i}", "step": i, "regime": "numerical_noise", "findings": [], "tokens": 100,
             **{k: v[i] for k, v in values.items()}} for i in range(n)]


def test_a_known_factor_is_recovered_and_resolved():
    rng = np.random.default_rng(1)
    before = _rows({"kl_k3": list(3e-4 * np.exp(0.2 * rng.standard_normal(5)))})
    after = _rows({"kl_k3": list(1e-4 * np.exp(0.2 * rng.standard_normal(5)))})
    row = metric_arms(metric("kl_k3"), before, after)
    e = row["effect"]
    assert row["scale"] == "ratio" and row["direction"] == "lower"
    assert e["low"] < 1 / 3 < e["high"] < 1
    assert row["direction"] == "lower"


def test_equal_arms_give_an_interval_that_covers_one_about_95_percent_of_the_time():
    """Welch's interval on the log scale is exact for log-normal steps: over 400 pairs of equal arms of 4 steps each,
    the interval covers 1 in about 95% of them (and says 'unresolved' there)."""
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(400):
        b = _rows({"kl_k3": list(2e-4 * np.exp(0.3 * rng.standard_normal(4)))})
        a = _rows({"kl_k3": list(2e-4 * np.exp(0.3 * rng.standard_normal(4)))})
        row = metric_arms(metric("kl_k3"), b, a)
        covered += row["effect"]["low"] <= 1 <= row["effect"]["high"]
        assert (row["direction"] == "unresolved") == (row["effect"]["low"] <= 1 <= row["effect"]["high"])
    assert 0.91 <= covered / 400 <= 0.99


def test_ess_is_compared_on_its_loss_and_a_zero_gap_as_a_difference():
    before = _rows({"ess": [0.99, 0.98, 0.985], "outside_5x": [0.0, 1e-4, 0.0]})
    after = _rows({"ess": [0.999, 0.998, 0.9985], "outside_5x": [0.0, 0.0, 0.0]})
    ess = metric_arms(metric("ess"), before, after)
    assert ess["gap"] == "1 − ESS" and ess["scale"] == "ratio"
    assert ess["effect"]["value"] == pytest.approx(0.1, rel=0.05) and ess["direction"] == "lower"
    zero = metric_arms(metric("outside_5x"), before, after)
    assert zero["scale"] == "difference" and zero["direction"] == "unresolved"
    both_zero = metric_arms(metric("outside_5x"), _rows({"outside_5x": [0.0, 0.0]}), _rows({"outside_5x": [0.0, 0.0]}))
    assert both_zero["direction"] == "zero"


def test_one_step_in_an_arm_draws_no_verdict():
    row = metric_arms(metric("kl_k3"), _rows({"kl_k3": [1e-4]}), _rows({"kl_k3": [1e-4, 2e-4]}))
    assert row["effect"] is None and row["direction"] is None and row["before"]["low"] is None
    assert "no verdict from one step" in compare_arms(_rows({"kl_k3": [1e-4]}), _rows({"kl_k3": [1e-4, 2e-4]}),
                                                      ("a", "b"))["metrics"][0]["sentence"]


def test_why_names_the_findings_most_steps_of_one_arm_raise():
    before = _rows({"kl_k3": [1e-4, 1e-4]})
    after = [dict(r, regime="systematic", findings=["shift"]) for r in _rows({"kl_k3": [1e-2, 1e-2]})]
    cmp = compare_arms(before, after, ("base", "fused"))
    assert cmp["why"]["appeared"] == ["shift"] and cmp["why"]["regime"] == {"before": "numerical_noise", "after": "systematic"}
    assert "off-by-one" in cmp["why"]["sentence"] and "systematic" in cmp["why"]["sentence"]


def _arm(folder, noise, seed):
    folder.mkdir()
    for b in make_run(5, n_seqs=(24, 32), mean_len=48, noise=noise, wobble=0.1, seed=seed):
        save_batch(b, folder / f"step_{b.meta['step']}.npz")
    return folder


def test_compare_two_run_folders_end_to_end(tmp_path):
    a = _arm(tmp_path / "bf16", 0.01, seed=1)
    b = _arm(tmp_path / "fp32", 0.01 / math.sqrt(3), seed=2)  # k3 ∝ noise²: a third of the KL
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "-o", str(tmp_path / "cmp")])
    assert result.exit_code == 0, result.output
    assert "fp32 lowers KL k3" in result.output
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert data["kind"] == "arms" and data["arms"]["before"]["steps"] == 5 and data["labels"] == {"before": "bf16", "after": "fp32"}
    kl = next(m for m in data["metrics"] if m["key"] == "kl_k3")
    assert kl["effect"]["high"] < 1 and 0.25 < kl["effect"]["value"] < 0.42
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert md.index("**Why:**") < md.index("fp32 lowers KL k3")
    assert "A/B arms" in (tmp_path / "cmp" / "index.html").read_text()


def test_equal_arms_end_to_end_do_not_claim_a_difference(tmp_path):
    a = _arm(tmp_path / "a", 0.01, seed=3)
    b = _arm(tmp_path / "b", 0.01, seed=4)
    result = CliRunner().invoke(main, ["compare", str(a), str(b), "-o", str(tmp_path / "cmp")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    kl = next(m for m in data["metrics"] if m["key"] == "kl_k3")
    assert kl["direction"] == "unresolved" and kl["effect"]["low"] <= 1 <= kl["effect"]["high"]


@pytest.mark.parametrize("key, before, after", [
    ("phantom_clip", [0.004, 0.25, 0.05], [0.01, 0.02]),  # positive at every step: the log scale, whose interval ran to 241%
    ("outside_2x", [0.0, 0.55, 0.25], [0.3, 0.0, 0.01]),  # a zero step: a difference of means, whose interval went below 0
    ("ess", [0.2, 0.99, 0.5], [0.999, 0.98]),  # 1 − ESS, a share too
])
def test_a_shares_interval_stays_within_0_and_100_percent(key, before, after):
    m = metric_arms(metric(key), [{key: v} for v in before], [{key: v} for v in after])
    for arm in ("before", "after"):
        assert 0.0 <= m[arm]["low"] <= m[arm]["mean"] <= m[arm]["high"] <= 1.0, m[arm]
    if m["scale"] == "difference":
        assert -1.0 <= m["effect"]["low"] <= m["effect"]["high"] <= 1.0
    raw = metric_arms(metric("kl_k3"), [{"kl_k3": v} for v in before if v], [{"kl_k3": v} for v in after if v])
    assert raw["before"]["high"] > 0  # a metric that is not a share keeps its interval as computed

"""A whole run: discovery of its steps, the trend, change points, index.json and the per-step cache."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import check_gfm

from tim_report.analysis.run_index import index_from_rows, run_row
from tim_report.catalogue.metrics import TREND, metric
from tim_report.cli import main
from tim_report.testing import write_prime_rl_run

RISE_AT = 19


def rising(step: int) -> float:
    """Bf16-sized noise, then 6× more from step 19 on (a weight sync that stopped, say)."""
    return 0.01 if step < RISE_AT else 0.06


def build(*args) -> str:
    res = CliRunner().invoke(main, ["build", *map(str, args)])
    assert res.exit_code == 0, res.output
    return res.output


def files(site: Path) -> dict[str, bytes]:
    return {str(p.relative_to(site)): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run30(tmp_path_factory) -> tuple[Path, Path, str]:
    tmp = tmp_path_factory.mktemp("run30")
    write_prime_rl_run(tmp / "run", steps=30, n_seqs=12, mean_len=32, noise=rising)
    out = build(tmp / "run" / "token_exports", "-o", tmp / "site")
    return tmp / "run", tmp / "site", out


def test_a_run_folder_lists_every_step_and_the_change_point_where_the_mismatch_rose(run30):
    _, site, out = run30
    index = json.loads((site / "index.json").read_text(encoding="utf-8"))
    assert index["steps"] == 30 and [r["step"] for r in index["runs"]] == list(range(30))
    assert [r["id"] for r in index["runs"]] == [f"step_{s}" for s in range(30)]
    rise = {c["metric"]: c for c in index["change_points"] if c["step"] == RISE_AT}
    assert {"abs_delta_mean", "abs_delta_median", "kl_k3"} <= set(rise)
    mean = rise["abs_delta_mean"]
    assert mean["worse"] and mean["direction"] == "up" and 4 < mean["ratio"] < 9  # 6× the noise, measured
    assert (mean["first_step"], mean["last_step"]) == (0, 29)
    assert all(c["step"] == RISE_AT for c in index["change_points"])  # nothing else moved
    sentence = index["change_steps"][0]["sentence"]
    assert sentence.startswith(f"From step {RISE_AT}, mean |δ| is ") and "× higher" in sentence and "weight sync" in sentence
    assert f"change point: From step {RISE_AT}, mean |δ|" in out
    assert "30 batches: 30 analysed, 0 reused from the cache" in out
    assert "step_3: " not in out  # a long run prints its summary, not a line per step


def test_the_index_draws_a_panel_per_moving_metric_and_names_the_change(run30):
    _, site, _ = run30
    html = (site / "index.html").read_text(encoding="utf-8")
    assert f'<a href="step_{RISE_AT}/index.html">step {RISE_AT}</a>: From step {RISE_AT}' in html
    specs = json.loads(html.split('id="tim-specs">')[1].split("</script>")[0])
    by_id = {c["id"]: c["spec"] for c in specs}
    mean = json.dumps(by_id["trend-abs_delta_mean"])
    assert '"href": "datum.run + \'/index.html\'"' in mean or "datum.run + '/index.html'" in mean  # each point links its page
    assert f'"step": {RISE_AT}' in mean and '"strokeDash"' in mean  # the change point's rule
    assert '"type": "log"' in json.dumps(by_id["trend-kl_k3"])  # KL spans decades here: a log axis
    md = (site / "report.md").read_text(encoding="utf-8")
    check_gfm(md)
    assert f"[step {RISE_AT}](step_{RISE_AT}/index.html): From step {RISE_AT}" in md


@pytest.fixture
def small_run(tmp_path) -> tuple[Path, Path]:
    """A 10-step run and its site, built once (the cache tests change one and rebuild)."""
    write_prime_rl_run(tmp_path / "run", steps=10, n_seqs=8, mean_len=24, noise=rising)
    assert "10 analysed, 0 reused" in build(tmp_path / "run" / "token_exports", "-o", tmp_path / "site")
    return tmp_path / "run" / "token_exports", tmp_path / "site"


def test_adding_a_step_analyses_that_step_alone_and_gives_the_same_site_as_a_fresh_build(small_run, tmp_path):
    run, site = small_run
    write_prime_rl_run(run.parent, steps=11, n_seqs=8, mean_len=24, noise=rising)  # same seeds: steps 0-9 alike
    before = os.stat(site / "step_3" / "index.html").st_mtime_ns
    out = build(run, "-o", site)
    assert "11 batches: 1 analysed, 10 reused from the cache" in out
    assert os.stat(site / "step_3" / "index.html").st_mtime_ns == before  # untouched
    assert len(json.loads((site / "index.json").read_text(encoding="utf-8"))["runs"]) == 11
    build(run, "-o", tmp_path / "fresh")
    assert files(site) == files(tmp_path / "fresh")


def test_the_cache_never_serves_a_stale_page(small_run):
    run, site = small_run
    rank = run / "step_7" / "rank_0.jsonl"
    text = rank.read_text(encoding="utf-8")
    at = text.index('"trainer_logprobs": [') + len('"trainer_logprobs": [-7.6, -1.0, -1.0, -1.0, ')
    at = text.index(",", at) - 1  # the last digit of the first response token's trainer log-prob
    rank.write_text(text[:at] + ("1" if text[at] != "1" else "2") + text[at + 1:], encoding="utf-8")  # one byte
    old = (site / "step_7" / "summary.json").read_bytes()
    assert "1 analysed, 9 reused" in build(run, "-o", site)
    assert (site / "step_7" / "summary.json").read_bytes() != old


def test_a_changed_option_rebuilds_every_step_and_a_timestamp_does_not(small_run):
    run, site = small_run
    assert "0 analysed, 10 reused" in build(run, "-o", site, "--timestamp")
    assert "10 analysed, 0 reused" in build(run, "-o", site, "--ppo-eps", "0.1", "0.2")


def test_a_damaged_cache_or_run_folder_is_rebuilt_not_trusted(small_run, tmp_path):
    run, s = small_run
    shutil.copytree(s, tmp_path / "before")
    (s / "step_1" / ".tim-report-cache.json").write_text("{not json", encoding="utf-8")
    (s / "step_2" / "report.md").unlink()
    shutil.copy(s / "step_4" / ".tim-report-cache.json", s / "step_3" / ".tim-report-cache.json")  # another step's row
    entry = json.loads((s / "step_5" / ".tim-report-cache.json").read_text(encoding="utf-8"))
    entry["row"]["step"] = "five"  # a row that would break the trend
    (s / "step_5" / ".tim-report-cache.json").write_text(json.dumps(entry), encoding="utf-8")
    assert "4 analysed, 6 reused" in build(run, "-o", s)
    assert files(s) == files(tmp_path / "before")


def test_a_flat_run_has_no_change_point(tmp_path):
    write_prime_rl_run(tmp_path / "run", steps=24, n_seqs=12, mean_len=32, noise=0.01, seed=3)
    build(tmp_path / "run" / "token_exports", "-o", tmp_path / "site", "--format", "json", "--format", "html")
    index = json.loads((tmp_path / "site" / "index.json").read_text(encoding="utf-8"))
    assert index["change_points"] == [] and index["steps"] == 24
    assert "No change point" in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


def rows(levels: list[float]) -> list[dict]:
    """Index rows whose |δ| follows `levels` (KL as its square), other metrics flat."""
    out = []
    for s, lvl in enumerate(levels):
        m = {"tokens": 1000, "sequences": 10, "ess": 0.999, "kl_k3": lvl * lvl / 2, "abs_delta_mean": lvl,
             "abs_delta_median": lvl * 0.7, "outside_2x": 0.0, "outside_5x": 0.0, "phantom_clip": 0.0,
             "veto_token_fraction": 0.0}
        out.append(run_row({"run": {"id": f"step_{s}", "meta": {"step": s}}, "metrics": m}))
    return out


def test_a_mismatch_that_grows_until_a_restart_reads_as_rises_then_a_fall():
    wobble = [1.0, 1.08, 0.95, 1.03, 0.97, 1.05]
    levels = [0.01 * (1 + s / 10) * wobble[s % 6] for s in range(60)] + [0.01 * wobble[s % 6] for s in range(40)]
    ix = index_from_rows(rows(levels))
    cps = [c for c in ix["trend"]["change_points"] if c["metric"] == "abs_delta_mean"]
    assert len(cps) >= 2 and all(c["direction"] == "up" and c["worse"] for c in cps[:-1])
    restart = cps[-1]
    assert restart["step"] == 60 and restart["direction"] == "down" and not restart["worse"]
    # the rises are one growth and the fall its restart: the sentences say so rather than "look for what changed"
    *rises, fall = ix["trend"]["change_steps"]
    assert all("part of the step-over-step growth of the mismatch since step 0" in c["sentence"] for c in rises)
    assert "a restart ended the growth of the mismatch since step 0" in fall["sentence"]
    (growth,) = ix["run"]["findings"]
    assert growth["id"] == "growing_mismatch" and growth["severity"] == "warn"
    assert (growth["evidence"]["first_step"], growth["evidence"]["last_step"], growth["evidence"]["restart_step"]) == (0, 59, 60)


def test_a_long_run_keeps_report_md_short_and_the_index_small():
    from tim_report.render.html import render_index
    from tim_report.render.markdown import render_index_md

    levels = [0.015 * (1 + 0.1 * ((s * 7919) % 13 - 6) / 6) * (1 if s < 340 else 13) for s in range(1000)]
    ix = index_from_rows(rows(levels))
    assert [(c["step"], c["metric"]) for c in ix["trend"]["change_points"]][:3] == [
        (340, "abs_delta_mean"), (340, "abs_delta_median"), (340, "kl_k3")]
    md = render_index_md(ix)
    check_gfm(md)
    assert "charts on the HTML index and rows in `index.json` (1000 steps)" in md
    html = render_index(ix)
    assert len(html.encode()) < 2_000_000  # the target for 1,000 steps
    flat = [metric(k).name for k in TREND if k in ("outside_2x", "veto_token_fraction")]
    assert all(f"{name} 0%" in html for name in flat)  # flat metrics said in words, not drawn

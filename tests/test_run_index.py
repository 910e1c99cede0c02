"""Many runs in one build: aggregation (analysis/run_index.py), the index in HTML and markdown, steps, --jobs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import check_gfm

from tim_report.analysis.run_index import engine_pairs, index_summary, precision_matrix, run_row
from tim_report.analysis.trend import trend
from tim_report.catalogue.metrics import TREND, metric
from tim_report.cli import main
from tim_report.config import health
from tim_report.io import save_batch
from tim_report.model import BatchReport
from tim_report.service.build import BuildOptions, build
from tim_report.testing import make_batch

# (file name, rollout engine, rollout dtype, trainer engine, trainer dtype, noise, meta step)
RUNS = [
    ("global_step_10", "vllm", "bf16", "fsdp", "fp32", 0.01, None),
    ("step_20", "vllm", "bf16", "fsdp", "fp32", 0.03, None),
    ("step_25", "vllm", "bf16", "fsdp", "fp32", 0.02, None),
    ("vllm_fp16", "vllm", "fp16", "fsdp", "fp16", 0.005, 30),
    ("sglang_a", "sglang", "bf16", "megatron", "fp32", 0.2, None),
]


def write_inputs(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (name, re_, rd, te, td, noise, step) in enumerate(RUNS):
        b = make_batch(n_seqs=16, mean_len=24, noise=noise, seed=i)
        b.meta = {**b.meta, "rollout_engine": re_, "rollout_dtype": rd, "trainer_engine": te, "trainer_dtype": td}
        if step is not None:
            b.meta["step"] = step
        p = folder / f"{name}.npz"
        save_batch(b, p)
        paths.append(p)
    return paths


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("runs")
    out = tmp / "site"
    build(write_inputs(tmp / "in"), out, BuildOptions())
    return out


def summaries(site: Path) -> dict[str, dict]:
    return {name: json.loads((site / name / "summary.json").read_text(encoding="utf-8")) for name, *_ in RUNS}


def test_steps_from_names_and_meta(site):
    s = summaries(site)
    assert s["global_step_10"]["run"]["meta"]["step"] == 10  # global_step_N in the file name
    assert s["step_20"]["run"]["meta"]["step"] == 20  # step_N
    assert s["vllm_fp16"]["run"]["meta"]["step"] == 30  # meta step
    assert "step" not in s["sglang_a"]["run"]["meta"]
    tr = trend([run_row(x) for x in s.values()])
    assert [(r["step"], r["run"]) for r in tr["rows"]] == [(10, "global_step_10"), (20, "step_20"), (25, "step_25"),
                                                           (30, "vllm_fp16")]
    assert tr["unstepped"] == 1 and tr["steps"] == 4
    assert {m["name"] for m in tr["metrics"]} >= {"mean |δ|", "median |δ|", "KL k3", "ESS", "outside 2x", "outside 5x",
                                                  "phantom clip", "veto", "data problems"}
    assert trend([run_row(s["global_step_10"])]) is None  # one step: no trend


def test_engine_pairs_match_hand_computed_means(site):
    s = summaries(site)
    pairs = {(p["rollout_engine"], p["rollout_dtype"], p["trainer_engine"], p["trainer_dtype"]): p
             for p in index_summary(list(s.values()))["engine_pairs"]}
    # engine AND precision: bf16 → fp32 and fp16 → fp16 runs of the same engines are not averaged together
    assert list(pairs) == [("vllm", "bf16", "fsdp", "fp32"), ("vllm", "fp16", "fsdp", "fp16"), ("sglang", "bf16", "megatron", "fp32")]
    vllm = [s[n]["metrics"] for n in ("global_step_10", "step_20", "step_25")]
    p = pairs[("vllm", "bf16", "fsdp", "fp32")]
    assert p["count"] == 3 and p["runs"] == ["global_step_10", "step_20", "step_25"]
    for key, name in (("mean_ess", "ess"), ("mean_clipped", "phantom_clip"), ("mean_seq_log_ratio", "seq_log_ratio_mean"),
                      ("mean_abs_delta", "abs_delta_mean")):
        assert p[key] == pytest.approx(sum(m[name] for m in vllm) / 3, rel=1e-12), key
    assert p["worst_abs_delta_max"] == max(m["abs_delta_max"] for m in vllm)
    assert p["tokens"] == sum(m["tokens"] for m in vllm)
    assert p["health"] == health(p["mean_ess"])
    assert pairs[("vllm", "fp16", "fsdp", "fp16")]["runs"] == ["vllm_fp16"]
    sg = pairs[("sglang", "bf16", "megatron", "fp32")]
    assert sg["count"] == 1 and sg["mean_ess"] == s["sglang_a"]["metrics"]["ess"] and sg["health"] == "red"


def test_precision_matrix(site):
    s = summaries(site)
    pm = precision_matrix([run_row(x) for x in s.values()])
    assert pm["rollout_dtypes"] == ["bf16", "fp16"] and pm["trainer_dtypes"] == ["fp16", "fp32"]
    bf16_fp32 = pm["cells"][0][1]
    runs = [s[n]["metrics"] for n in ("global_step_10", "step_20", "step_25", "sglang_a")]
    assert bf16_fp32["count"] == 4
    assert bf16_fp32["mean_abs_delta_median"] == pytest.approx(sum(m["abs_delta_median"] for m in runs) / 4, rel=1e-12)
    assert bf16_fp32["mean_kl_k3"] == pytest.approx(sum(m["kl_k3"] for m in runs) / 4, rel=1e-12)
    assert pm["cells"][0][0] is None and pm["cells"][1][0]["count"] == 1 and pm["cells"][1][1] is None
    same = [run_row(s["global_step_10"]), run_row(s["step_20"])]
    assert precision_matrix(same) is None  # one dtype pair: no matrix


def test_reports_and_summary_dicts_agree(site):
    s = summaries(site)
    from_dicts = index_summary(list(s.values()))
    from_reports = index_summary([BatchReport.from_dict(x) for x in s.values()])
    assert from_dicts == from_reports


def test_missing_values_are_skipped():
    meta = {"rollout_engine": "vllm", "rollout_dtype": "bf16", "trainer_engine": "fsdp", "trainer_dtype": "fp32"}
    rows = [run_row({"run": {"id": "a", "meta": meta}, "metrics": {"ess": 0.9}}),
            run_row({"run": {"id": "b", "meta": meta}, "metrics": {"ess": None}})]
    (p,) = engine_pairs(rows)
    assert p["mean_ess"] == 0.9 and p["mean_abs_delta"] is None and p["tokens"] is None and p["count"] == 2


def test_runs_with_unknown_engines_are_never_averaged():
    """A healthy and a broken run that name no engines must not become one '? → ?' row with a blended ESS."""
    rows = [run_row({"run": {"id": "healthy"}, "metrics": {"ess": 0.999}}), run_row({"run": {"id": "broken"}, "metrics": {"ess": 0.3}})]
    ix = index_summary([{"run": {"id": "healthy"}, "metrics": {"ess": 0.999}}, {"run": {"id": "broken"}, "metrics": {"ess": 0.3}}])
    assert engine_pairs(rows) == [] and ix["engine_pairs"] == [] and ix["unpaired_runs"] == ["healthy", "broken"]
    assert run_row({"run": {"id": "c"}, "metrics": {"ess": math.nan}})["health"] == "unknown"


def test_index_pages_show_the_aggregates(site):
    s = summaries(site)
    ix = index_summary(list(s.values()))
    md = (site / "report.md").read_text(encoding="utf-8")
    check_gfm(md)
    vllm = [s[n]["metrics"] for n in ("global_step_10", "step_20", "step_25")]
    row = next(line for line in md.splitlines() if line.startswith("| 🟢") and "| vllm bf16 | fsdp fp32 |" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    # colour, rollout engine, trainer engine, runs, mean ESS, mean clipped, mean Σδ, mean |δ|, worst max |δ|, tokens
    assert cells[1:4] == ["vllm bf16", "fsdp fp32", "3"]
    assert float(cells[4]) == pytest.approx(sum(m["ess"] for m in vllm) / 3, abs=5e-5)
    assert float(cells[5].rstrip("%")) / 100 == pytest.approx(sum(m["phantom_clip"] for m in vllm) / 3, rel=5e-3)
    assert float(cells[6].replace("−", "-")) == pytest.approx(sum(m["seq_log_ratio_mean"] for m in vllm) / 3, rel=5e-3)
    assert int(cells[9].replace(",", "")) == sum(m["tokens"] for m in vllm)
    assert "## Precision matrix" in md and "## Over training steps" in md
    for name, *_ in RUNS:
        assert f"]({name}/index.html)" in md
    html = (site / "index.html").read_text(encoding="utf-8")
    for name, *_ in RUNS:
        assert f'href="{name}/index.html"' in html
    assert 'id="engine-pairs"' in html and 'id="precision"' in html and 'id="chart-trend-kl_k3"' in html
    assert 'title="global_step_10, step_20, step_25">3<' in html and cells[4] in html
    flat = [m for m in ix["trend"]["metrics"] if m["constant"] is not None]  # said in a sentence, not drawn
    assert html.count('class="vega"') == len(TREND) - len(flat)  # one panel per headline metric that moves
    assert all(f"{m['name']} 0" in html for m in flat)
    specs = re.search(r'<script type="application/json" id="tim-specs">(.*?)</script>', html, re.S).group(1)
    assert all(m.name in specs for m in map(metric, TREND) if m.key not in {f["key"] for f in flat})


def test_jobs_output_is_identical(tmp_path):
    paths = write_inputs(tmp_path / "in")
    build(paths, tmp_path / "one", BuildOptions(jobs=1))
    build(paths, tmp_path / "two", BuildOptions(jobs=2))
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "two") for p in (tmp_path / "two").rglob("*") if p.is_file())
    for f in files:
        assert (tmp_path / "one" / f).read_bytes() == (tmp_path / "two" / f).read_bytes(), f


def test_jobs_bad_input_exits_2_and_writes_nothing(tmp_path):
    paths = write_inputs(tmp_path / "in")
    bad = tmp_path / "in" / "broken.npz"
    bad.write_bytes(b"not a zip file")
    out = tmp_path / "site"
    res = CliRunner().invoke(main, ["build", str(paths[0]), str(bad), str(paths[1]), "-o", str(out), "--jobs", "2"])
    assert res.exit_code == 2
    assert "broken.npz" in res.output and "Traceback" not in res.output
    assert not out.exists() and not list(tmp_path.glob(".tim-report-*"))

"""The catalogue is the one description of every metric and finding: it is complete and consistent, every place
that shows a metric reads it, and adding a metric is its computation, its entry and nothing else.
"""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT, throwaway

from tim_report.catalogue import findings, metrics
from tim_report.catalogue.formats import FORMATS
from tim_report.catalogue.numbers import fmt, pct, plain, sci
from tim_report.config import SEVERITIES, DiagnosisThresholds


def test_every_view_names_entries_that_can_fill_it():
    assert set(metrics.VIEWS) >= {"headline", "index", "trend", "history", "gates", "compare", "row"}
    for name, keys in metrics.VIEWS.items():
        assert len(set(keys)) == len(keys), name
        for key in keys:
            m = metrics.metric(key)
            assert m.unit in metrics.UNITS and m.unit != "term", (name, key)
    assert all(metrics.metric(k).trend for k in metrics.TREND)
    assert all(metrics.metric(k).gate for k in metrics.GATES)
    assert set(metrics.HISTORY) == {k for k in metrics.TREND if metrics.metric(k).history_floor is not None}
    # what the index, the run view and the history gate read without a Report is in every row
    assert set(metrics.INDEX) | set(metrics.HISTORY) <= set(metrics.ROW)
    assert set(metrics.TREND) - set(metrics.ROW) == {"data_problems"}  # derived by run_row from the data problems


def test_one_name_and_one_direction_per_metric():
    names = [m.name for m in metrics.CATALOGUE]
    assert len(set(names)) == len(names)
    assert len({m.key for m in metrics.CATALOGUE}) == len(metrics.CATALOGUE)
    for m in metrics.CATALOGUE:
        assert (m.ideal is None) == (m.worse is None), m.key
        assert m.worse in (None, "up", "down", "both"), m.key
        assert m.better in (None, "lower", "zero", "one"), m.key
        assert bool(m.plain) == bool(m.formula), m.key  # a glossary entry says what it is and how it is computed
    assert metrics.metric("kl_k3").name == "KL k3" and metrics.metric("ess").name == "ESS"


def test_readings_are_ordered_bands_ending_at_infinity():
    for m in metrics.CATALOGUE:
        if m.readings:
            bounds = [band.below for band in m.readings]
            assert bounds == sorted(bounds) and bounds[-1] == float("inf"), m.key
            assert all(band.level in ("ok", "warn", "bad") for band in m.readings), m.key
    assert metrics.metric("kl_k3").reading(5e-3)[0] == "ok" and metrics.metric("kl_k3").reading(0.5)[0] == "bad"
    assert metrics.metric("ess").reading(None) == ("na", "not available")


def test_every_finding_has_words_for_any_evidence_it_is_given():
    dt = DiagnosisThresholds()
    assert set(findings.FINDINGS) >= {"shift", "temperature", "dummy_zero", "one_side_broken", "turn_boundary"}
    made = findings.make("dummy_zero", {"tokens": 3}, dt)
    assert made["severity"] == "error" and made["title"].startswith("3 masked-in tokens") and made["problem"]
    assert findings.make("dummy_zero", {"tokens": 1}, dt)["severity"] == "warn"
    assert all(f.severity(_AnyEvidence(), dt) in SEVERITIES for f in findings.FINDINGS.values())


class _AnyEvidence(dict):
    """Evidence whose every field is 1 (enough for each severity rule to decide)."""

    def __missing__(self, key):
        return 1.0


def test_one_number_formatter():
    assert fmt(None) == "—" and fmt(0.0) == "0" and fmt(1.5e-7) == "1.5e-7" and fmt(0.99994) == "0.99994"
    assert fmt(1234) == "1,234" and fmt(None, missing="n/a") == "n/a"
    assert pct(0.0123) == "1.23%" and pct(1.0) == "100%" and pct(0.999) == "99.9%" and pct(0.5, 2) == "50%"
    assert sci(1e-4) == "1e-4" and sci(0.3) == "0.3" and plain(1e-4) == "0.0001" and plain(2.0) == "2"


def test_formats_name_their_files_once():
    """One format, one file; samples.js aside: the page draws its tables from it and it is the samples' data for
    scripts, so the html and json formats both write it, the same bytes."""
    from tim_report.analysis import analyze
    from tim_report.render import render
    from tim_report.testing import make_batch

    names = [n for f in FORMATS.values() for n in f.run_files if n != "samples.js"]
    assert len(names) == len(set(names))
    assert [f.name for f in FORMATS.values() if "samples.js" in f.run_files] == ["html", "json"]
    report = analyze(make_batch(8, 12))
    assert render("run", report, ("html",))["samples.js"] == render("run", report, ("json",))["samples.js"]


THROWAWAY = r'''
import json, sys
from pathlib import Path
import numpy as np
from click.testing import CliRunner

# The whole of adding a metric: its computation, its catalogue entry and its key in the views that show it.
from tim_report.catalogue import metrics as C
entry = C.Metric("wide_tokens", "wide tokens", "share", 0, "up",
                 plain="Share of tokens whose |δ| exceeds a tenth of a nat.", formula="mean_t [|δ_t| > 0.1]",
                 readings=(C.Reading(1e-3, "ok", "hardly any wide token"), C.Reading(float("inf"), "bad", "many wide tokens")),
                 trend=C.Trend("difference", 1.5, 1e-3), history_floor=1e-3,
                 gate=C.Gate("--max-wide-tokens", None, "Fail when the share of wide tokens exceeds this."))
C.CATALOGUE = C.CATALOGUE + (entry,)
C.BY_KEY = {**C.BY_KEY, entry.key: entry}
for view in ("HEADLINE", "INDEX", "TREND", "COMPARE", "ROW", "GATES"):
    setattr(C, view, getattr(C, view) + (entry.key,))
C.HISTORY = C.HISTORY + (entry.key,)

import tim_report.analysis as A
computed = A.summary_metrics
def summary_metrics(tok, th, *scope):
    m = computed(tok, th, *scope)
    m["wide_tokens"] = float(np.mean(np.abs(tok.delta) > 0.1))
    return m
A.summary_metrics = summary_metrics

from tim_report.cli import main
from tim_report.testing import write_prime_rl_run

tmp = Path(sys.argv[1])
write_prime_rl_run(tmp / "run", steps=12, noise=lambda s: 0.01 if s < 7 else 0.08)
run = lambda *a: CliRunner().invoke(main, [str(x) for x in a], catch_exceptions=False)
out = {"build": run("build", tmp / "run", "-o", tmp / "site").exit_code}
site = tmp / "site"
page, md = (site / "step_9" / "index.html").read_text(), (site / "step_9" / "report.md").read_text()
index, index_md = (site / "index.html").read_text(), (site / "report.md").read_text()
doc = json.loads((site / "index.json").read_text())
out["glossary"] = '<div id="g-wide_tokens"><dt>wide tokens</dt>' in page and "**wide tokens**: Share of tokens" in md
out["card"] = '<a href="#g-wide_tokens">wide tokens</a>' in page and "| wide tokens |" in md
out["index_column"] = ">wide tokens<" in index and "wide tokens" in index_md.split("The columns", 1)[1].split("\n")[0]
# (report.md's runs table keeps the three headline columns, ten in all, and names the others under it)
out["row"] = all(isinstance(r.get("wide_tokens"), float) for r in doc["runs"])
out["trend_panel"] = 'id="chart-trend-wide_tokens"' in index
out["change_point"] = any(c["metric"] == "wide_tokens" and c["step"] == 7 for c in doc["change_points"])
steps = site.parent / "run" / "token_exports"
res = run("check", steps / "step_9", "--max-wide-tokens", "0.001")
out["gate"] = res.exit_code == 1 and "limit wide_tokens = " in res.output and "(--max-wide-tokens)" in res.output
res = run("check", steps / "step_9", "--history", site, "--no-limits")
out["history"] = res.exit_code == 1 and "history wide_tokens = " in res.output
res = run("compare", steps / "step_2", steps / "step_9", "-o", tmp / "cmp")
cmp = json.loads((tmp / "cmp" / "compare.json").read_text())
row = next(r for r in cmp["metrics"] if r["key"] == "wide_tokens")
cmp_md = (tmp / "cmp" / "compare.md").read_text()
out["compare"] = row["direction"] == "worse" and row["name"] == "wide tokens" and "| wide tokens |" in cmp_md
print(json.dumps(out))
'''


def test_a_new_metric_is_its_computation_and_its_catalogue_entry(tmp_path):
    """docs/architecture.md's worked example: a throwaway metric added in a temporary catalogue (in a fresh interpreter)
    shows in the glossary, the headline cards, the index columns and rows, the trend with its change point, check's
    options, the history gate and compare, with no other file touched."""
    found = throwaway(THROWAWAY, tmp_path)
    assert all(found.values()), found


def test_help_loads_no_numpy():
    """`tim-report --help` (and every command's) imports the catalogue and Click, never the analysis."""
    for args in ([], ["build"], ["check"], ["compare"], ["inspect"], ["capture"]):
        res = subprocess.run([sys.executable, "-X", "importtime", "-m", "tim_report", *args, "--help"], capture_output=True,
                             text=True, cwd=ROOT)
        assert res.returncode == 0, res.stderr[-2000:]
        loaded = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in res.stderr.splitlines() if line.startswith("import time:")}
        assert "tim_report" in loaded and loaded.isdisjoint({"numpy", "torch", "jinja2", "altair", "pandas"}), (args, loaded)

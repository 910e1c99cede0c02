"""The Python API for notebooks and scripts: load → analyze → to_dict / to_html / _repr_html_ / to_markdown, compare."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys

import pytest

import tim_report
from tim_report.io import save_batch
from tim_report.model import dumps
from tim_report.testing import make_batch

EVIL = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "step_3.npz"
    b = make_batch(n_seqs=12, mean_len=30, noise=0.02, seed=5)
    b.token_text = [EVIL if i % 7 == 0 else "tok" for i in range(b.n_tokens)]
    save_batch(b, path)
    return path


@pytest.fixture(scope="module")
def report(saved):
    return tim_report.analyze(tim_report.load(saved), run_id="step_3")


def test_import_stays_light():
    code = "import sys, tim_report; print(sorted(m for m in ('torch', 'transformers', 'vllm', 'altair') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_to_dict_is_json(report):
    d = report.to_dict()
    assert d["run"]["id"] == "step_3" and d["samples"]
    json.loads(dumps(d))


def test_to_html_is_the_run_page(report):
    page = report.to_html(notes_md="# Why\n\nbecause <b>x</b>")
    assert page.startswith("<!DOCTYPE html>") and "step_3" in page
    assert EVIL not in page and "&lt;b&gt;x&lt;/b&gt;" in page


def test_repr_html_is_a_self_contained_iframe(report):
    out = report._repr_html_()
    m = re.fullmatch(r'<iframe title="[^"]*" srcdoc="([^"]*)" sandbox="allow-scripts" style="[^"]*"></iframe>', out, re.S)
    assert m, out[:200]
    assert "<" not in m.group(1)  # the page is fully escaped inside the attribute
    assert html.unescape(m.group(1)) == report.to_html()


def test_to_markdown(report):
    from tim_report.render.markdown import render_run_md

    md = report.to_markdown(base_url="https://example.org/site/")
    assert md == render_run_md(report, base_url="https://example.org/site/")
    assert 0 < len(md) <= 60_000 and "https://example.org/site/" in md
    assert EVIL not in md
    assert report.to_markdown() == render_run_md(report)


def test_compare_from_paths(tmp_path, saved):
    other = tmp_path / "step_4.npz"
    b = tim_report.load(saved)
    b.trainer_logp = b.rollout_logp + 0.5 * (b.trainer_logp - b.rollout_logp)
    save_batch(b, other)
    cmp = tim_report.compare(saved, other)
    d = cmp.to_dict()
    assert d["labels"] == {"before": "step_3", "after": "step_4"}
    assert d["per_token"]["available"] and d["per_token"]["counts"]["worse"] == 0
    assert cmp.to_html().startswith("<!DOCTYPE html>")
    assert cmp.to_markdown().startswith("<!-- tim-report compare -->")
    assert cmp._repr_html_().startswith("<iframe")
    out = cmp.write(tmp_path / "cmp")
    assert (out / "compare.json").is_file() and (out / "index.html").is_file()


def test_analyze_is_callable_again_after_the_analysis_package_is_imported():
    code = ("import tim_report, tim_report.analysis as m; from tim_report.testing import make_batch; "
            "b = make_batch(n_seqs=4, mean_len=10); tim_report.analyze(b); r = tim_report.analyze(b, run_id='x'); "
            "from tim_report.analysis import Thresholds; assert m.Thresholds is Thresholds is tim_report.analysis.Thresholds; "
            "print(type(r).__name__, r.run['id'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Report x"

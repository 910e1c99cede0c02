"""The HTML site: gold files, escaping, offline, size and determinism (browser checks in test_browser.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import build_site, hostile_batch

from tim_report.catalogue.metrics import BY_KEY, HEADLINE, glossary
from tim_report.catalogue.numbers import fmt
from tim_report.config import health
from tim_report.render.pages import render_notes, templates_dir
from tim_report.render.token_text import visible
from tim_report.testing import make_batch


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("html")
    return build_site(tmp, [("step7", hostile_batch()), ("step9", hostile_batch(seed=4, step=9))],
                      notes_md="## Why\nWe changed **dtype**.\n\n<script>alert('notes')</script>\n\n[x](javascript:alert(8))\n")


def test_pages_exist(site):
    assert (site / "index.html").is_file()
    for rid in ("step7", "step9"):
        assert (site / rid / "index.html").is_file()
        assert (site / rid / "summary.json").is_file()


def test_hostile_text_is_escaped(site):
    page = (site / "step7" / "index.html").read_text(encoding="utf-8")
    index = (site / "index.html").read_text(encoding="utf-8")
    for text in (page, index):
        assert "alert(1)</script>" not in text
        assert "<img src=x" not in text
        assert "<svg onload" not in text
        assert "<b>gpu</b>" not in text
        assert "<script>alert" not in text
        assert "href=\"javascript:" not in text
    assert "&lt;script&gt;alert(&#39;model&#39;)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page  # shown literally in the per-token table
    assert "{{ 7*7 }}" in page  # templates are not re-rendered
    # the only <script> elements are the spec JSON, the samples' data file, the vega bundle and the embed code
    assert len(re.findall(r"<script\b", page)) == 4
    data = (site / "step7" / "samples.js").read_text(encoding="utf-8")  # the token rows: no markup can start in it
    assert "<" not in data and ">" not in data and "\\u003cimg src=x onerror=alert(2)\\u003e" in data


def test_notes_markdown_escapes_raw_html(site):
    page = (site / "step7" / "index.html").read_text(encoding="utf-8")
    assert "<h2>Why</h2>" in page and "<strong>dtype</strong>" in page
    assert "&lt;script&gt;alert(&#39;notes&#39;)" in page or "&lt;script&gt;alert('notes')" in page
    notes = str(render_notes("<img src=x onerror=alert(1)> and [x](javascript:alert(1))"))
    assert "<img" not in notes and "javascript:" not in notes.replace("[x](javascript:", "")


def test_offline_and_one_bundle(site):
    """One copy of the chart runtime in the site; every page links it and the stylesheet by a relative path that
    resolves to a file of the site, runs no inline script, and names nothing on the network."""
    assert (site / "assets" / "vega.js").read_text(encoding="utf-8").count("window.vegaEmbed=") == 1
    assert sorted(p.name for p in (site / "assets").iterdir()) == ["style.css", "tim.js", "vega.js"]
    for page in (site / "step7" / "index.html", site / "index.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"""(?:src|href|action|poster)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
        assert not re.search(r"@import|url\(\s*['\"]?(?:https?:)?//", text, re.I)
        assert "vegaEmbed" not in text and "<style" not in text and " style=" not in text
        for tag in re.findall(r"<script\b[^>]*>", text):  # the specs are data; the code is the site's own files
            assert 'type="application/json"' in tag or re.fullmatch(r'<script src="[./a-z]+\.js">', tag), tag
        for link in re.findall(r'(?:src|href)="([^"#:]+\.(?:js|css))"', text):
            assert (page.parent / link).resolve().is_file(), link
        assert "script-src 'self'; style-src 'self'" in text and "unsafe" not in text
    assert 'src="../assets/vega.js"' in (site / "step7" / "index.html").read_text(encoding="utf-8")
    assert 'src="assets/vega.js"' in (site / "index.html").read_text(encoding="utf-8")  # a trend: two numbered steps


def test_self_contained_pages_carry_their_assets(tmp_path):
    out = build_site(tmp_path, [("a", hostile_batch()), ("b", hostile_batch(seed=5, step=8))], self_contained=True)
    assert not (out / "assets").exists()
    for page in (out / "a" / "index.html", out / "index.html"):
        text = page.read_text(encoding="utf-8")
        assert text.count("window.vegaEmbed=") == 1 and "<style>" in text and "assets/" not in text
        assert "unsafe-eval" not in text  # Vega's interpreter: no code generated at run time


def test_page_sections_and_markers(site):
    page = (site / "step7" / "index.html").read_text(encoding="utf-8")
    for anchor in ("headline", "charts", "breakdowns", "samples", "numbers", "about", "glossary", "notes"):
        assert f'id="{anchor}"' in page
    for chart in ("ratio", "abs_dp", "density", "by_probability", "by_position", "seq"):
        assert f'id="chart-{chart}"' in page
    # the token tables are drawn from samples.js (test_browser.py compares them cell for cell): the bands they mark
    assert 'data-b2="2.0" data-b5="5.0" data-hot="0.5"' in page and 'data-sample="0"' in page
    assert 'href="../index.html"' in page
    index = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="step7/index.html"' in index and 'href="step9/index.html"' in index


def test_no_timestamp_unless_asked(tmp_path):
    out = build_site(tmp_path, [("a", hostile_batch(step=None))], timestamp="2026-01-02 03:04 UTC")
    assert "built 2026-01-02 03:04 UTC" in (out / "a" / "index.html").read_text(encoding="utf-8")
    assert "vega.js" not in (out / "index.html").read_text(encoding="utf-8")  # no chart, no chart runtime


def test_deterministic(tmp_path):
    batches = [("a", hostile_batch()), ("b", hostile_batch(seed=5, step=8))]
    one = build_site(tmp_path / "1", batches)
    two = build_site(tmp_path / "2", batches)
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    # the cache key hashes the input's path (the page names it), which differs here; test_run_view compares a
    # cached build with a fresh one of the same inputs byte for byte
    files = [f for f in files if f.name != ".tim-report-cache.json"]
    for f in files:
        a = (one / f).read_bytes().replace(str(tmp_path / "1").encode(), b"TMP")
        b = (two / f).read_bytes().replace(str(tmp_path / "2").encode(), b"TMP")
        assert a == b, f


@pytest.mark.slow
def test_large_batch_page_is_small(tmp_path):
    out = build_site(tmp_path, [("big", make_batch(2000, 512))])
    size = (out / "big" / "index.html").stat().st_size
    assert size <= 1_500_000, size


def test_glossary_and_helpers():
    assert all(e.plain and e.formula for e in glossary())
    assert len({e.key for e in glossary()}) == len(glossary())
    assert all(k in BY_KEY for k in HEADLINE)
    assert health(0.995) == "green" and health(0.97) == "amber" and health(0.5) == "red" and health(None) == "unknown"
    assert BY_KEY["ess"].reading(0.2)[0] == "bad" and BY_KEY["ess"].reading(0.999)[0] == "ok"
    assert BY_KEY["kl_k3"].reading(5e-3)[0] == "ok" and BY_KEY["kl_k3"].reading(0.5)[0] == "bad"
    assert visible(" a\nb\tc\r") == "␣a↵b⇥c␍" and visible("") == "∅" and visible("\x00") == "␀"
    assert fmt(None) == "—" and fmt(0.0) == "0" and fmt(1.5e-7) == "1.5e-7" and fmt(0.99994) == "0.99994"
    assert (templates_dir() / "run.html").is_file()


def test_renders_without_diagnosis_and_with_precision_gap():
    from tim_report.analysis import analyze
    from tim_report.render.html import render_run

    b = make_batch(16, 20)
    b.shadow_logp = b.trainer_logp - 0.001
    b.meta = {"model": "m"}  # no engines, dtypes, device or loader keys
    r = analyze(b, run_id="r")
    page = render_run(r)
    assert r.diagnosis["precision_gap"]["available"]
    assert "Precision gap β (trainer vs shadow pass)" in page and "beta_share_sq" in page
    assert "unknown model" not in page and "? → ?" in page  # the model is named; the engines are not known
    r.diagnosis = {}
    page = render_run(r)
    assert "Verdict" not in page and 'id="headline"' in page


def test_every_chart_is_valid_vega_lite():
    """Charts skip Altair's validation when rendered (a second per page at 16M tokens): this checks every spec the
    run page, the index and the comparison draw against the Vega-Lite schema instead, and that the check bites."""
    import altair as alt
    from altair.utils.schemapi import validate_jsonschema
    from jsonschema import ValidationError

    from tim_report.analysis import analyze
    from tim_report.analysis.compare import compare_batches
    from tim_report.analysis.run_index import index_summary
    from tim_report.render.charts import run_charts, trend_charts
    from tim_report.render.compare.html import compare_charts

    a, b = make_batch(n_seqs=40, seed=1), make_batch(n_seqs=40, seed=2, noise=0.05)
    specs = [c["spec"] for c in run_charts(analyze(a))]
    specs += [c["spec"] for c in compare_charts(compare_batches(a, b))]
    steps = [analyze(make_batch(n_seqs=8, seed=s, noise=0.01 if s < 4 else 0.1), run_id=f"s{s}") for s in range(8)]
    for s, r in enumerate(steps):
        r.run["meta"]["step"] = s
    specs += [c["spec"] for c in trend_charts(index_summary(steps)["trend"])]
    schema = alt.VegaLiteSchema._rootschema
    assert len(specs) >= 8
    for spec in specs:
        validate_jsonschema(spec, schema)
    broken = {**specs[0], "mark": {"type": "nonsense"}}
    with pytest.raises(ValidationError):
        validate_jsonschema(broken, schema)


def test_every_sentence_states_the_thresholds_config_holds():
    """One home for every number: with config's ESS bands, veto, hot-diff and the readings' bands (median |δ|,
    outside 2x / 5x, phantom clipping) changed (in a fresh interpreter, before anything reads them), the glossary,
    the run page and report.md state the new values."""
    import subprocess
    import sys

    code = """
import json, tim_report.config as c
c.HEALTH = c.HealthBands(green=0.987, amber=0.931); c.VETO = 3.3e-5; c.HOT_DIFF = 0.77
c.MEDIAN_ABS_DELTA_NOISE = 0.0234; c.MEDIAN_ABS_DELTA_LARGE = 0.61; c.OUTSIDE_2X_FEW = 0.0023
c.OUTSIDE_5X_FEW = 0.00037; c.PHANTOM_CLIP_MANY = 0.17
from tim_report.catalogue.metrics import glossary
from tim_report.analysis import analyze
from tim_report.testing import make_batch
from tim_report.render.markdown import render_run_md
from tim_report.render.html import render_run
r = analyze(make_batch(n_seqs=20, seed=1), run_id="x")
texts = {"glossary": json.dumps([vars(e) for e in glossary()], ensure_ascii=False, default=str), "md": render_run_md(r),
         "html": render_run(r)}
print(json.dumps({k: [v in t for v in ("0.987", "0.931", "3.3e-5", "0.77")] for k, t in texts.items()}))
sentences = " ".join(band.text for e in glossary() for band in e.readings)
print(json.dumps([v in sentences for v in ("0.0234 nats", "0.61 nats", "0.23%", "0.037%", "17%")]
                 + ["below 0.0234 nats" in texts[k] for k in ("md", "html")]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    import json

    found, readings = (json.loads(line) for line in out.strip().splitlines()[-2:])
    assert found["glossary"][:3] == [True, True, True]
    assert all(found["md"]) and all(found["html"]), found
    # the sentences beside the headline numbers state the bands they apply; this batch's median |δ| is noise,
    # and its reading on the page and in report.md states the noise band's edge
    assert all(readings), readings


def test_the_shipped_vega_bundle_is_what_vl_convert_builds():
    """Pages inline tim_report/render/vega-bundle.js; it must be the bundle of the installed vl-convert (whose Vega-Lite
    matches Altair's specs). On a vl-convert or Altair upgrade: python scripts/vendor_vega.py."""
    import runpy

    from tim_report.render.vega import javascript_bundle

    script = runpy.run_path(str(Path(__file__).resolve().parent.parent / "scripts" / "vendor_vega.py"))
    assert javascript_bundle() == script["bundle"](), "stale bundle: run python scripts/vendor_vega.py"
    assert "</script" not in javascript_bundle().lower()


def test_the_shipped_compiled_templates_are_those_of_the_templates():
    """Every process renders from templates/compiled.json instead of compiling the templates (render/precompiled.py);
    after a template changes: python scripts/compile_templates.py."""
    import runpy

    from tim_report.render.pages import environment
    from tim_report.render.precompiled import STORE

    script = runpy.run_path(str(Path(__file__).resolve().parent.parent / "scripts" / "compile_templates.py"))
    assert STORE.read_text(encoding="utf-8") == script["store_text"](), "stale: run python scripts/compile_templates.py"
    assert set(environment().bytecode_cache.templates) == {p.name for p in templates_dir().glob("*.html")}


def test_a_template_whose_compiled_entry_is_stale_is_compiled_from_its_source(tmp_path):
    """An entry is used only for the source it was made from: an edited template (or another Jinja2) renders what its
    source says, never the shipped code; and rendering writes nothing beside the templates (a read-only install)."""
    import json

    from jinja2 import Environment, FileSystemLoader

    from tim_report.render.precompiled import Precompiled, compiled

    (tmp_path / "t.html").write_text("old {{ x }}", encoding="utf-8")
    env = Environment(loader=FileSystemLoader(str(tmp_path)), autoescape=True)
    store = tmp_path / "compiled.json"
    store.write_text(json.dumps(compiled(env)), encoding="utf-8")
    (tmp_path / "t.html").write_text("new {{ x }}", encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    env = Environment(loader=FileSystemLoader(str(tmp_path)), autoescape=True, bytecode_cache=None)
    env.bytecode_cache = Precompiled(env, store)
    assert env.get_template("t.html").render(x="<b>") == "new &lt;b&gt;"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    (tmp_path / "t.html").write_text("old {{ x }}", encoding="utf-8")
    env = Environment(loader=FileSystemLoader(str(tmp_path)), autoescape=True)
    env.bytecode_cache = Precompiled(env, store)
    marked = json.loads(store.read_text(encoding="utf-8"))
    marked["templates"]["t.html"]["python"] = marked["templates"]["t.html"]["python"].replace("'old '", "'shipped '")
    store.write_text(json.dumps(marked), encoding="utf-8")
    env.bytecode_cache = Precompiled(env, store)
    assert env.get_template("t.html").render(x=1) == "shipped 1"  # the matching entry is what renders
    marked["settings"][0] = "0.0"  # made by another Jinja2
    store.write_text(json.dumps(marked), encoding="utf-8")
    env = Environment(loader=FileSystemLoader(str(tmp_path)), autoescape=True)
    env.bytecode_cache = Precompiled(env, store)
    assert env.get_template("t.html").render(x=1) == "old 1"


def test_one_kl_band_table_on_the_page_the_glossary_and_the_index(tmp_path):
    """The page, the glossary and the index stated different 'normal' KL k3 bands (4e-4 to 1e-2 against 1e-5 to 1e-2):
    now every place reads the one table generated from config.PUBLISHED_BANDS."""
    from tim_report.catalogue.metrics import KL_BANDS, metric
    from tim_report.config import PUBLISHED_BANDS
    from tim_report.testing import make_batch

    out = build_site(tmp_path, [("a", make_batch(8, 32, seed=1)), ("b", make_batch(8, 32, seed=2))])
    pages = {p: (out / p).read_text(encoding="utf-8") for p in ("a/index.html", "a/report.md", "index.html", "report.md")}
    dense = PUBLISHED_BANDS[("dense", "bf16")]
    assert [name for name, _, _ in KL_BANDS] == [b.name for b in PUBLISHED_BANDS.values()]
    for name, text in pages.items():
        assert "KL band table" in text, name
        for band, lo, hi in KL_BANDS:
            assert f"{band}" in text and f"{lo} to {hi}" in text, (name, band)
        assert "4e-4 to 1e-2" not in text, name  # the second 'normal' band is gone
    assert "1e-5 to 1e-2" in metric("kl_k3").plain and dense.kl_k3 == (1e-5, 1e-2)
    assert "within the published dense bf16 band (1e-5 to 1e-2)" in metric("kl_k3").reading(3e-3)[1]

"""The HTML site: gold files, escaping, offline, size and determinism (browser checks in test_browser.py)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import numpy as np
import pytest

from tim_report.batch import StepBatch
from tim_report.glossary import BY_KEY, GLOSSARY, health, reading
from tim_report.render.html import HEADLINE, fmt, render_notes, templates_dir
from tim_report.render.tokens import visible
from tim_report.site import BuildOptions, build
from tim_report.testing import make_batch

GOLD = Path(__file__).parent / "gold"
HOSTILE = [
    "</script><script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    "\"><svg onload=alert(3)>",
    "'; alert(4); '",
    "{{ 7*7 }}",
    "<!--",
    "]]></style><script>alert(5)</script>",
    "javascript:alert(6)",
]


def hostile_batch(n_seqs: int = 12, mean_len: int = 24, seed: int = 3, step: int | None = 7) -> StepBatch:
    """A small batch whose token text, prompts, group names and meta carry script-injection attempts."""
    b = make_batch(n_seqs=n_seqs, mean_len=mean_len, seed=seed)
    plain = [" the", "\n", "\t", "x", "", " ", "é", "\u200b"]
    text = [HOSTILE[i % len(HOSTILE)] if i % 5 == 0 else plain[i % len(plain)] for i in range(b.n_tokens)]
    b.token_text = text
    b.prompt_text = [f"Prompt {i}: {HOSTILE[i % len(HOSTILE)]}" for i in range(b.n_seqs)]
    b.group = np.array([HOSTILE[int(g) % len(HOSTILE)] + f"#{g}" for g in b.group], dtype=str)
    b.trainer_logp = b.trainer_logp.copy()
    b.trainer_logp[3] = b.rollout_logp[3] - 2.5  # one token far outside [1/5, 5] and |diff| > 0.5
    b.trainer_logp = np.minimum(b.trainer_logp, 0.0)
    b.meta = {**b.meta, "model": "<script>alert('model')</script>", "rollout_engine": "vllm<img src=x onerror=alert(7)>",
              "trainer_engine": "fsdp", "device": "cpu & <b>gpu</b>"}
    if step is not None:
        b.meta["step"] = step
    return b


def build_site(tmp: Path, batches: list[tuple[str, StepBatch]], **opts) -> Path:
    paths = []
    for name, b in batches:
        p = tmp / "in" / f"{name}.npz"
        p.parent.mkdir(parents=True, exist_ok=True)
        b.save(p)
        paths.append(p)
    out = tmp / "site"
    build(paths, out, BuildOptions(**opts))
    return out


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
    # the only <script> elements are the spec JSON, the vega bundle and the embed code
    assert len(re.findall(r"<script\b", page)) == 3


def test_notes_markdown_escapes_raw_html(site):
    page = (site / "step7" / "index.html").read_text(encoding="utf-8")
    assert "<h2>Why</h2>" in page and "<strong>dtype</strong>" in page
    assert "&lt;script&gt;alert(&#39;notes&#39;)" in page or "&lt;script&gt;alert('notes')" in page
    notes = str(render_notes("<img src=x onerror=alert(1)> and [x](javascript:alert(1))"))
    assert "<img" not in notes and "javascript:" not in notes.replace("[x](javascript:", "")


def test_offline_and_one_bundle(site):
    for page in (site / "step7" / "index.html", site / "index.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"""(?:src|href|action|poster)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
        assert not re.search(r"@import|url\(\s*['\"]?(?:https?:)?//", text, re.I)
        assert text.count("window.vegaEmbed=") == 1  # index has a trend chart: two numbered steps


def test_page_sections_and_markers(site):
    page = (site / "step7" / "index.html").read_text(encoding="utf-8")
    for anchor in ("headline", "charts", "breakdowns", "samples", "numbers", "about", "glossary", "notes"):
        assert f'id="{anchor}"' in page
    for chart in ("ratio", "abs_dp", "density", "by_probability", "by_position", "seq"):
        assert f'id="chart-{chart}"' in page
    assert 'class="hot"' in page and "●" in page  # |diff| > 0.5 row marked by colour and symbol
    assert 'class="o5"' in page and "▼" in page
    assert "␣the" in page and "↵" in page and "⇥" in page
    assert 'href="../index.html"' in page
    index = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="step7/index.html"' in index and 'href="step9/index.html"' in index


def test_no_timestamp_unless_asked(tmp_path):
    out = build_site(tmp_path, [("a", hostile_batch(step=None))], timestamp="2026-01-02 03:04 UTC")
    assert "built 2026-01-02 03:04 UTC" in (out / "a" / "index.html").read_text(encoding="utf-8")
    assert "vegaEmbed" not in (out / "index.html").read_text(encoding="utf-8")  # no chart, no bundle


def test_deterministic(tmp_path):
    batches = [("a", hostile_batch()), ("b", hostile_batch(seed=5, step=8))]
    one = build_site(tmp_path / "1", batches)
    two = build_site(tmp_path / "2", batches)
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
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
    assert all({"key", "name", "plain", "formula", "verl"} <= set(e) for e in GLOSSARY)
    assert len({e["key"] for e in GLOSSARY}) == len(GLOSSARY)
    assert all(k in BY_KEY for k in HEADLINE)
    assert health(0.995) == "green" and health(0.97) == "amber" and health(0.5) == "red" and health(None) == "unknown"
    assert reading("ess", 0.2)[0] == "bad" and reading("ess", 0.999)[0] == "ok"
    assert reading("kl_k3", 5e-3)[0] == "ok" and reading("kl_k3", 0.5)[0] == "bad"
    assert visible(" a\nb\tc\r") == "␣a↵b⇥c␍" and visible("") == "∅" and visible("\x00") == "␀"
    assert fmt(None) == "—" and fmt(0.0) == "0" and fmt(1.5e-7) == "1.5e-7" and fmt(0.99994) == "0.99994"
    assert (templates_dir() / "run.html").is_file()


# ---- gold files (coverage.py's way): scrub volatile parts, refresh with --update-gold -------------

def scrub(html: str, tmp: Path) -> str:
    html = html.replace(str(tmp), "TMP")
    html = re.sub(r'(<script>\n).*?(\n</script>\n<script>\n\(function)', r"\1/* vega bundle */\2", html, flags=re.S)
    html = re.sub(r'content="tim-report [^"]*"', 'content="tim-report VERSION"', html)
    html = re.sub(r"Made by tim-report \S+?(?=[,.]\s)", "Made by tim-report VERSION", html)
    html = re.sub(r"<style>\n.*?</style>", "<style>/* templates/style.css */</style>", html, flags=re.S)
    return html


def compare_gold(actual: str, name: str, update: bool) -> None:
    path = GOLD / name
    if update or not path.exists():
        GOLD.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        if not update:
            pytest.skip(f"wrote new gold file {path}")
        return
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), f"gold/{name}", "actual", n=2))
        pytest.fail(f"{name} differs from its gold file (refresh with pytest --update-gold):\n{diff[:20000]}")


def test_gold(tmp_path, request):
    b = make_batch(n_seqs=6, mean_len=12, noise=0.05, seed=11, group_size=2)
    b.token_text = [("␣" if i % 7 == 0 else "") + f" t{i}" + ("\n" if i % 11 == 0 else "") for i in range(b.n_tokens)]
    b.meta = {**b.meta, "step": 3, "model": "gold-model"}
    out = build_site(tmp_path, [("gold", b)])
    update = request.config.getoption("--update-gold", default=False)
    compare_gold(scrub((out / "gold" / "index.html").read_text(encoding="utf-8"), tmp_path), "run.html", update)
    compare_gold(scrub((out / "index.html").read_text(encoding="utf-8"), tmp_path), "index.html", update)


def test_renders_without_diagnosis_and_with_precision_gap():
    from tim_report.analysis import analyze
    from tim_report.render.html import render_run

    b = make_batch(16, 20)
    b.shadow_logp = b.trainer_logp - 0.001
    b.meta = {"model": "m"}  # no engines, dtypes, device or loader keys
    r = analyze(b, run_id="r")
    page = render_run(r)
    if r.diagnosis and r.diagnosis.get("precision_gap"):
        assert "Precision gap" in page
    r.diagnosis = None
    page = render_run(r)
    assert "Verdict" not in page and 'id="headline"' in page

"""The markdown reports: GFM validity, escaping, the 60,000-character budget, links, --format and --base-url."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import GFM, build_site, check_gfm, hostile_batch, walk

from tim_report.analysis import analyze
from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.render import md as mdr
from tim_report.render.markdown import render_index_md, render_run_md
from tim_report.render.md import esc
from tim_report.testing import make_batch


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("md")
    return build_site(tmp, [("step7", hostile_batch()), ("step9", hostile_batch(seed=4, step=9))])


def test_files_and_sections(site):
    run = (site / "step7" / "report.md").read_text(encoding="utf-8")
    index = (site / "report.md").read_text(encoding="utf-8")
    for text in (run, index):
        check_gfm(text)
        assert len(text) <= mdr.MAX_CHARS
    assert run.startswith("# ")
    heads = re.findall(r"^## (.*)$", run, flags=re.M)
    assert heads[0].startswith("Verdict") and heads[1] == "Summary" and "<summary>Findings</summary>" in run  # the
    # verdict and the headline numbers open it; the rest is folded (issue 44: a PR comment reads on one screen)
    assert "<summary>Glossary</summary>" in run and "**KL k3**" in run  # the glossary from the catalogue, collapsed
    assert "[HTML report](index.html)" in run
    assert "## Runs" in index and "## Engine pairs" in index and "## Over training steps" in index
    assert "## Precision matrix" not in index  # one dtype pair only


def test_hostile_text_is_inert(site):
    run = (site / "step7" / "report.md").read_text(encoding="utf-8")
    index = (site / "report.md").read_text(encoding="utf-8")
    for text in (run, index):
        tokens = check_gfm(text)
        rendered = GFM.render(text)
        assert "<script>" not in rendered and "<img" not in rendered and "<svg" not in rendered
        assert "&lt;script&gt;alert('model')&lt;/script&gt;" in text  # shown as text, not dropped
        assert not any(t.type == "link_open" and "javascript" in t.attrs["href"] for t in walk(tokens))


def test_escape_keeps_cells_whole():
    nasty = "a|b`c`\n<script>x</script> *y* _z_ [l](javascript:1) ![i](data:x) #1 @me $x$ style=\"c\""
    row = mdr.table(["name", "n"], [[esc(nasty), "1"]])
    tokens = check_gfm(row)
    cells = [t for t in walk(tokens) if t.type == "text"]
    assert any("a|b`c`↵<script>x</script>" in c.content for c in cells)  # literal, in one cell
    assert sum(1 for t in tokens if t.type == "td_open") == 2
    assert esc(None) == "—" and esc("") == "∅" and esc("x" * 500).endswith("…") and len(esc("x" * 500)) == mdr.NAME_CHARS


def adversarial_batch():
    """Thousands of groups with names that try to break tables and open markup; 5,000-character tokens."""
    b = make_batch(n_seqs=3000, mean_len=6, noise=0.3, seed=2, group_size=1)
    evil = ["|x|", "`tick`", "<script>alert(1)</script>", "a\nb", "| --- |", "<b style=\"c\" class=\"d\">",
            "![i](data:image/png;base64,AA)"]
    b.group = np.array([evil[i % len(evil)] + f"{i}" + "y" * 200 for i in range(b.n_seqs)], dtype=object).astype(str)
    b.token_text = [("<script>" + "w" * 5000 + "|`") if i % 3 == 0 else evil[i % len(evil)] for i in range(b.n_tokens)]
    b.meta = {**b.meta, "model": "m|" * 3000, "rollout_engine": "<script>e</script>", "device": "d\n|x"}
    return b


def test_adversarial_batch_fits_and_stays_valid(monkeypatch):
    report = analyze(adversarial_batch())
    text = render_run_md(report)
    assert mdr.width(text) <= mdr.MAX_CHARS
    check_gfm(text)
    assert "## Verdict" in text and "## Summary" in text
    # a smaller budget drops whole sections from the bottom up and says so, with the HTML link
    monkeypatch.setattr(mdr, "MAX_CHARS", 9000)
    small = render_run_md(report, base_url="https://example.org/site")
    assert mdr.width(small) <= 9000
    check_gfm(small)
    assert "## Verdict" in small and "## Summary" in small
    note = re.search(r"Left out to stay under 9,000 characters: (.*)\. Everything is in the \[HTML report\]\(([^)]*)\)", small)
    assert note and note.group(2) == "https://example.org/site/run/index.html"
    dropped = note.group(1).split(", ")
    assert dropped[-1] == "glossary" and "Glossary" not in small
    # a budget below the core still never exceeds it and keeps the markup balanced
    monkeypatch.setattr(mdr, "MAX_CHARS", 1500)
    tiny = render_run_md(report)
    assert mdr.width(tiny) <= 1500 and "Everything is in the [HTML report](index.html)" in tiny
    check_gfm(tiny)


def test_budget_drops_bottom_first():
    text = mdr.assemble(["# t", "core"], [("a", "A" * 100), ("b", "B" * 100), ("c", "C" * 100)], "[HTML](x)", limit=250)
    assert "A" * 100 in text and "B" * 100 not in text and "C" * 100 not in text
    assert "Left out to stay under 250 characters: b, c." in text and len(text) <= 250


def test_deterministic_and_render_is_pure():
    b = hostile_batch()
    r1, r2 = analyze(b, run_id="x"), analyze(b, run_id="x")
    assert render_run_md(r1) == render_run_md(r2)
    from tim_report.analysis.run_index import index_summary

    assert render_index_md(index_summary([r1])) == render_index_md(index_summary([r2]))


def test_format_md_only_and_base_url(tmp_path):
    paths = []
    for i, step in enumerate((3, 8)):
        p = tmp_path / f"global_step_{step}.npz"
        save_batch(make_batch(n_seqs=8, mean_len=10, seed=i), p)
        paths.append(str(p))
    out = tmp_path / "site"
    res = CliRunner().invoke(main, ["build", *paths, "-o", str(out), "--format", "md", "--base-url", "https://u.github.io/r/"])
    assert res.exit_code == 0, res.output
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != ".tim-report-cache.json")
    assert files == [".tim-report.json", ".tim-report.lock", "global_step_3/report.md", "global_step_8/report.md",
                     "index.json", "report.md"]
    index = (out / "report.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)]*)\)", index)
    assert links and all(u.startswith("https://u.github.io/r/") for u in links)
    assert "https://u.github.io/r/global_step_8/index.html" in links
    run = (out / "global_step_3" / "report.md").read_text(encoding="utf-8")
    assert all(u.startswith("https://u.github.io/r/global_step_3/") for u in re.findall(r"\]\(([^)]*)\)", run))

    out2 = tmp_path / "site2"
    res = CliRunner().invoke(main, ["build", *paths, "-o", str(out2), "--format", "json", "--format", "html"])
    assert res.exit_code == 0, res.output
    assert not list(out2.rglob("*.md")) and (out2 / "index.html").is_file() and (out2 / "global_step_3" / "summary.json").is_file()


def test_relative_links_resolve(site):
    index = (site / "report.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)]*)\)", index)
    assert "step7/index.html" in links and "step9/report.md" in links
    for link in links:
        assert (site / link).is_file(), link
    for rid in ("step7", "step9"):
        run = (site / rid / "report.md").read_text(encoding="utf-8")
        for link in re.findall(r"\]\(([^)]*)\)", run):
            assert (site / rid / link).is_file(), link


def cmark_gfm(text: str) -> str:
    """GitHub's own renderer (Debian's cmark-gfm), with the extensions GitHub turns on."""
    import shutil
    import subprocess

    exe = shutil.which("cmark-gfm")
    if exe is None:
        from helpers import skip_or_fail

        skip_or_fail("cmark-gfm is not installed (apt-get install cmark-gfm)")
    return subprocess.run([exe, "-e", "table", "-e", "strikethrough", "-e", "autolink", "-e", "tagfilter", "--unsafe"],
                          input=text, capture_output=True, text=True, check=True).stdout


def test_githubs_renderer_sees_the_tables_and_nothing_unsafe(site, tmp_path):
    from html.parser import HTMLParser

    from tim_report.analysis.compare import compare_batches
    from tim_report.render.compare.markdown import render_compare_md

    class Tags(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.attrs, self.rows = [], [], []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
            self.attrs += [a for a, _ in attrs]
            if tag == "tr":
                self.rows.append(0)
            if tag in ("td", "th") and self.rows:
                self.rows[-1] += 1

    a, b = hostile_batch(), hostile_batch(seed=4)
    texts = [(site / "step7" / "report.md").read_text(), (site / "report.md").read_text(),
             render_compare_md(compare_batches(a, b, labels=("<b>old|x</b>", "new")))]
    for text in texts:
        html = cmark_gfm(text)
        tags = Tags()
        tags.feed(html)
        assert tags.tags.count("table") == sum(1 for t in GFM.parse(text) if t.type == "table_open") > 0
        assert set(tags.tags) <= {"h1", "h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td", "a", "strong", "em",
                                  "code", "ul", "li", "details", "summary", "blockquote", "br"}, set(tags.tags)
        assert set(tags.attrs) <= {"href", "align"}, set(tags.attrs)
        assert "<script" not in html and not re.search(r'href="\s*(javascript|data|vbscript):', html, re.I)


LINK_BAIT = ["www.evil-example.com/login", "WWW.evil-example.com", "admin@evil-example.com", "_www.evil-example.com",
             "(www.evil-example.com)", "https://evil-example.com/x", "mailto:a@evil-example.com"]


def test_names_and_tokens_never_become_links_under_gfm_autolinks(tmp_path):
    """GitHub's extended autolinks turn `www.host` and `user@host` in plain text into links: a model name or a token
    in a PR comment must not (issue 24). Checked with GitHub's own renderer."""
    from tim_report.analysis.compare import compare_batches
    from tim_report.render.compare.markdown import render_compare_md

    b = make_batch(n_seqs=10, mean_len=20, seed=5)
    b.token_text = [LINK_BAIT[i % len(LINK_BAIT)] for i in range(b.n_tokens)]
    b.group = np.array([LINK_BAIT[int(g) % len(LINK_BAIT)] for g in b.group], dtype=str)
    b.meta = {**b.meta, "model": LINK_BAIT[0], "rollout_engine": LINK_BAIT[2], "trainer_engine": LINK_BAIT[1],
              "device": LINK_BAIT[4], "step": 3}
    b.trainer_logp = np.minimum(b.trainer_logp - np.where(np.arange(b.n_tokens) % 7 == 0, 2.0, 0.0), 0.0)
    site = build_site(tmp_path, [("www.evil-example.com", b)])
    texts = [(site / "www.evil-example.com" / "report.md").read_text(), (site / "report.md").read_text(),
             render_compare_md(compare_batches(b, b, labels=(LINK_BAIT[0], LINK_BAIT[2])))]
    for text in texts:
        assert "www.evil-example.com/login" in text.replace("\\", "")  # the name is there, shown as text
        html = cmark_gfm(text)
        hrefs = re.findall(r'href="([^"]*)"', html)
        bad = [h for h in hrefs if re.match(r"(?i)(https?:|mailto:|xmpp:|//)", h) or "@" in h]  # relative: our own pages
        assert not bad, bad

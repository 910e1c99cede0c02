"""One view model per table, two writers: each index section is built once (render/index_views.py) and the HTML
index and report.md show the same title, intro sentence and cells from it."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser

import numpy as np
from helpers import GFM, build_site
from markupsafe import escape

from tim_report.analysis.run_index import index_from_rows
from tim_report.render import index_views
from tim_report.render.md import esc, write_section
from tim_report.render.pages import code_spans, environment
from tim_report.render.tables import HTML, MARKDOWN, Cell, Column, Row, Section, Table
from tim_report.testing import make_batch


def read_index(path):
    return index_from_rows(json.loads(path.read_text("utf-8"))["runs"])


def _macro(name: str):
    return getattr(environment().get_template("_table.html").module, name)


def test_one_cell_says_what_it_is_and_each_format_shows_it_its_way():
    cols = (Column("health"), Column("run"), Column("KL k3", numeric=True, wrap=True), Column("device", formats=frozenset({HTML})),
            Column("routing"))
    row = Row((Cell(health="amber"), Cell("a_b", link="a b", twin=True, cls="id"), Cell("0.01", note="(step 3)"),
               Cell("m", note="gpu", note_below=True), Cell("fix the bug first", icon="❌", style="route quarantine")))
    warned = Row((Cell(health="red"), Cell("c"), Cell("7", warn="⚠ 2 excluded", tip="why"), Cell(""), Cell("1 / 0 / 0", tip="t")))
    s = Section("s", "title", "Title", "Intro with `--a-flag` and it's ours.", (Table(cols, (row, warned), cls="x"),),
                warning=(("2 runs (", True), ("<b>_x_</b>", False), (") say `--meta`.", True)))
    page = str(_macro("section")(s))
    assert '<table class="data x">' in page and '<th class="n wrap">KL k3' in page and "<th>device" in page
    assert '<span class="badge amber">! amber</span>' in page and '<a href="a%20b/index.html">a_b</a>' in page
    assert '<td class="n">0.01 <span class="small">(step 3)</span>' in page and "m<br><span class=\"small\">gpu</span>" in page
    assert '<span class="route quarantine">fix the bug first</span>' in page and "❌" not in page
    assert '7<br><span class="warntext" title="why">⚠ 2 excluded</span>' in page and '<td title="t">1 / 0 / 0' in page
    assert str(code_spans(s.intro)) in page and "&lt;b&gt;_x_&lt;/b&gt;" in page and "<code>--meta</code>" in page
    md = write_section(s)
    assert md.startswith("## Title\n\nIntro with `--a-flag` and it's ours.\n\n| health | run | KL k3 | routing |")
    assert "| 🟡 amber | [a\\_b](a%20b/index.html) ([md](a%20b/report.md)) | 0.01 (step 3) | ❌ fix the bug first |" in md
    assert "| 🔴 red | c | 7 | 1 / 0 / 0 |" in md and "gpu" not in md and "excluded" not in md
    assert md.endswith("⚠️ 2 runs (&lt;b&gt;\\_x\\_&lt;/b&gt;) say `--meta`.")


def _site(tmp_path):
    runs = []
    for i, (ro, tr) in enumerate((("bf16", "fp32"), ("bf16", "fp32"), ("fp16", "fp16"))):
        b = make_batch(n_seqs=4, mean_len=8, seed=i)
        b.meta = {**b.meta, "rollout_engine": "vllm", "rollout_dtype": ro, "trainer_engine": "fsdp", "trainer_dtype": tr,
                  "step": i}
        runs.append((f"step_{i}", b))
    plain = make_batch(n_seqs=4, mean_len=8, seed=9)
    plain.meta = {k: v for k, v in plain.meta.items() if "engine" not in k and "dtype" not in k}
    return build_site(tmp_path, [*runs, ("plain", plain)])


def test_each_index_section_says_the_same_in_html_and_markdown(tmp_path):
    out = _site(tmp_path)
    index = read_index(out / "index.json")
    page, md = (out / "index.html").read_text("utf-8"), (out / "report.md").read_text("utf-8")
    sections = [index_views.pairs_section(index), index_views.precision_section(index), index_views.trend_section(index)]
    assert all(sections)
    for s in sections:
        assert f"<h2>{s.title}</h2>" in page and f"## {s.title}" in md
        assert str(code_spans(s.intro)) in page and esc(s.intro, None, own=True) in md
        for t in s.tables[:1]:
            for c in t.columns_in(MARKDOWN):
                assert f"| {esc(c.header, None, own=True)} |" in md or f"| {esc(c.header, None, own=True)} " in md
            for c in t.columns_in(HTML):
                assert f">{escape(c.header)}" in page or s.id == "trend"  # the trend's columns are the HTML's charts
    trend = index_views.trend_section(index)
    assert trend.quiet_small and html.unescape(str(escape(trend.quiet))) in page and trend.quiet in md
    pairs = index_views.pairs_section(index)
    assert "plain" in "".join(t for t, _ in pairs.warning)
    assert "1 run (plain) does not name its engines" in md and "1 run (plain) does not name its engines" in page


def test_a_column_one_format_leaves_out_is_not_in_its_table(tmp_path):
    index = read_index(_site(tmp_path) / "index.json")
    runs = index_views.runs_table(index)
    html_headers = [c.header for c in runs.columns_in(HTML)]
    md_headers = [c.header for c in runs.columns_in(MARKDOWN)]
    assert html_headers[:3] == ["health", "run", "verdict"] == md_headers[:3] and len(md_headers) <= 10  # a PR comment's
    assert "model, device" in html_headers and "model, device" not in md_headers and "dtypes" not in html_headers


def test_a_new_index_table_is_one_view_model(tmp_path, monkeypatch):
    """The extension point: a throwaway section added to index_views.sections() reaches the HTML index (its contents
    list, heading, intro, table and links) and report.md, with no template or writer touched."""
    cols = (Column("run"), Column("tokens", numeric=True))
    extra = Section("extra", "extra table", "Extra table", "Made up for `the test`.",
                    (Table(cols, (Row((Cell("r_1", link="r_1"), Cell("12"))),)),))
    original = index_views.sections
    monkeypatch.setattr(index_views, "sections", lambda index: [*original(index), extra])
    out = _site(tmp_path)
    page, md = (out / "index.html").read_text("utf-8"), (out / "report.md").read_text("utf-8")
    assert '<li><a href="#extra">extra table</a>' in page and '<section id="extra">\n<h2>Extra table</h2>' in page
    assert "<code>the test</code>" in page and '<td><a href="r_1/index.html">r_1</a><td class="n">12</tr>' in page
    assert "## Extra table\n\nMade up for `the test`.\n\n| run | tokens |\n|---|---:|\n| [r\\_1](r_1/index.html) | 12 |" in md


def topk_batch():
    """A batch with both sides' top-4 log-probs (as `capture` records by default): the sampled token first, the rest of
    the mass spread over three other ids."""
    b = make_batch(n_seqs=12, mean_len=16, seed=3)
    rng = np.random.default_rng(3)
    t = b.n_tokens
    ids = np.column_stack([b.token_ids, rng.integers(2048, 4096, (t, 3))]).astype(np.int32)
    split = np.log([0.5, 0.25, 0.125])

    def topk(logp):
        rest = np.log1p(-np.exp(np.minimum(logp, -1e-6)))[:, None] + split
        return np.column_stack([logp, rest]).astype(np.float32)

    b.rollout_topk_ids, b.rollout_topk_logp = ids, topk(b.rollout_logp)
    b.trainer_topk_ids, b.trainer_topk_logp = ids.copy(), topk(b.trainer_logp)
    return b


class _Headers(HTMLParser):
    """The first row of every <table>: its <th> texts, whitespace collapsed (a cell may go unclosed, as HTML allows)."""

    def __init__(self):
        super().__init__()
        self.tables, self._cell, self._rows = [], None, 0

    def _close(self):
        if self._cell is not None:
            self.tables[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_starttag(self, tag, attrs):
        if tag in ("th", "td", "tr", "table"):
            self._close()
        if tag == "table":
            self.tables.append([])
            self._rows = 0
        elif tag == "tr":
            self._rows += 1
        elif tag == "th" and self._rows == 1:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("th", "tr", "thead", "table"):
            self._close()

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def table_headers(page: str) -> list[tuple[str, ...]]:
    parser = _Headers()
    parser.feed(page)
    return [tuple(t) for t in parser.tables if t]


# report.md's tables whose columns the page words its own way
PAGE_WORDING = {("metric", "value"): ("metric", "value ± s.e."), ("verl metric", "value"): ("verl name", "value")}


def drawn_otherwise(header: tuple[str, ...], page: str) -> bool:
    """The tables the page shows in another form: the headline and top-k numbers as cards, the sampled sequences' tokens
    drawn by the page's script from samples.js."""
    if header == ("metric", "value", "reading"):
        return 'class="card' in page
    return header[:3] == ("pos", "", "token") and 'id="samples"' in page and "samples.js" in page


def test_every_table_of_report_md_is_on_the_html_page():
    """report.md's tables (rendered as GitHub does) each appear on the run page with the same columns, on a batch with
    top-k log-probs, whose two tables by rollout probability (|δ| and the whole distribution's KL) once shared a key."""
    from tim_report.analysis import analyze
    from tim_report.render import render

    report = analyze(topk_batch())
    assert report.topk["available"]
    files = render("run", report, ("html", "md"))
    on_page = table_headers(files["index.html"])
    in_md = table_headers(GFM.render(files["report.md"]))
    assert len(in_md) >= 5
    missing = [h for h in in_md if PAGE_WORDING.get(h, h) not in on_page and not drawn_otherwise(h, files["index.html"])]
    assert not missing, missing
    by_probability = [h for h in on_page if h[0] == "p_rollout"]
    assert len(by_probability) == 2 and by_probability[0] != by_probability[1]  # |δ| by probability, and the top-k one

"""The site in a real browser: Playwright (pip) driving Debian's chromium, opened from file://.

Needs `/usr/bin/chromium` (apt-get install chromium); never `playwright install`. Set TIM_REPORT_CHROMIUM
to use another binary.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import HOSTILE, build_site, hostile_batch, read_samples, skip_or_fail

from tim_report.catalogue.metrics import TREND, metric
from tim_report.io import load

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = os.environ.get("TIM_REPORT_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        skip_or_fail(f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        skip_or_fail("playwright is not installed (part of the test extra)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("browser")
    return build_site(tmp, [("step7", hostile_batch()), ("step9", hostile_batch(seed=4, step=9))],
                      notes_md="Notes with <script>alert('notes')</script> and <img src=x onerror=alert(9)>.")


def open_page(browser, path: Path, scheme: str = "light", width: int = 1300):
    page = browser.new_page(color_scheme=scheme, viewport={"width": width, "height": 900})
    seen = {"errors": [], "requests": [], "dialogs": [], "failed": {}, "routed": []}

    def refuse(route):  # anything but a file: the test fails on it (and the page never gets it)
        seen["routed"].append(route.request.url)
        route.abort()

    page.route(lambda url: not url.startswith("file:"), refuse)
    page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.on("requestfailed", lambda r: seen["failed"].__setitem__(r.url, r.failure))

    def on_dialog(d):
        seen["dialogs"].append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)
    page.goto(path.as_uri())
    n = page.locator(".vega").count()
    if n:
        page.wait_for_function(
            "() => [...document.querySelectorAll('.vega')].every(el => el.querySelector('svg, canvas'))", timeout=20000)
    return page, seen, n


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_run_page_draws_every_chart_offline(browser, site, scheme):
    page, seen, n = open_page(browser, site / "step7" / "index.html", scheme)
    assert n == 6
    assert page.locator(".vega svg").count() == n
    assert page.locator(".vega svg .mark-rect path, .vega svg .mark-rect rect, .vega svg path").count() > 0
    assert seen["errors"] == []
    assert seen["dialogs"] == []
    assert sorted(seen["requests"]) == sorted((site / p).as_uri() for p in (
        "step7/index.html", "step7/samples.js", "assets/style.css", "assets/vega.js", "assets/tim.js"))  # its own
    assert seen["routed"] == []
    page.close()


def test_hostile_text_shows_literally_and_runs_nothing(browser, site):
    page, seen, _ = open_page(browser, site / "step7" / "index.html")
    page.wait_for_timeout(300)
    assert seen["dialogs"] == []
    text = page.inner_text("body")
    assert "<script>alert('model')</script>" in text  # model name in the title
    assert "<img src=x onerror=alert(2)>" in text  # a token in a per-token table
    assert any(h in text for h in HOSTILE[:3])
    assert "<script>alert('notes')</script>" in text  # notes: raw HTML escaped, shown literally
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.querySelectorAll('script').length") == 4  # the specs (JSON), samples.js, vega.js, tim.js
    page.close()


def test_index_draws_and_links(browser, site):
    page, seen, n = open_page(browser, site / "index.html")
    rows = json.loads((site / "index.json").read_text(encoding="utf-8"))["runs"]
    moving = [m for m in map(metric, TREND) if len({r[m.key] for r in rows}) > 1]
    assert n == len(moving) >= 4  # trend over the two numbered steps: a panel per headline metric that moves
    assert seen["errors"] == [] and seen["dialogs"] == [] and seen["routed"] == []
    assert sorted(seen["requests"]) == sorted((site / p).as_uri() for p in (
        "index.html", "assets/style.css", "assets/vega.js", "assets/tim.js"))
    assert "<script>alert('model')</script>" in page.inner_text("body")
    page.click("text=step9")
    page.wait_for_load_state()
    assert page.url.endswith("step9/index.html")
    assert seen["dialogs"] == []
    page.go_back()
    page.wait_for_function("() => document.querySelector('.vega svg')")
    with page.expect_navigation():  # a point of the trend opens its step's page
        page.locator(".vega .mark-symbol path").first.click(force=True)
    assert page.url.endswith("/index.html") and page.url != (site / "index.html").as_uri()
    page.close()


# ---- any screen, no network --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compare_page(tmp_path_factory) -> Path:
    from tim_report.api import compare

    b = hostile_batch()
    a = hostile_batch()
    a.trainer_logp = (a.rollout_logp + 0.5 * (a.trainer_logp - a.rollout_logp)).clip(max=0)
    return compare(b, a, labels=("before " + "x" * 60, "after")).write(tmp_path_factory.mktemp("cmp") / "cmp") / "index.html"


@pytest.mark.parametrize("width", [420, 1300])
@pytest.mark.parametrize("which", ["run", "index", "compare"])
def test_pages_fit_the_screen(browser, site, compare_page, width, which):
    path = {"run": site / "step7" / "index.html", "index": site / "index.html", "compare": compare_page}[which]
    page, seen, _ = open_page(browser, path, width=width)
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing makes the page scroll sideways
    assert seen["errors"] == [] and seen["routed"] == []
    assert all(u.startswith("file:") for u in seen["requests"])
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")  # every fold, too
    assert page.evaluate(CUT_CELLS) == []  # every number whole: a wide table scrolls inside its box
    page.close()


# A table cell whose text does not fit its box (clipped, or cut with an ellipsis); scripts/screenshots.py counts the same.
CUT_CELLS = """() => [...document.querySelectorAll('td, th')]
  .filter(c => c.scrollWidth > c.clientWidth + 1 || /…$/.test(c.textContent.trim()))
  .map(c => c.textContent.trim().slice(0, 40))"""


def test_run_page_reads_on_one_screen_first(browser, site):
    """At 1300 px: the verdict, what was read and the headline start within the first screen, the charts follow, and
    the whole page is at most 8,000 px tall with every token table folded (nothing dropped: opened, they are all there)."""
    page, seen, _ = open_page(browser, site / "step7" / "index.html")
    tops = {i: page.evaluate("id => document.getElementById(id).getBoundingClientRect().top + scrollY", i)
            for i in ("verdict", "about", "headline", "charts", "samples")}
    assert max(tops["verdict"], tops["about"], tops["headline"]) < 900 < tops["charts"] < tops["samples"], tops
    assert page.evaluate("document.documentElement.scrollHeight") <= 8000
    worst = read_samples(site / "step7")["samples"][0]
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    shown = page.locator(f"#seq-{worst['sequence']} table.tok tbody tr").count()
    n = len(worst["rows"]["rollout_logp"])  # samples.js's rows are columns
    assert shown == (n + 8 if n > 8 else n)  # its largest differences, then every row
    page.close()


def test_a_link_into_the_folded_glossary_opens_it(browser, site):
    page, _, _ = open_page(browser, site / "step7" / "index.html")
    assert not page.locator("#glossary").get_attribute("open")
    page.locator("#headline .card a").first.click()
    page.wait_for_function("() => document.getElementById('glossary').open")
    page.close()


@pytest.mark.parametrize("which, cell", [("index", ".runs td.verdict-cell"), ("compare", ".cmp td.dir")])
def test_verdict_and_direction_columns_are_on_a_phone_screen(browser, site, compare_page, which, cell):
    page, _, _ = open_page(browser, {"index": site / "index.html", "compare": compare_page}[which], width=420)
    rights = page.evaluate(f"() => [...document.querySelectorAll('{cell}')].map(e => e.getBoundingClientRect().right)")
    assert rights and max(rights) <= 420
    page.close()


def test_the_index_reads_the_verdict_and_three_headline_numbers_on_a_phone(browser, site):
    """At 420 px the runs table kept the verdict but scrolled median |δ|, KL k3 and ESS out of sight (issue 33): now
    it keeps the run, its verdict and those three numbers on screen, and leaves the rest for a wider one."""
    page, _, _ = open_page(browser, site / "index.html", width=420)
    shown = page.evaluate("""() => [...document.querySelectorAll('.runs thead th')]
        .filter(th => th.getBoundingClientRect().width > 0)
        .map(th => [th.textContent.trim(), th.getBoundingClientRect().right])""")
    assert [name for name, _ in shown] == ["run", "verdict", "median |δ|", "KL k3", "ESS"]
    assert max(right for _, right in shown) <= 420
    table = page.locator(".runs").first
    assert page.evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth", table.element_handle())
    page.close()
    wide, _, _ = open_page(browser, site / "index.html", width=1300)  # a wide screen still has every column
    assert wide.locator(".runs thead th.wide-only").first.is_visible()
    wide.close()


def test_tooltips_show_under_the_policy(browser, site):
    """vega-tooltip's stylesheet is the site's (the policy refuses the one it would inject)."""
    page, seen, _ = open_page(browser, site / "step7" / "index.html")
    bar = page.locator("#chart-ratio svg .mark-rect path").nth(25)
    bar.scroll_into_view_if_needed()
    bar.hover(force=True)
    page.wait_for_function("() => document.querySelector('#vg-tooltip-element.visible')")
    assert page.evaluate("getComputedStyle(document.getElementById('vg-tooltip-element')).position") == "fixed"
    assert seen["errors"] == []
    page.close()


def test_a_self_contained_page_draws_alone(browser, tmp_path):
    """The API's page (and --self-contained): one file, its charts drawn with nothing else beside it."""
    from tim_report.api import analyze

    path = tmp_path / "alone.html"
    path.write_text(analyze(hostile_batch()).to_html(), encoding="utf-8")
    page, seen, n = open_page(browser, path)
    assert n == 6 and seen["errors"] == [] and seen["requests"] == [path.as_uri()] and seen["routed"] == []
    page.close()


def test_remote_images_in_notes_are_blocked_by_the_pages_policy(browser, tmp_path):
    notes = ("![tracker](https://example.org/pixel.png) <img src='http://example.org/x.png'> "
             "[ok](https://example.org/) ![local](data:image/png;base64,AAAA) ![](//example.org/y.png)")
    out = build_site(tmp_path, [("n", hostile_batch())], notes_md=notes)
    notes_html = (out / "n" / "index.html").read_text().split('<section id="notes"', 1)[1].split("</section>", 1)[0]
    assert "<img" not in notes_html and '<a href="https://example.org/pixel.png">' in notes_html  # a link, never loaded
    for path in (out / "n" / "index.html", out / "index.html"):
        assert "Content-Security-Policy" in path.read_text()
        page, seen, _ = open_page(browser, path)
        page.wait_for_timeout(300)
        remote = [u for u in seen["requests"] if not u.startswith("file:")]
        assert all("csp" in str(seen["failed"].get(u)).lower() for u in remote), (remote, seen["failed"])
        page.close()


def test_ratio_chart_of_unimodal_noise_draws_one_peak(browser, tmp_path):
    """The drawn bars (not just the data) rise to one maximum at r = 1 and fall after it."""
    import numpy as np

    from tim_report.model import StepBatch

    rng = np.random.default_rng(0)
    n = 200_000
    ro = -np.abs(rng.standard_normal(n)) - 0.5
    b = StepBatch(rollout_logp=ro, trainer_logp=ro + 0.01 * rng.standard_normal(n), offsets=np.arange(0, n + 1, 200),
                  mask=np.ones(n, bool))
    out = build_site(tmp_path, [("noise", b)])
    page, seen, _ = open_page(browser, out / "noise" / "index.html")
    heights = page.evaluate("""() => {
      const marks = [...document.querySelectorAll('#chart-ratio svg .mark-rect path')]
        .map(p => p.getBBox()).filter(b => b.height > 0 && b.width < 40);  // the histogram bars, not the bands
      marks.sort((a, b) => a.x - b.x);
      return marks.map(b => b.height);
    }""")
    page.close()
    assert len(heights) > 20
    peak = heights.index(max(heights))
    inner = heights[max(0, peak - 15): peak + 16]  # the well-populated bins around the peak
    p = inner.index(max(inner))
    assert all(x <= y + 1 for x, y in zip(inner[:p], inner[1:p + 1])) and all(y <= x + 1 for x, y in zip(inner[p:], inner[p + 1:]))


def test_the_policy_blocks_a_load_the_renderer_let_through(browser, tmp_path):
    """Defence in depth: were an <img> to reach a page, its Content-Security-Policy stops the request."""
    out = build_site(tmp_path, [("p", hostile_batch())])
    page_path = out / "p" / "index.html"
    html = page_path.read_text().replace("<main>", "<main><img src='https://example.org/leak.png'>", 1)
    page_path.write_text(html)
    page, seen, _ = open_page(browser, page_path)
    page.wait_for_timeout(300)
    remote = [u for u in seen["requests"] if not u.startswith("file:")]
    assert remote == ["https://example.org/leak.png"] and "csp" in str(seen["failed"].get(remote[0])).lower(), seen["failed"]
    page.close()


@pytest.mark.parametrize("self_contained", [False, True])
def test_token_tables_drawn_from_samples_js_are_the_rows_the_page_carried(browser, site, tmp_path, self_contained):
    """The token tables are drawn from samples.js (inline in a self-contained page): cell for cell, class for class,
    they are what render/views.py's token_rows made the page's own markup say, hostile token text included."""
    from tim_report.analysis import analyze
    from tim_report.io import load
    from tim_report.render.views import samples_view

    page_path = site / "step7" / "index.html"
    if self_contained:
        page_path = build_site(tmp_path, [("step7", hostile_batch())], self_contained=True) / "step7" / "index.html"
    page, seen, _ = open_page(browser, page_path)
    drawn = page.evaluate("""() => [...document.querySelectorAll('#samples [data-sample]')].map(h => [
        +h.dataset.sample, h.dataset.rows || "",
        [...h.querySelectorAll('tbody tr')].map(r => [r.className, ...[...r.cells].map(c => c.className + ':' + c.textContent)])])""")
    samples = samples_view(analyze(load(site.parent / "in" / "step7.npz")))
    assert len(drawn) >= len(samples) > 0 and seen["errors"] == [] and seen["routed"] == []
    for i, chosen, rows in drawn:
        s = samples[i]
        want = [s["all"][j] for j in (map(int, chosen.split()) if chosen else range(len(s["all"])))]
        assert rows == [[x["cls"], *(f"{x['r_cls'] if k == 'r' else ''}:{x[k]}" for k in
                                     ("pos", "flag", "token", "diff", "r", "ro", "tr", "pr", "pt"))] for x in want]
    cells = [c for _, _, rows in drawn for row in rows for c in row]
    assert "hot" in cells and "o5:▼ 0.082085" in cells and any(c.startswith(":␣the") for c in cells)  # marks drawn
    page.close()


def test_the_bisect_page_reads_on_a_phone(browser, tmp_path):
    """At 420 px the bisect table scrolled its right-hand columns out of sight and broke site names mid-word
    (`post_attenti|on_layernorm`): now its columns fit, a name breaks only after a dot, and the chart names every site."""
    from test_bisect import llama_like_summary

    from tim_report.render.bisect_html import render_bisect_html

    s = llama_like_summary()
    path = tmp_path / "bisect.html"
    path.write_text(render_bisect_html(s), encoding="utf-8")
    page, seen, n = open_page(browser, path, width=420)
    assert n == 1 and seen["errors"] == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 420
    table = page.locator("table.sites").first
    assert page.evaluate("t => t.parentElement.scrollWidth <= t.parentElement.clientWidth", table.element_handle())
    rights = page.evaluate("""() => [...document.querySelectorAll('table.sites thead th')]
        .filter(th => th.getBoundingClientRect().width > 0).map(th => th.getBoundingClientRect().right)""")
    assert len(rights) == 3 and max(rights) <= 420
    broken = page.evaluate("""() => [...document.querySelectorAll('table.sites .seg')]
        .filter(s => s.getClientRects().length > 1).map(s => s.textContent)""")
    assert broken == []
    labels = page.evaluate("() => [...document.querySelectorAll('.vega svg text')].map(t => t.textContent)")
    assert "layers.0.post_attention_layernorm" in labels and "layers.1.mlp" in labels
    page.close()


def test_the_staleness_table_reads_on_a_phone(browser, tmp_path):
    """At 420 px the "Staleness by lag" table scrolled inside its box, so the first screen cut "KL beyond lag 0" and
    its percentages: now its phone columns fit unscrolled, and scripts/screenshots.py's check sees a cell cut by its
    scrolling box (which it missed)."""
    import importlib.util

    import numpy as np

    from tim_report.testing import make_batch

    b = make_batch(n_seqs=20, mean_len=40, seed=1)
    lag = np.array([0, 1, 2, 3, -1] * 4)
    noise = np.random.default_rng(0).normal(0, 1, b.n_tokens) * np.repeat(0.3 * np.abs(lag) + 0.05, np.diff(b.offsets))
    b.rollout_logp = np.minimum(b.rollout_logp + noise, -1e-6)
    b.weight_version = np.array([str(9 - x) for x in lag])
    b.weight_version[[4, 9]] = ""  # an unknown row too
    b.meta["trainer_version"] = 9
    site = build_site(tmp_path, [("step9", b)])
    page, seen, _ = open_page(browser, site / "step9" / "index.html", width=420)
    assert seen["errors"] == []
    table = page.locator("#staleness ~ .scroll").first
    assert page.evaluate("s => s.scrollWidth <= s.clientWidth", table.element_handle())
    heads = page.evaluate("""() => [...document.querySelector('#staleness ~ .scroll').querySelectorAll('thead th')]
        .filter(th => th.getBoundingClientRect().width > 0).map(th => th.textContent.trim())""")
    assert heads[0] == "lag" and heads[-1] == "KL beyond lag 0" and "KL k3" in heads and "ESS" in heads
    spec = importlib.util.spec_from_file_location("screenshots", Path(__file__).parent.parent / "scripts" / "screenshots.py")
    shots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shots)
    page.close()
    bare = browser.new_page(viewport={"width": 420, "height": 900})
    bare.set_content('<div style="overflow-x:auto;width:60px"><table><tr><td>6.14%</td><td>0.794%</td>'
                     '<td>KL beyond lag 0</td></tr></table></div>')  # a table its box scrolls: the last cells are cut
    assert "0.794% (scrolled)" in bare.evaluate(shots.CUT_CELLS)
    bare.close()


@pytest.fixture(scope="module")
def examples_site(tmp_path_factory) -> Path:
    """The bundled real captures (three engine pairs of SmolLM2-135M), built together."""
    examples = Path(__file__).parent.parent / "examples"
    return build_site(tmp_path_factory.mktemp("examples"),
                      [(p.stem, load(p)) for p in sorted([*examples.glob("*.pt"), *examples.glob("*.npz")])])


SCROLLED = """sel => [...document.querySelectorAll(sel)].map(t => {
  let box = t.parentElement;
  while (box && getComputedStyle(box).overflowX === 'visible' && box !== document.body) box = box.parentElement;
  return [box.scrollWidth, box.clientWidth];
})"""


@pytest.mark.parametrize("page_of, table", [("index", "table.pairs"), ("run", "#what-if + .scroll table"),
                                            ("run", "#by-probability + .scroll table")])
def test_the_engine_pairs_what_if_and_probability_tables_read_on_a_phone(browser, examples_site, page_of, table):
    """At 420 px these three tables scrolled sideways inside their box (issue 44): their phone columns now fit, the
    rest shown on a wider screen."""
    path = examples_site / ("index.html" if page_of == "index" else "vllm-bf16__hf-fp32/index.html")
    page, seen, _ = open_page(browser, path, width=420)
    boxes = page.evaluate(SCROLLED, table)
    assert boxes and all(sw <= cw + 1 for sw, cw in boxes), boxes
    page.close()


AXIS_TITLES = """() => [...document.querySelectorAll('.vega svg')].flatMap(svg => {
  const s = svg.getBoundingClientRect();
  return [...svg.querySelectorAll('.role-axis-title text, .role-title text, .role-legend-title text')].map(t => {
    const r = t.getBoundingClientRect();
    return [t.textContent, r.top - s.top, s.bottom - r.bottom, r.left - s.left, s.right - r.right];
  }).filter(([text, ...gaps]) => gaps.some(g => g < -0.5) || text.endsWith('…'));
})"""


@pytest.mark.parametrize("width", [420, 1300])
def test_no_chart_title_is_clipped(browser, examples_site, width):
    """Every axis, chart and legend title of the run page's and the index's charts lies whole inside its chart."""
    for path in (examples_site / "index.html", examples_site / "vllm-bf16__hf-fp32" / "index.html"):
        page, _, _ = open_page(browser, path, width=width)
        page.wait_for_function("() => [...document.querySelectorAll('.vega')].every(el => el.querySelector('svg'))",
                               timeout=30000)
        assert page.evaluate(AXIS_TITLES) == [], path
        page.close()

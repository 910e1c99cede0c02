"""The site in a real browser: Playwright (pip) driving Debian's chromium, opened from file://.

Needs `/usr/bin/chromium` (apt-get install chromium); never `playwright install`. Set TIM_REPORT_CHROMIUM
to use another binary.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from helpers import HOSTILE, build_site, hostile_batch, skip_or_fail

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


def open_page(browser, path: Path, scheme: str = "light"):
    page = browser.new_page(color_scheme=scheme, viewport={"width": 1300, "height": 900})
    seen = {"errors": [], "requests": [], "dialogs": []}
    page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("request", lambda r: seen["requests"].append(r.url))

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
    others = [u for u in seen["requests"] if u != (site / "step7" / "index.html").as_uri()]
    assert others == [], others
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
    assert page.evaluate("document.querySelectorAll('script').length") == 3
    page.close()


def test_index_draws_and_links(browser, site):
    page, seen, n = open_page(browser, site / "index.html")
    assert n == 1  # trend over the two numbered steps
    assert seen["errors"] == [] and seen["dialogs"] == []
    assert seen["requests"] == [(site / "index.html").as_uri()]
    assert "<script>alert('model')</script>" in page.inner_text("body")
    page.click("text=step9")
    page.wait_for_load_state()
    assert page.url.endswith("step9/index.html")
    assert seen["dialogs"] == []
    page.close()

#!/usr/bin/env python3
"""Full-page screenshots of built pages at 1300 px and 420 px wide, to look at what a change renders.

    python scripts/screenshots.py site/index.html site/run/index.html -o shots/

Uses Playwright driving Debian's chromium (`apt-get install chromium`; never `playwright install`).
Prints, for each page and width, its height, whether anything is wider than the viewport, and how many table
cells cut their text (wider than their box, or ending in "…").
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

CHROMIUM = os.environ.get("TIM_REPORT_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pages", nargs="+", type=Path)
    ap.add_argument("-o", "--out", type=Path, default=Path("shots"))
    ap.add_argument("--widths", type=int, nargs="+", default=[1300, 420])
    ap.add_argument("--dark", action="store_true")
    ap.add_argument("--tile", type=int, default=1600, help="also cut each page into tiles this many px tall (0: no)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for page_path in args.pages:
            for w in args.widths:
                page = browser.new_page(viewport={"width": w, "height": 900}, color_scheme="dark" if args.dark else "light")
                page.goto(page_path.resolve().as_uri())
                if page.locator(".vega").count():
                    page.wait_for_function("() => [...document.querySelectorAll('.vega')].every(el => el.querySelector('svg'))",
                                           timeout=20000)
                wide = page.evaluate("document.documentElement.scrollWidth")
                tall = page.evaluate("document.documentElement.scrollHeight")
                cut = page.evaluate(CUT_CELLS)
                name = "_".join(page_path.resolve().parts[-2:]).replace(".html", "") + f"_{w}.png"
                page.screenshot(path=str(args.out / name), full_page=True)
                if args.tile:
                    _tiles(args.out / name, args.tile)
                print(f"{args.out / name}: height {tall} px, scrollWidth {wide} for a {w} px viewport"
                      + ("  ← OVERFLOW" if wide > w else "") + f", {len(cut)} cut cells {cut[:3]}")
                if wide > w:
                    for culprit in page.evaluate(WIDER_THAN_VIEWPORT):
                        print("   ", culprit)
                page.close()
        browser.close()


# Table cells whose text does not fit their box (clipped, or cut with an ellipsis): what the browser tests forbid;
# and cells that stick out of the box their table scrolls in, so the first screen shows them cut at its edge
# (marked "(scrolled)"; token tables, .tok, scroll on purpose and are left out of that).
CUT_CELLS = """() => {
  const box = c => { for (let a = c.parentElement; a; a = a.parentElement) {
    if (getComputedStyle(a).overflowX !== 'visible') return a; } return null; };
  const past = c => { const b = box(c); if (!b || c.closest('table.tok')) return false;
    const r = c.getBoundingClientRect(), o = b.getBoundingClientRect();
    return r.width > 0 && (r.right > o.left + b.clientWidth + 1 || r.left < o.left - 1); };
  return [...document.querySelectorAll('td, th')].flatMap(c => {
    const t = c.textContent.trim().slice(0, 20);
    if (c.scrollWidth > c.clientWidth + 1 || /…$/.test(c.textContent.trim())) return [t];
    return past(c) ? [t + ' (scrolled)'] : [];
  });
}"""


# The outermost elements that stick out of the viewport (not those clipped inside a scroll box).
WIDER_THAN_VIEWPORT = """() => {
  const w = window.innerWidth, out = [];
  const clipped = el => { for (let a = el.parentElement; a; a = a.parentElement) {
    if (getComputedStyle(a).overflowX !== 'visible') return true; } return false; };
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.right > w + 1 && !clipped(el) && !(el.parentElement && el.parentElement.getBoundingClientRect().right > w + 1)) {
      out.push(el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ')[0] : '') +
               (el.id ? '#' + el.id : '') + ' right=' + Math.round(r.right));
    }
  }
  return out.slice(0, 12);
}"""


def _tiles(png: Path, height: int) -> None:
    """Cut a tall screenshot into readable pieces: name_t0.png, name_t1.png, ..."""
    from PIL import Image

    img = Image.open(png)
    for i, top in enumerate(range(0, img.height, height)):
        img.crop((0, top, img.width, min(top + height, img.height))).save(png.with_name(f"{png.stem}_t{i}.png"))


if __name__ == "__main__":
    main()

"""Write tim_report/render/vega-bundle.js: the Vega, Vega-Lite and vega-embed JavaScript every page inlines.

vl-convert builds this bundle on demand, which costs 1.3-1.6 s of CPU in every process that renders a page;
shipping it built makes a one-batch `build` that much faster. Re-run after upgrading vl-convert-python or
Altair (tests/test_html.py fails until you do):

    python scripts/vendor_vega.py
"""

from __future__ import annotations

from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "tim_report" / "render" / "vega-bundle.js"


def bundle() -> str:
    """vl-convert's bundle with `</script` escaped (it is inlined in a <script> element), behind a provenance line."""
    import vl_convert

    js = vl_convert.javascript_bundle()
    js = js.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")
    return (f"/* Vega, Vega-Lite and vega-embed (BSD-3-Clause, https://github.com/vega), bundled by vl-convert-python "
            f"{vl_convert.__version__}; written by scripts/vendor_vega.py */\n{js}")


if __name__ == "__main__":
    TARGET.write_text(bundle(), encoding="utf-8")
    print(f"wrote {TARGET} ({TARGET.stat().st_size:,} bytes)")

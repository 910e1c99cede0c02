"""Write tim_report/render/templates/compiled.json: the Python Jinja2 makes of each page template, shipped so that no
process compiles the templates again (tim_report/render/precompiled.py says how it is read and when it is not).

Re-run after changing a template or upgrading Jinja2 (tests/test_html.py fails until you do; a stale entry is never
used, so the pages stay right meanwhile, only slower to render):

    python scripts/compile_templates.py
"""

from __future__ import annotations

import json

from tim_report.render.pages import environment
from tim_report.render.precompiled import STORE, compiled


def store_text() -> str:
    return json.dumps(compiled(environment()), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    STORE.write_text(store_text(), encoding="utf-8")
    print(f"wrote {STORE} ({STORE.stat().st_size:,} bytes)")

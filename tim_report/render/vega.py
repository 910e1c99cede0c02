"""The Vega / Vega-Lite / vega-embed JavaScript: one copy per site (assets/vega.js), or inlined in a self-contained
page, so reports work offline."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.lru_cache(maxsize=1)
def javascript_bundle() -> str:
    """The bundle shipped beside this module (scripts/vendor_vega.py writes it from vl-convert, whose on-demand
    build costs over a second per process); `</script` is already escaped in it."""
    return (Path(__file__).with_name("vega-bundle.js")).read_text(encoding="utf-8")

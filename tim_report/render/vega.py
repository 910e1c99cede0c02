"""The Vega / Vega-Lite / vega-embed JavaScript, inlined once per page so reports work offline."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def javascript_bundle() -> str:
    """vl-convert's self-contained bundle, built once per process (it takes a few seconds).

    `</script` cannot appear inside an inline script; the bundle has none today, but escape it anyway.
    """
    import vl_convert

    js = vl_convert.javascript_bundle()
    return js.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")

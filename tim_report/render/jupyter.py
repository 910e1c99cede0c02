"""Jupyter display shared by everything that renders a page (Report, Comparison), as rich's JupyterMixin."""

from __future__ import annotations

import html


class JupyterMixin:
    """`_repr_html_` for an object with `to_html()` and `jupyter_title()`.

    Why an iframe and not the page's HTML inline: the page carries its own stylesheet and an inlined
    Vega bundle plus chart specs. Inline, its CSS would restyle the notebook and its scripts would
    run (or be blocked) in the notebook's context; JupyterLab does not execute <script> tags in
    rendered HTML output at all. `srcdoc` gives the page its own document, needs no file and no
    network (everything is inlined), and the `sandbox="allow-scripts"` iframe keeps its scripts
    away from the notebook. The iframe is fixed-height and scrolls; `.to_html()` gives the page
    itself to save or open in a browser.
    """

    def to_html(self) -> str:  # provided by the class mixed into
        raise NotImplementedError

    def jupyter_title(self) -> str:
        raise NotImplementedError

    def _repr_html_(self) -> str:
        page = html.escape(self.to_html(), quote=True)
        title = html.escape(f"tim-report: {self.jupyter_title()}", quote=True)
        return (f'<iframe title="{title}" srcdoc="{page}" sandbox="allow-scripts" '
                f'style="width:100%;height:900px;border:1px solid #ccc;border-radius:4px"></iframe>')

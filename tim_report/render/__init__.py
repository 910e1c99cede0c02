"""Rendering: Reports and comparisons → HTML pages, GitHub markdown and charts. Display only, no statistics.

    html.py, charts.py, vega.py        run page and index (Jinja2 + Altair from pre-binned data)
    markdown.py, md.py                 report.md files (no Altair, no Jinja2)
    compare_html.py, compare_md.py     the before/after comparison
    views.py, compare_views.py         view models both formats share
    format.py                          how numbers and token text are written
    jupyter.py                         one Jupyter display for every renderable object
"""

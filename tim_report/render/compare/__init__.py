"""A comparison rendered: of two batches (analysis/compare.py) or of two arms of steps (analysis/arms.py).

    views.py     what both formats show: values, signed changes, marks, each arm's level and the effect
    html.py      the comparison page (compare.html, arms.html), used by render/html.py
    markdown.py  compare.md, used by render/markdown.py

Imports nothing at start-up: a markdown-only comparison loads no Altair and no Jinja2.
"""

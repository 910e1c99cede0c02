"""`tim-report compare BEFORE AFTER -o DIR`: the before/after page for a PR that changes an engine setting.

DIR gets index.html, compare.json (the analysis, `tim_report.analysis.compare`) and compare.md
(GitHub-flavoured, links to the HTML), and the page's shared assets/ (unless --self-contained), written all or
nothing like `build`.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..catalogue.numbers import fmt
from .options import fail_cleanly, load_options, output_path, self_contained_option, timestamp_now
from .text import safe


@click.command("compare")
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(),
              help="Output folder: index.html, compare.json, compare.md.")
@click.option("--label-before", default=None, help="Name of the first batch on the page (default: its file stem).")
@click.option("--label-after", default=None, help="Name of the second batch on the page (default: its file stem).")
@click.option("--timestamp", is_flag=True, help="Stamp the build time into the page (off: same input, same bytes).")
@self_contained_option
@fail_cleanly
@load_options
def compare_command(before, after, out, label_before, label_after, timestamp, self_contained, load):
    """Before/after report of two batches: metrics side by side, overlaid distributions, per-token change."""
    from ..render import RenderOptions
    from ..service.compare import compare, write_compare

    out = output_path(out)
    comparison = compare(before, after, load, labels=(label_before, label_after))
    write_compare(comparison, out, options=RenderOptions(timestamp=timestamp_now() if timestamp else None,
                                                         self_contained=self_contained))
    data = comparison.to_dict()
    lb, la = data["labels"]["before"], data["labels"]["after"]
    t = data["tally"]
    pt = data["per_token"]
    line = f"{lb} → {la}: {t['better']} metrics better, {t['worse']} worse, {t['same']} same"
    if pt.get("available"):
        line += f"; tokens {fmt(pt['counts']['better'])} better, {fmt(pt['counts']['worse'])} worse"
    else:
        line += "; per-token change skipped (different tokens)"
    click.echo(safe(line))
    click.echo(f"wrote {safe(out)}/")

"""`tim-report compare BEFORE AFTER -o DIR`: the before/after page for a PR that changes an engine setting.

Each side one batch: compared token by token (`tim_report.analysis.compare`). A side with several steps (a run
folder, a folder of step files): the two are A/B arms, compared step by step with intervals (`analysis/arms.py`).
DIR gets index.html, compare.json and compare.md (GitHub-flavoured, links to the HTML), and the page's shared
assets/ (unless --self-contained), written all or nothing like `build`.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..catalogue.numbers import fmt
from .options import fail_cleanly, load_options, output_path, ppo_eps_option, self_contained_option, timestamp_now
from .text import safe


@click.command("compare")
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(),
              help="Output folder: index.html, compare.json, compare.md.")
@click.option("--label-before", default=None, help="Name of the first batch on the page (default: its file stem).")
@click.option("--label-after", default=None, help="Name of the second batch on the page (default: its file stem).")
@click.option("--timestamp", is_flag=True, help="Stamp the build time into the page (off: same input, same bytes).")
@ppo_eps_option
@self_contained_option
@fail_cleanly
@load_options
def compare_command(before, after, out, label_before, label_after, thresholds, timestamp, self_contained, load) -> None:
    """Before/after report of two batches (metrics side by side, overlaid distributions, per-token change), or of two
    arms of several steps each (a run folder per side: each metric per arm with its interval, a verdict per metric)."""
    from ..render import RenderOptions
    from ..service.compare import arms_or_pair, write_compare

    out = output_path(out)
    comparison = arms_or_pair(before, after, load, labels=(label_before, label_after), thresholds=thresholds)
    write_compare(comparison, out, options=RenderOptions(timestamp=timestamp_now() if timestamp else None,
                                                         self_contained=self_contained))
    data = comparison.to_dict()
    lb, la = data["labels"]["before"], data["labels"]["after"]
    if data.get("kind") == "arms":
        for m in data["metrics"]:
            click.echo(safe(m["sentence"]))
        click.echo(f"wrote {safe(out)}/")
        return
    t = data["tally"]
    pt = data["per_token"]
    line = f"{lb} → {la}: {t['better']} metrics better, {t['worse']} worse, {t['same']} same"
    if pt.get("available"):
        line += f"; tokens {fmt(pt['counts']['better'])} better, {fmt(pt['counts']['worse'])} worse"
    else:
        line += "; per-token change skipped (different tokens)"
    click.echo(safe(line))
    click.echo(f"wrote {safe(out)}/")

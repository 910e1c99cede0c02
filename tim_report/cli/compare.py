"""`tim-report compare BEFORE AFTER -o DIR`: the before/after page for a PR that changes an engine setting.

DIR gets index.html, compare.json (the analysis, `tim_report.analysis.compare`) and compare.md
(GitHub-flavoured, links to the HTML), written all or nothing like `build`.
"""

from __future__ import annotations

from pathlib import Path

import click

from .options import (fail_cleanly, format_hint_option, key_option, max_tokens_option, meta_option, output_path,
                      parse_keys, parse_meta, pickle_option, timestamp_now, tokenizer_option)
from .text import safe


@click.command("compare")
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(),
              help="Output folder: index.html, compare.json, compare.md.")
@click.option("--label-before", default=None, help="Name of the first batch on the page (default: its file stem).")
@click.option("--label-after", default=None, help="Name of the second batch on the page (default: its file stem).")
@tokenizer_option
@click.option("--timestamp", is_flag=True, help="Stamp the build time into the page (off: same input, same bytes).")
@key_option
@meta_option
@format_hint_option
@max_tokens_option
@pickle_option
@fail_cleanly
def compare_command(before, after, out, label_before, label_after, tokenizer, timestamp, keys, meta, format_hint, max_tokens, allow_pickle):
    """Before/after report of two batches: metrics side by side, overlaid distributions, per-token change."""
    from ..analysis.compare import compare_batches
    from ..build import write_compare
    from ..io import load, meta_overrides
    from ..model import Comparison

    out = output_path(out)
    key_map, meta_map = parse_keys(keys), meta_overrides(parse_meta(meta))
    common = dict(keys=key_map, allow_pickle=allow_pickle, tokenizer=tokenizer, meta=meta_map, format_hint=format_hint,
                  max_tokens=max_tokens)
    b, a = load(before, **common), load(after, **common)
    lb = label_before or before.stem
    la = label_after or after.stem
    if lb == la:
        lb, la = f"{lb} (before)", f"{la} (after)"
    data = compare_batches(b, a, labels=(lb, la))
    write_compare(Comparison(data), out, timestamp_now() if timestamp else None)
    t = data["tally"]
    pt = data["per_token"]
    line = f"{lb} → {la}: {t['better']} metrics better, {t['worse']} worse, {t['same']} same"
    if pt.get("available"):
        line += f"; tokens {pt['counts']['better']:,} better, {pt['counts']['worse']:,} worse"
    else:
        line += "; per-token change skipped (different tokens)"
    click.echo(safe(line))
    click.echo(f"wrote {safe(out)}/")

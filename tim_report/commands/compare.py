"""`tim-report compare BEFORE AFTER -o DIR` and the `Comparison` object behind `tim_report.compare()`.

DIR gets index.html (the page to attach to a PR that changes an engine setting), compare.json (the
analysis, `tim_report.analysis.compare`) and compare.md (GitHub-flavoured, links to the HTML). Files are
rendered into a staging folder and moved into DIR only when everything succeeded, like `build`.
"""

from __future__ import annotations

import html as _html
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

OUTPUT_FILES = ("index.html", "compare.json", "compare.md")


@dataclass
class Comparison:
    """The result of comparing two batches: `.data` is the JSON-able dict (compare.json)."""

    data: dict

    def to_dict(self) -> dict:
        return self.data

    def to_html(self, timestamp: str | None = None) -> str:
        from ..render.compare import render_compare_html

        return render_compare_html(self.data, timestamp)

    def to_markdown(self, html_url: str | None = None) -> str:
        from ..render.compare import render_compare_md

        return render_compare_md(self.data, html_url)

    def _repr_html_(self) -> str:
        """The full page in a sandboxed iframe (`srcdoc`), like `Report._repr_html_`: its inlined Vega bundle runs there."""
        page = _html.escape(self.to_html(), quote=True)
        return (f'<iframe srcdoc="{page}" style="width:100%;height:900px;border:1px solid #ccc" '
                f'sandbox="allow-scripts"></iframe>')

    def write(self, out: str | Path) -> Path:
        return write_compare(self.data, Path(out))


def compare(before, after, labels: tuple[str, str] | None = None, thresholds=None, **load_kwargs) -> Comparison:
    """Compare two StepBatches (or paths to step batch files); labels default to the file stems."""
    from ..analysis.compare import compare_batches
    from ..loader import load

    sides, names = [], []
    for i, x in enumerate((before, after)):
        if isinstance(x, (str, Path)):
            sides.append(load(x, **load_kwargs))
            names.append(Path(x).stem)
        else:
            sides.append(x)
            names.append(("before", "after")[i])
    if labels is None:
        labels = (names[0], names[1]) if names[0] != names[1] else ("before", "after")
    return Comparison(compare_batches(sides[0], sides[1], labels=tuple(labels), thresholds=thresholds))


def write_compare(data: dict, out: Path, timestamp: str | None = None) -> Path:
    """Render the three files into a staging folder beside `out`, then move them in."""
    from ..errors import BadInput
    from ..render.compare import render_compare_html, render_compare_md
    from ..report import dumps
    from ..site import _move_into

    if out.exists() and not out.is_dir():
        raise BadInput(out, "output path exists and is not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tim-report-", dir=out.parent) as tmp:
        staging = Path(tmp)
        (staging / "index.html").write_text(render_compare_html(data, timestamp), encoding="utf-8")
        (staging / "compare.json").write_text(dumps(data), encoding="utf-8")
        (staging / "compare.md").write_text(render_compare_md(data, "index.html"), encoding="utf-8")
        _move_into(staging, out)
    return out


@click.command("compare")
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="Output folder: index.html, compare.json, compare.md.")
@click.option("--label-before", default=None, help="Name of the first batch on the page (default: its file stem).")
@click.option("--label-after", default=None, help="Name of the second batch on the page (default: its file stem).")
@click.option("--tokenizer", type=click.Path(), help="Local tokenizer folder to decode token ids (offline).")
@click.option("--timestamp", is_flag=True, help="Stamp the build time into the page (off: same input, same bytes).")
def compare_command(before, after, out, label_before, label_after, tokenizer, timestamp, keys=(), allow_pickle=False):
    """Before/after report of two batches: metrics side by side, overlaid distributions, per-token change."""
    from ..analysis.compare import compare_batches
    from ..cli import _parse_keys
    from ..loader import load

    key_map = _parse_keys(keys)
    b = load(before, keys=key_map, allow_pickle=allow_pickle, tokenizer=tokenizer)
    a = load(after, keys=key_map, allow_pickle=allow_pickle, tokenizer=tokenizer)
    lb = label_before or before.stem
    la = label_after or after.stem
    if lb == la:
        lb, la = f"{lb} (before)", f"{la} (after)"
    data = compare_batches(b, a, labels=(lb, la))
    stamp = None
    if timestamp:
        from datetime import datetime, timezone

        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    write_compare(data, out, stamp)
    t = data["tally"]
    pt = data["per_token"]
    line = f"{lb} → {la}: {t['better']} metrics better, {t['worse']} worse, {t['same']} same"
    if pt.get("available"):
        line += f"; tokens {pt['counts']['better']:,} better, {pt['counts']['worse']:,} worse"
    else:
        line += "; per-token change skipped (different tokens)"
    click.echo(line)
    click.echo(f"wrote {out}/")


def _decorate() -> None:
    """Shared --key / --allow-pickle options and clean BadInput handling from cli.py (as check.py does)."""
    global compare_command
    from ..cli import _fail_cleanly, key_option, pickle_option

    compare_command.callback = _fail_cleanly(compare_command.callback)
    for opt in (pickle_option, key_option):
        compare_command = opt(compare_command)


_decorate()

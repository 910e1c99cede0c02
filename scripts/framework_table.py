"""The table of frameworks in docs/formats.md, rendered from the registry (catalogue/frameworks.py and each
framework's dump module in tim_report/io/dumps/), so the docs list what the code reads.

    python scripts/framework_table.py               # print the table
    python scripts/framework_table.py --update-doc  # rewrite it in docs/formats.md

tests/test_framework_registry.py fails when the docs' table is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tim_report.catalogue.frameworks import FRAMEWORKS
from tim_report.io.dumps import dump

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "formats.md"
START, END = "<!-- FRAMEWORKS:START (python scripts/framework_table.py) -->\n", "<!-- FRAMEWORKS:END -->"


def table() -> str:
    rows = ["| `--format-hint` | recognised by | run folder | a step is | complete when | layout |", "|---|---|---|---|---|---|"]
    for name, entry in FRAMEWORKS.items():
        d = dump(name)
        if d is None:
            rows.append(f"| `{name}` | anything else | a folder of step files | a file | settled | {entry.help}: key names "
                        "matched to roles |")
            continue
        how = (f"JSON lines whose first record has {', '.join(f'`{k}`' for k in sorted(d.record_keys))}" if d.record_keys
               else f"a pickle that mentions {d.pickled_words}")
        step = (f"`step_S/` of `{d.rank_files}`" if d.rank_files else
                " or ".join(f"`{p}`" for p in d.step_files) if d.step_files else "a file")
        marker = f"`{d.marker}` in the step folder" if d.marker else "settled"
        rows.append(f"| `{name}` | {how} | {f'`{d.folder}/`' if d.folder else entry.run_folder or '-'} | {step} | {marker} | "
                    f"{d.layout} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update-doc", action="store_true", help=f"rewrite the table in {DOC.relative_to(ROOT)}")
    args = ap.parse_args()
    if not args.update_doc:
        sys.stdout.write(table())
        return
    text = DOC.read_text()
    head, rest = text.split(START, 1)
    DOC.write_text(head + START + table() + END + rest.split(END, 1)[1])


if __name__ == "__main__":
    main()

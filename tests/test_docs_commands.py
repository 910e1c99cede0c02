"""The docs' quoted commands, run as written, held to what they print (issue 44: a newcomer saw the skip-sync alarm at
step 7 where docs/staleness.md said step 6).

A block is checked when an HTML comment, invisible on the rendered page, comes right before its ```console fence:

    <!-- doc-test [slow]
    python -c "…"          the setup: commands that make the block's input files, one a line
    -->
    ```console
    $ tim-report check step_100.npz          each `$ ` line is a command, run by bash in one shell, in order
    step_100.npz: ok: numerical noise; …     the lines after it are what it prints: each must be a line of the
    ```                                      output, in order ("…" matches anything; lines may be left out)

The block runs in an empty folder where `examples/` and `models/` are the repository's, with this Python's `python`
and `tim-report` first on PATH.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"<!-- doc-test(?P<slow> slow)?\n(?P<setup>.*?)-->\n```console\n(?P<body>.*?)\n```", re.S)


def blocks() -> list:
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in MARK.finditer(text):
            line = text[: m.start()].count("\n") + 1
            marks = [pytest.mark.slow] if m["slow"] else []
            out.append(pytest.param(m["setup"], m["body"], id=f"{doc.name}:{line}", marks=marks))
    return out


def parse(body: str) -> list[tuple[str, list[str]]]:
    """(command, expected lines) for each `$ ` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip() and steps:
            steps[-1][1].append(line)
    return steps


def matches(expected: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.strip().split("…"))
    return re.fullmatch(pattern, actual.strip()) is not None


def test_the_docs_mark_blocks_to_check():
    ids = [p.id for p in blocks()]
    assert any(i.startswith("staleness.md") for i in ids) and any(i.startswith("diagnosis.md") for i in ids), ids


@pytest.mark.parametrize("setup, body", blocks())
def test_a_documented_command_prints_what_its_doc_quotes(tmp_path, setup, body):
    for name in ("examples", "models"):
        (tmp_path / name).symlink_to(ROOT / name)
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    for name, run in (("python", ""), ("tim-report", " -m tim_report")):  # a wrapper: a link would lose the venv
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}"{run} "$@"\n')
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200"}
    for line in setup.strip().splitlines():
        res = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, (line, res.stderr[-2000:])
    steps = parse(body)
    # each command's output after a marker line; `(exit $rc)` hands the previous command's status on to `echo $?`
    script = "".join(f"rc=$?; echo '@@ {i}'; (exit $rc)\n{cmd}\n" for i, (cmd, _) in enumerate(steps))
    res = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=1800)
    outputs = re.split(r"^@@ \d+\n", res.stdout, flags=re.M)[1:]
    assert len(outputs) == len(steps), res.stdout[-3000:]
    for (cmd, expected), out in zip(steps, outputs):
        lines = out.splitlines()
        at = 0
        for want in expected:
            while at < len(lines) and not matches(want, lines[at]):
                at += 1
            assert at < len(lines), f"$ {cmd}\nthe doc quotes:\n  {want}\nit printed:\n{out[-3000:]}"
            at += 1

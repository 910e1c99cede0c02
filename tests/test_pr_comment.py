"""The markdown for a PR comment, as GitHub renders it (Debian's cmark-gfm, GitHub's own renderer; issue 44): a step's
report.md opens with the verdict, the headline numbers and their table on one screen, the rest folded in <details>;
the index's runs table has at most ten columns, health, run and verdict first; no line is cut inside a word."""

from __future__ import annotations

import html as htmllib
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import build_site, skip_or_fail

from tim_report.io import load
from tim_report.testing import make_batch, make_run, shifted

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCREEN_LINES = 40  # a laptop screen of a PR conversation: some 40 lines of 120 characters
WIDTH = 120


def cmark(text: str) -> str:
    exe = shutil.which("cmark-gfm")
    if exe is None:
        skip_or_fail("Debian's cmark-gfm is not installed (apt-get install cmark-gfm)")
    return subprocess.run([exe, "-e", "table", "-e", "strikethrough", "-e", "autolink", "-e", "tagfilter", "--unsafe"],
                          input=text, capture_output=True, text=True, check=True).stdout


def first_screen(html: str) -> list[str]:
    """The lines a reader sees before opening anything: each heading, paragraph (wrapped at WIDTH), list item, table
    row and folded block's summary, with what <details> holds left out."""
    shown = re.sub(r"<details>\s*(<summary>.*?</summary>).*?</details>", r"\1", html, flags=re.S)
    lines = []
    for tag, body in re.findall(r"<(h[1-6]|p|li|tr|summary)\b[^>]*>(.*?)</\1>", shown, flags=re.S):
        words = htmllib.unescape(re.sub(r"<[^>]+>", " ", body)).split()
        text = " ".join(words)
        lines += [f"{tag}: {text}"] + [""] * (max(1, math.ceil(len(text) / WIDTH)) - 1)
    return lines


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    versioned = make_batch(n_seqs=24, mean_len=40, seed=5)
    versioned.weight_version = np.array([str(3 - i % 3) for i in range(versioned.n_seqs)])
    versioned.meta["trainer_version"] = 3
    runs = [("smollm2", load(EXAMPLES / "hf-bf16__hf-fp32.pt")), ("shift", shifted(make_batch(n_seqs=16, mean_len=48, seed=2))),
            ("lags", versioned)]
    runs += [(f"step_{s}", b) for s, b in enumerate(make_run(12, noise=lambda s: 0.05 if s >= 6 else 0.01))]
    return build_site(tmp_path_factory.mktemp("pr"), runs)


@pytest.mark.parametrize("run", ["smollm2", "shift", "lags", "step_3"])
def test_a_steps_comment_opens_with_its_verdict_and_headline_numbers_on_one_screen(site, run):
    md = (site / run / "report.md").read_text(encoding="utf-8")
    lines = first_screen(cmark(md))
    assert len(lines) <= SCREEN_LINES, "\n".join(lines)
    heads = [line for line in lines if line[:2] in ("h1", "h2")]
    assert heads[1].startswith("h2: Verdict") and heads[2] == "h2: Summary", heads
    assert sum(line.startswith("tr:") for line in lines) >= 5  # the headline numbers' table is on it
    assert any(line.startswith("summary: Findings") for line in lines)  # the rest one click away


def test_the_index_runs_table_is_ten_columns_health_run_and_verdict_first(site):
    html = cmark((site / "report.md").read_text(encoding="utf-8"))
    runs = html[html.index("<h2>Runs</h2>"):]
    header = re.findall(r"<th\b[^>]*>(.*?)</th>", runs[: runs.index("</thead>")])
    assert len(header) <= 10 and header[:3] == ["health", "run", "verdict"], header


def test_no_line_of_any_report_md_is_cut_inside_a_word(site):
    """A change point's sentence was cut at 80 characters: "median |δ| is 5.25× hig…"."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(site.rglob("report.md"))]
    assert any("Change points" in t for t in texts)
    for text in texts:
        cut = re.findall(r"\w…", text)
        assert not cut, [line for line in text.splitlines() if re.search(r"\w…", line)][:3]


def test_a_name_is_shortened_after_a_word():
    from tim_report.render.md import shorten

    assert shorten("a model with a rather long name that runs on and on past the table's width", 40) == \
        "a model with a rather long name that…"
    assert shorten("Qwen2.5-72B-Instruct-with-a-long-suffix-of-a-fine-tune", 30) == "Qwen2.5-72B-Instruct-with-a-…"
    assert shorten("short", 40) == "short"

"""A finding is one detector (registered with `analysis.registry.detector`) plus one catalogue entry
(catalogue/findings/): the diagnosis runs the registry in one place, and every place that shows a finding reads its
entry. These tests hold both halves together (no silent fallback) and prove the worked example of
docs/architecture.md: a throwaway finding added at test time reaches every place a finding goes."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest
from helpers import ROOT, throwaway

from tim_report.analysis import diagnosis  # noqa: F401  (importing the diagnosis registers every detector)
from tim_report.analysis.registry import DETECTORS
from tim_report.catalogue import run_words
from tim_report.catalogue.findings import FINDINGS, INPUT_PROBLEM
from tim_report.catalogue.numbers import times


def test_every_finding_is_one_detector_and_one_catalogue_entry():
    assert set(DETECTORS) == set(FINDINGS)
    assert INPUT_PROBLEM in FINDINGS


@pytest.mark.parametrize("finding_id", sorted(FINDINGS))
def test_every_finding_has_its_step_words(finding_id):
    """The run view's sentences are made of a finding's short name and meaning: each entry carries both."""
    entry = FINDINGS[finding_id]
    assert entry.short.strip() and entry.meaning.strip()
    assert run_words.short(finding_id) == entry.short and run_words.meaning(finding_id) == entry.meaning


def test_no_renderer_looks_a_finding_up_by_id():
    """Where a page shows a finding beyond its list (a banner) is its catalogue entry's to say."""
    files = [p for p in (ROOT / "tim_report" / "render").rglob("*") if p.suffix in (".py", ".html", ".md")]
    spelled = {(p.name, i) for p in files for i in FINDINGS for q in ('"', "'") if f"{q}{i}{q}" in p.read_text()}
    assert not spelled


# Where a package file spells a finding's id for something else: not a place the finding lives.
HOMONYMS = {("processed_logprobs", "capture/vllm_engine.py"): "vLLM's own logprobs_mode value"}


def _names(path: Path, ids: set[str]) -> set[str]:
    """The finding ids a package file names: as a string literal (a key, an argument, a comparison) or, for an id that
    is not an ordinary word ("dummy_zero", not "shift"), in a comment (a table's section labelled by finding)."""
    text = path.read_text()
    if path.suffix != ".py":  # a template: a quoted or code-spanned id
        return {i for i in ids if re.search(rf"[\"'`]{i}[\"'`]", text)}
    found = {n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant) and n.value in ids}
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    return found | {i for i in ids if "_" in i and any(re.search(rf"\b{i}\b", c) for c in comments)}


def finding_homes(ids: set[str]) -> dict[str, list[str]]:
    """For each finding id, the package files that name it (tim_report/, its modules and templates)."""
    package = ROOT / "tim_report"
    homes: dict[str, list[str]] = {i: [] for i in ids}
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".html"):
            rel = path.relative_to(package).as_posix()
            for i in _names(path, ids):
                if (i, rel) not in HOMONYMS:
                    homes[i].append(rel)
    return homes


def test_a_finding_lives_in_at_most_three_package_files():
    """Its detector, its catalogue entry and its thresholds in config/: its severity rule, words, glance, place,
    evidence names, side and consequence are fields of its entry, never a table keyed by its id elsewhere."""
    homes = finding_homes(set(FINDINGS))
    spread = {i: files for i, files in homes.items() if len(files) > 3}
    assert not spread, spread
    assert all(any(f.startswith("catalogue/findings/") for f in files) for files in homes.values()), homes


def test_the_count_sees_a_table_keyed_by_finding_id(tmp_path):
    """The count above would catch the tables this replaced: a literal key, and a comment labelling a section."""
    (tmp_path / "a.py").write_text('SHORT = {"dummy_zero": "placeholder zeros", "shift": "off-by-one"}\n')
    (tmp_path / "b.py").write_text('NAMES = {\n    # dummy_zero, shift\n    "exact_zero_tokens": 1,\n}\n')
    ids = {"dummy_zero", "shift"}
    assert _names(tmp_path / "a.py", ids) == ids and _names(tmp_path / "b.py", ids) == {"dummy_zero"}


def test_one_multiple_formatter():
    assert times(33.6) == "33.6×" and times(1 / 3) == "0.333×" and times(3.2714) == "3.27×" and times(None) == "—"


def test_an_unknown_finding_has_no_made_up_words():
    with pytest.raises(KeyError):
        run_words.short("no_such_finding")
    with pytest.raises(KeyError):
        run_words.meaning("no_such_finding")


THROWAWAY = r'''
import json, sys
from pathlib import Path
import numpy as np
from click.testing import CliRunner

# The whole of adding a finding: its detector (registered) and its catalogue entry, nothing else: the entry says its
# words, its glance and place, how its evidence is named, its side and how its consequence is weighed.
from tim_report.catalogue import findings as F
from tim_report.catalogue.numbers import pct
from tim_report.analysis.registry import detector

F.FINDINGS["wide_tokens"] = F.Finding(
    "wide_tokens", lambda w, dt: "error" if w["share"] >= 0.05 else "warn",
    lambda w: f"Wide tokens: {pct(w['share'])} of tokens disagree by more than a tenth of a nat",
    lambda w: f"tokens that disagree by more than a tenth of a nat ({pct(w['share'])})",
    lambda w: "A throwaway cause.", lambda w: "A throwaway check.",
    short="wide tokens", meaning="many tokens disagree by more than a tenth of a nat", banner=True,
    consequence="stated", offset=True, side=F.Side(lambda e: "trainer", "throwaway", "a throwaway reason"),
    glance=lambda e: f"{pct(e['share'])} wide tokens", place=lambda e: "every wide token",
    evidence_names={"share": ("share of wide tokens", "share")})


@detector("wide_tokens")
def wide_tokens(scene):
    share = float(np.mean(np.abs(scene.tok.delta) > 0.1))
    return F.make("wide_tokens", {"share": share}, scene.dt) if share >= 0.01 else None


from tim_report.cli import main
from tim_report.testing import write_prime_rl_run

tmp = Path(sys.argv[1])
write_prime_rl_run(tmp / "run", steps=12, noise=lambda s: 0.01 if s < 7 else 0.08)
run = lambda *a: CliRunner().invoke(main, [str(x) for x in a], catch_exceptions=False)
out = {"build": run("build", tmp / "run", "-o", tmp / "site").exit_code}
site = tmp / "site"
summary = json.loads((site / "step_9" / "summary.json").read_text())
page, md = (site / "step_9" / "index.html").read_text(), (site / "step_9" / "report.md").read_text()
index, index_md = (site / "index.html").read_text(), (site / "report.md").read_text()
doc = json.loads((site / "index.json").read_text())
lead = summary["diagnosis"]["findings"][0]
out["diagnosis"] = lead["id"] == "wide_tokens" and summary["diagnosis"]["regime"] == "systematic"
out["verdict"] = summary["diagnosis"]["verdict"].startswith("Systematic: wide tokens: ")
out["clean_steps"] = all(f["id"] != "wide_tokens" for f in json.loads((site / "step_2" / "summary.json").read_text())
                         ["diagnosis"]["findings"])
out["page"] = f"<strong>{lead['title']}</strong>" in page and f'<p class="warntext">⚠ {lead["title"]}.</p>' in page
out["report_md"] = "⚠️ Wide tokens\\: " in md and "Findings: ❌ error Wide tokens" in md and "A throwaway check." in md
out["evidence_names"] = "share of wide tokens" in page and "share of wide tokens" in md
out["side"] = (lead["side"] == {"side": "trainer", "basis": "throwaway"}
               and lead["side_text"] == "Side: the trainer (a throwaway reason)." and lead["side_text"] in md)
out["consequence"] = (lead["consequence_text"].startswith(("Material: ", "Effect: "))
                      and f"- **Consequence:** {lead['consequence_text'][:10]}" in md)
glance = f"systematic: {pct(lead['evidence']['share'])} wide tokens (error), trainer side, every wide token"
out["glance"] = summary["diagnosis"]["glance"].startswith(glance)
steps = tmp / "run" / "token_exports"
res = run("check", steps / "step_9", "--no-limits", "--fail-on", "error")
out["check"] = res.exit_code == 1 and "error wide_tokens: Wide tokens: " in res.output and glance in res.output
res = run("check", steps / "step_2", "--no-limits", "--fail-on", "error")
out["check_clean"] = res.exit_code == 0
said = "every step since is diagnosed wide tokens (`wide_tokens`): many tokens disagree by more than a tenth of a nat"
out["run_verdict"] = (said in doc["run"]["verdict"] and said in index_md
                      and "every step since is diagnosed wide tokens (<code>wide_tokens</code>): many tokens" in index)
out["change_point"] = any("from step 7 many tokens disagree by more than a tenth of a nat" in c["sentence"]
                          for c in doc["change_steps"])
out["index_json"] = all(("wide_tokens" in r["findings"]) == (r["step"] >= 7) for r in doc["runs"])
print(json.dumps(out))
'''


def test_a_new_finding_is_its_detector_and_its_catalogue_entry(tmp_path):
    """docs/architecture.md's worked example: a throwaway finding (a registered detector and a catalogue entry, in a
    fresh interpreter) reaches the diagnosis and its verdict, summary.json, the page (its list and its banner),
    report.md, `check`'s line and `--fail-on`, the run verdict's and change points' step words, and index.json; what
    its entry declares beyond its words (its side, consequence, glance and place, its evidence's names) is said on
    the page, in report.md and in `check`'s line without a table anywhere else."""
    found = throwaway(THROWAWAY, tmp_path)
    assert all(found.values()), found

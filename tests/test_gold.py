"""Gold files, coverage.py's way: tiny batches, one feature each, rendered and compared with tests/gold/.

Every output has its gold: the pages, the markdown, summary.json, index.json and compare.json. A page's chart
specs are taken out of its markup into a gold file of their own (`<page>.charts.json`), so a diff says whether
the words or the charts changed. Volatile parts are scrubbed (paths, the tim-report version, the stylesheet,
the Vega bundle, Altair's default `config`). A missing gold file fails; `pytest tests/test_gold.py
--update-gold` rewrites them all (then read the diff before committing).
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import build_site

from tim_report.api import compare
from tim_report.testing import make_batch

GOLD = Path(__file__).parent / "gold"


SPECS = re.compile(r'(<script type="application/json" id="tim-specs">)(.*?)(</script>)', re.S)


def scrub(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "TMP")
    text = re.sub(r"(<script>\n).*?(\n</script>\n<script>\n\(function)", r"\1/* vega bundle */\2", text, flags=re.S)
    text = re.sub(r'content="tim-report [^"]*"', 'content="tim-report VERSION"', text)
    text = re.sub(r"Made by tim-report \S+?(?=[,.]\s)", "Made by tim-report VERSION", text)
    return re.sub(r"<style>\n.*?</style>", "<style>/* style.css */</style>", text, flags=re.S)


def split_page(text: str, name: str) -> dict[str, str]:
    """A page as two gold files: its markup (the chart specs replaced by a pointer) and its specs, pretty-printed."""
    m = SPECS.search(text)
    if not m:
        return {name: text}
    charts = json.loads(m.group(2))
    for c in charts:
        c["spec"].pop("config", None)  # Altair's default config: changes with Altair, not with us
    specs = f"{name}.charts.json"
    return {name: text[:m.start(2)] + f"/* {specs} */" + text[m.end(2):],
            specs: json.dumps(charts, indent=1, sort_keys=True, ensure_ascii=False) + "\n"}


def check_gold(request, tmp: Path, case: str, files: dict[str, Path]) -> None:
    """Each built file against tests/gold/<case>/<name> (a page's charts in <name>.charts.json); --update-gold
    rewrites them."""
    update = request.config.getoption("--update-gold")
    problems = []
    actual: dict[str, str] = {}
    for name, path in files.items():
        text = scrub(path.read_text(encoding="utf-8"), tmp)
        actual.update(split_page(text, name) if name.endswith(".html") else {name: text})
    for name, text in actual.items():
        gold = GOLD / case / name
        if update:
            gold.parent.mkdir(parents=True, exist_ok=True)
            gold.write_text(text, encoding="utf-8")
            continue
        if not gold.is_file():
            problems.append(f"no gold file {gold.relative_to(GOLD.parent.parent)} (create it with pytest --update-gold)")
            continue
        expected = gold.read_text(encoding="utf-8")
        if text != expected:
            diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                                f"gold/{case}/{name}", "actual", n=2))
            problems.append(f"{case}/{name} differs from its gold file (pytest --update-gold rewrites it):\n{diff[:8000]}")
    if problems:
        pytest.fail("\n".join(problems))


def small(seed: int = 11, noise: float = 0.05, **meta):
    b = make_batch(n_seqs=4, mean_len=8, noise=noise, seed=seed, group_size=2)
    b.token_text = [("␣" if i % 7 == 0 else "") + f" t{i}" + ("\n" if i % 11 == 0 else "") for i in range(b.n_tokens)]
    b.meta = {**b.meta, "model": "gold-model", **meta}
    return b


def test_run_page_and_report(tmp_path, request):
    """One batch: the run page, its report.md, and the index of one run (no trend, no charts)."""
    out = build_site(tmp_path, [("run", small(step=3))])
    check_gold(request, tmp_path, "run", {"index.html": out / "run" / "index.html", "report.md": out / "run" / "report.md",
                                          "summary.json": out / "run" / "summary.json", "samples.js": out / "run" / "samples.js",
                                          "site_index.html": out / "index.html", "index.json": out / "index.json"})


def test_token_ids_without_text(tmp_path, request):
    b = small()
    b.token_text = None
    out = build_site(tmp_path, [("ids", b)])
    check_gold(request, tmp_path, "ids_only", {"index.html": out / "ids" / "index.html"})


def test_precision_gap(tmp_path, request):
    """A shadow pass: the β section and the precision_gap finding."""
    b = small()
    b.shadow_logp = b.trainer_logp + 0.3 * (b.rollout_logp - b.trainer_logp)
    out = build_site(tmp_path, [("shadow", b)])
    check_gold(request, tmp_path, "precision_gap", {"index.html": out / "shadow" / "index.html",
                                                    "summary.json": out / "shadow" / "summary.json"})


def test_index_with_trend_and_precision_matrix(tmp_path, request):
    """Three runs, two dtype pairs, two steps: engine pairs, the precision matrix and the trend chart."""
    runs = [("step_1", small(seed=1, rollout_engine="vllm", rollout_dtype="bf16", trainer_engine="fsdp", trainer_dtype="fp32")),
            ("step_2", small(seed=2, rollout_engine="vllm", rollout_dtype="bf16", trainer_engine="fsdp", trainer_dtype="fp32")),
            ("fp16", small(seed=3, noise=0.01, rollout_engine="vllm", rollout_dtype="fp16", trainer_engine="fsdp",
                           trainer_dtype="fp16"))]
    out = build_site(tmp_path, runs)
    check_gold(request, tmp_path, "index", {"index.html": out / "index.html", "report.md": out / "report.md",
                                            "index.json": out / "index.json"})


def test_compare_page(tmp_path, request):
    before = small(seed=5)
    after = small(seed=5)
    after.trainer_logp = np.minimum(after.rollout_logp + 0.5 * (after.trainer_logp - after.rollout_logp), 0.0)
    out = compare(before, after, labels=("bf16", "fp16")).write(tmp_path / "cmp")
    check_gold(request, tmp_path, "compare", {"index.html": out / "index.html", "compare.md": out / "compare.md",
                                              "compare.json": out / "compare.json"})

"""examples/precision_matrix/: the four-way precision ranking (vLLM CPU × transformers, bf16 / fp16) that one capture
command wrote. The site builds from the committed batches, ranks them as the published order does, and the table
in docs/capture.md states what the batches hold."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tim_report.cli import main
from tim_report.io import load

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "precision_matrix"
ORDER = ["vllm-fp16__hf-fp16", "vllm-bf16__hf-fp16", "vllm-fp16__hf-bf16", "vllm-bf16__hf-bf16"]  # best first


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("precision_matrix") / "site"
    r = CliRunner().invoke(main, ["build", *map(str, sorted(EXAMPLE.glob("*.npz"))), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_the_committed_batches_are_one_capture_and_small():
    files = sorted(EXAMPLE.glob("*.npz"))
    assert [f.stem for f in files] == sorted(ORDER)
    assert sum(f.stat().st_size for f in files) < 300_000
    batches = [load(f) for f in files]
    for b in batches[1:]:  # one set of sampled tokens
        np.testing.assert_array_equal(b.token_ids, batches[0].token_ids)
    for b in batches:
        m = b.meta
        assert (m["sampled_by"], m["seed"], m["model"], m["rollout_engine"], m["trainer_engine"]) == (
            "vllm:bf16", 0, "models/tiny-qwen2", "vllm", "transformers")
        assert (m["sampling"]["n_samples"], m["sampling"]["max_new_tokens"], m["prompts"]["count"]) == (4, 64, 8)
        assert m["rollout_logp"].startswith("sampler" if m["rollout_dtype"] == "bf16" else "re-scored teacher-forced by vllm:fp16")


def test_the_site_builds_and_ranks_the_pairs_as_published(site):
    runs = {r["id"]: r for r in json.loads((site / "index.json").read_text())["runs"]}
    assert sorted(runs) == sorted(ORDER)
    kl = [runs[i]["kl_k3"] for i in ORDER]
    assert kl == sorted(kl) and kl[0] < kl[1] / 20, kl
    assert all(runs[i]["regime"] == "numerical_noise" for i in ORDER)
    assert (site / "index.html").is_file() and "## Precision matrix" in (site / "report.md").read_text()
    assert all((site / i / "index.html").is_file() for i in ORDER)


def _doc_rows() -> dict[str, list[str]]:
    """docs/capture.md's ranking table: run id → its cells."""
    rows = {}
    for line in (REPO / "docs" / "capture.md").read_text().splitlines():
        m = re.match(r"\| (\d) \| vllm (bf16|fp16) \([^)]*\) \| transformers (bf16|fp16) \|(.*)\|$", line)
        if m:
            rows[f"vllm-{m[2]}__hf-{m[3]}"] = [m[1]] + [c.strip() for c in m[4].split("|")]
    return rows


def test_docs_table_states_what_the_batches_hold(site):
    from tim_report.analysis import analyze

    runs = {r["id"]: r for r in json.loads((site / "index.json").read_text())["runs"]}
    rows = _doc_rows()
    assert sorted(rows) == sorted(ORDER)
    for rank, rid in enumerate(ORDER, 1):
        cells, run = rows[rid], runs[rid]
        assert cells[0] == str(rank)
        k3, se, _, median, mean, top = cells[1:7]
        se_measured = analyze(load(EXAMPLE / f"{rid}.npz")).metrics["kl_k3_se"]
        for written, measured in ((k3, run["kl_k3"]), (median, run["abs_delta_median"]), (mean, run["abs_delta_mean"]),
                                  (top, run["abs_delta_max"]), (se, se_measured)):
            assert float(written) == pytest.approx(_rounded(measured, written), rel=1e-9), (rid, written, measured)


def _rounded(value: float, like: str) -> float:
    """`value` to as many significant digits as the written number `like` has ("0.054e-4": 2, "0.000673": 3)."""
    digits = len(like.split("e")[0].replace(".", "").lstrip("0"))
    return float(f"{value:.{digits}g}")

"""The first screen of a run page and the index (issue 33): evidence as people read it, ranges low to high, the
noise band only where it helps the verdict, and engine means that a code bug does not pull."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tim_report.analysis import analyze
from tim_report.analysis.run_index import index_summary
from tim_report.catalogue.evidence import items
from tim_report.io import load
from tim_report.render import RenderOptions, render
from tim_report.testing import make_batch, shifted

FAULTS = Path(__file__).parent / "data" / "faults"


def page(name: str) -> tuple[str, str]:
    report = analyze(load(FAULTS / f"{name}.npz"), run_id=name)
    files = render("run", report, ("html", "md"), RenderOptions())
    return files["index.html"], files["report.md"]


def test_evidence_reads_in_display_names_and_leaves_out_what_was_not_computed():
    html, md = page("rollout_bf16_shadow")  # the precision gap's evidence: corr_beta_advantage is not computed here
    html = html[html.index('<section id="verdict"'):html.index("<details><summary>Precision gap")]  # the first screen
    md = md[:md.index("## Summary")]
    for raw in ("alpha_abs_mean", "corr_beta_advantage", "abs_delta_max", "kl_k3_se", "= —"):
        assert raw not in html and raw.replace("_", "\\_") not in md, raw
    assert "mean |α| (engine)" in html and "β&#39;s share of Σ(log r)²" in html
    assert "KL k3</dt><dd>" in html and "Evidence: tokens " in md


def test_evidence_items_fold_the_standard_error_and_hide_thresholds():
    got = dict(items({"kl_k3": 0.002, "kl_k3_se": 0.001, "threshold_ratio": 10.0, "ratio": 12.0, "z": None,
                      "negative_delta_share": 0.963, "declared_in_meta": 0}, "processed_logprobs"))  # its entry names its keys
    assert got == {"KL k3": "0.002 ± 0.001", "ratio": "12×", "rollout ≥ trainer": "96.3%",
                   "declared in the batch's meta": "no"}


@pytest.mark.parametrize("name", ["temp_rollout_0.7", "temp_trainer_0.6", "temp_rollout_1.5"])
def test_temperature_ranges_read_low_to_high(name):
    d = analyze(load(FAULTS / f"{name}.npz")).diagnosis
    f = next(f for f in d["findings"] if f["id"] == "temperature")
    for text in (f["title"], f["problem"], f["likely_cause"], d["glance"]):
        for lo, hi in re.findall(r"between (\d+\.\d+) and (\d+\.\d+)", text) + re.findall(r"(\d+\.\d+)–(\d+\.\d+)", text):
            assert float(lo) <= float(hi), text


def test_the_noise_band_paragraph_stands_where_it_decides_the_verdict():
    noise_html, noise_md = page("bf16_m")
    bug_html, bug_md = page("shift_next")
    assert "Noise band: dense bf16" in noise_html and "Noise band: dense bf16" in noise_md
    assert "Noise band:" not in bug_html and "Noise band:" not in bug_md  # above "Do not train" it helps nobody
    assert "Do not train on this batch" in bug_html


def test_engine_means_are_over_noise_steps_with_bug_steps_counted_beside():
    """A code bug turned "hf bf16 → fp32" red: its steps are counted beside the engines' means, not in them."""
    meta = {"rollout_engine": "hf", "rollout_dtype": "bf16", "trainer_engine": "hf", "trainer_dtype": "fp32"}
    batches = [make_batch(n_seqs=8, mean_len=32, seed=s) for s in range(3)]
    batches.append(shifted(make_batch(n_seqs=8, mean_len=32, seed=3)))
    reports = []
    for i, b in enumerate(batches):
        b.meta.update(meta)
        reports.append(analyze(b, run_id=f"step_{i}"))
    index = index_summary(reports)
    (pair,) = index["engine_pairs"]
    assert pair["count"] == 3 and pair["with_findings"] == ["step_3"] and pair["health"] == "green"
    noise = [r.metrics["abs_delta_mean"] for r in reports[:3]]
    assert pair["mean_abs_delta"] == pytest.approx(sum(noise) / 3)
    html = render("index", index, ("html", "md"), RenderOptions())
    assert "+ 1 with a finding" in html["index.html"] and "+ 1 with a finding" in html["report.md"]

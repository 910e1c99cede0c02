"""What the page, report.md and the terminal say is true: charts whose shape is the data's, captions and
advice that fit the batch, no averaging of unrelated runs, nothing excluded silently, nothing printed raw."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import ROOT

from tim_report.analysis import analyze
from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.model import StepBatch
from tim_report.render.charts import ratio_chart, run_charts
from tim_report.render.markdown import render_run_md
from tim_report.testing import make_batch, to_padded


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def gaussian_batch(sigma: float = 0.01, n: int = 400_000, seed: int = 0) -> StepBatch:
    rng = np.random.default_rng(seed)
    rollout = -np.abs(rng.standard_normal(n)) - 0.5
    return StepBatch(rollout_logp=rollout, trainer_logp=rollout + sigma * rng.standard_normal(n),
                     offsets=np.arange(0, n + 1, 400), mask=np.ones(n, bool))


# ---- the ratio chart says what the data says ----------------------------------------------------------------


def bars_of(spec: dict) -> list[dict]:
    """The histogram layer's bars: the named dataset it draws (charts keep their bulky data in `datasets`)."""
    layer = next(x for x in spec["layer"] if x["data"].get("name") in spec.get("datasets", {}))
    data = spec["datasets"][layer["data"]["name"]]
    assert data and "d" in data[0]
    return sorted(data, key=lambda b: b["a"])


@pytest.mark.parametrize("sigma", [1e-3, 1e-2, 0.1])
def test_gaussian_noise_draws_one_peak_at_r_equal_1(sigma):
    ratio = analyze(gaussian_batch(sigma)).distributions["ratio"]
    bars = [b for b in bars_of(ratio_chart(ratio)) if b["n"] >= 200]  # bins with enough tokens to be smooth
    heights = [b["d"] for b in bars]
    peak = int(np.argmax(heights))
    assert bars[peak]["a"] <= 0 <= bars[peak]["b"] or abs(bars[peak]["a"]) < 3 * sigma  # the peak sits at r = 1
    assert all(x <= y * 1.05 for x, y in zip(heights[:peak], heights[1:peak + 1])), heights  # rises to the peak
    assert all(y <= x * 1.05 for x, y in zip(heights[peak:], heights[peak + 1:])), heights  # falls after it


def test_raw_counts_on_the_same_bins_would_draw_two_humps():
    """Why the chart plots a density: on these bins the raw counts of unimodal noise dip at r = 1."""
    ratio = analyze(gaussian_batch(0.01)).distributions["ratio"]
    counts, edges = np.array(ratio["counts"]), np.array(ratio["edges"])
    centre = int(np.searchsorted(edges, 0.0)) - 1
    assert counts[centre] < 0.8 * counts.max()  # a hole where the density peaks


def test_ratio_axis_labels_read_as_numbers():
    spec = ratio_chart(analyze(gaussian_batch(0.01)).distributions["ratio"])
    label = json.dumps(spec)
    assert "'1+'" not in label and "1+1e" not in label
    assert "share of tokens per unit of log r" in label


# ---- captions and advice fit the batch -------------------------------------------------------------------------


def caption(report, chart_id: str) -> str:
    return next(c["caption"] for c in run_charts(report) if c["id"] == chart_id)


def test_abs_dp_caption_quotes_verls_band_not_a_made_up_one():
    cap = caption(analyze(make_batch(n_seqs=16, mean_len=32)), "abs_dp")
    assert "0.005" in cap and "0.01" in cap and "verl" in cap and "below 1e-3" not in cap


def test_length_capped_batch_is_not_called_systematic_drift():
    b = make_batch(n_seqs=40, mean_len=64, noise=0.01, seed=3)
    lengths = np.full(40, 64)
    lengths[:3] = (10, 20, 40)  # almost every response hit the same cap
    b = replace(b, offsets=np.concatenate([[0], np.cumsum(lengths)]), rollout_logp=b.rollout_logp[: lengths.sum()],
                trainer_logp=b.trainer_logp[: lengths.sum()], mask=np.ones(lengths.sum(), bool), token_ids=None)
    r = analyze(b)
    assert r.breakdowns["length_growth"]["exponent"] is None
    assert "same length" in caption(r, "seq") and "1 systematic" not in caption(r, "seq")
    assert "drift_with_length" not in [f["id"] for f in r.diagnosis["findings"]]


def test_advice_does_not_suggest_what_the_batch_already_has():
    b = make_batch(n_seqs=16, mean_len=32)
    plain = analyze(b).diagnosis["what_to_check"]
    b.shadow_logp = b.trainer_logp - 1e-4
    shadowed = analyze(b).diagnosis["what_to_check"]
    assert "--shadow" in plain and "--shadow" not in shadowed and "shadow pass" in shadowed


def test_commands_render_as_code(tmp_path):
    b = make_batch(n_seqs=16, mean_len=32)
    r = analyze(b)
    page = r.diagnosis["what_to_check"]
    assert "`tim-report capture --shadow`" in page
    from tim_report.api import Report

    html = Report(**vars(r)).to_html()
    assert "<code>tim-report capture --shadow</code>" in html and "`tim-report" not in html
    md = render_run_md(r)
    assert "`tim-report capture --shadow`" in md and "\\`tim-report" not in md


# ---- a bug is not something to correct -----------------------------------------------------------------------


@pytest.fixture
def shifted(tmp_path):
    b = make_batch(n_seqs=64, mean_len=48, noise=0.01)
    b = replace(b, trainer_logp=np.roll(b.trainer_logp, 1))
    p = tmp_path / "shifted.npz"
    save_batch(b, p)
    return p


def test_no_correction_is_advised_on_a_detected_bug(shifted, tmp_path):
    r = analyze(__import__("tim_report").load(shifted))
    blocked = r.routing["blocked_by_bug"]
    assert blocked and blocked["findings"][0] == "shift" and blocked["message"].startswith("Do not train on this batch")
    md = render_run_md(r)
    verdict = md.split("## Summary")[0]
    assert "Do not train on this batch" in verdict  # said first, before any routing advice
    res = run("check", shifted)
    assert res.exit_code == 1 and f"{shifted}: Do not train on this batch" in res.output
    assert run("build", shifted, "-o", tmp_path / "site").exit_code == 0
    page = (tmp_path / "site" / "shifted" / "index.html").read_text()
    assert page.index("Do not train on this batch") < page.index('id="headline"')
    assert "fix the bug first" in (tmp_path / "site" / "index.html").read_text()


# Every finding the detectors can raise as an error (analysis/detectors.py), and the finite verbs their
# page titles use: the "no correction fixes …" sentence must take a noun phrase, never a title.
ERROR_FINDINGS = {"shift", "dummy_zero", "processed_logprobs", "temperature", "one_side_broken"}
FINITE_VERBS = {"is", "are", "was", "match", "matches", "have", "has", "do", "does", "grows", "explains", "carry",
                "carries", "declares"}


def _error_findings() -> list[dict]:
    """The error findings of every injected fault (tests/data/faults) and of a decorrelated batch (the
    one_side_broken variant that fires on correlation alone)."""
    from tim_report.io import load

    reports = [analyze(load(p)) for p in sorted((ROOT / "tests" / "data" / "faults").glob("*.npz"))]
    b = make_batch(n_seqs=64, mean_len=48, noise=0.01)
    reports.append(analyze(replace(b, trainer_logp=np.random.default_rng(0).permutation(b.rollout_logp))))
    return [f for r in reports for f in r.diagnosis["findings"] if f["severity"] == "error"]


def test_the_no_correction_sentence_reads_well_for_every_error_finding():
    from tim_report.analysis.corrections import blocked_by_bug

    found = _error_findings()
    assert {f["id"] for f in found} == ERROR_FINDINGS
    assert any(f["id"] == "one_side_broken" and f["title"].startswith("Log-prob correlation") for f in found)
    head = "Do not train on this batch: no importance-sampling correction fixes "
    for f in found:
        message = blocked_by_bug({"findings": [f]})["message"]
        assert message.startswith(head) and f["title"][1:] not in message, message
        phrase = message[len(head):message.index(". Fix the bug first; ")]
        outside = re.sub(r"\([^)]*\)", "", phrase)
        assert phrase[0].islower() and not set(re.findall(r"[a-z]+", outside)) & FINITE_VERBS, message


# ---- nothing excluded silently --------------------------------------------------------------------------------


@pytest.fixture
def odd(tmp_path):
    """verl layout with NaN / +inf / positive log-probs and mask values −1, 7.5 and NaN."""
    b = make_batch(n_seqs=8, mean_len=20, seed=2)
    d = to_padded(b, dtype=np.float64)
    d["response_mask"] = d["response_mask"].astype(np.float64)
    d["rollout_log_probs"][0, 0] = np.nan
    d["rollout_log_probs"][0, 1] = np.inf
    d["trainer_logp_extra"] = np.zeros(1)
    d["old_log_probs"][1, 0] = 0.5
    d["response_mask"][2, 0] = -1
    d["response_mask"][2, 1] = 7.5
    d["response_mask"][2, 2] = np.nan
    p = tmp_path / "odd.npz"
    np.savez(p, **d)
    return p


def test_excluded_and_repaired_values_are_counted_once_and_said_everywhere(odd, tmp_path):
    r = analyze(__import__("tim_report").load(odd))
    dp = r.data_problems
    assert dp["counts"]["rollout_nan"] == 1 and dp["counts"]["rollout_inf"] == 1 and dp["counts"]["rollout_positive"] == 0
    assert dp["counts"]["trainer_positive"] == 1 and dp["excluded_tokens"] == 3
    assert dp["input"] == {"mask_nan": 1, "mask_negative": 1, "mask_not_binary": 1}
    res = run("build", odd, "-o", tmp_path / "site")
    assert res.exit_code == 0 and "3 tokens excluded" in res.output and "3 input values repaired" in res.output
    md = (tmp_path / "site" / "odd" / "report.md").read_text()
    assert "3 masked tokens" in md.split("## Findings")[0] and "not 0 and 1" not in md or "other than 0 and 1" in md
    page = (tmp_path / "site" / "odd" / "index.html").read_text()
    assert page.index("were excluded from every number") < page.index('id="headline"')
    check = run("check", odd, "--no-limits", "--fail-on", "never")
    assert check.exit_code == 0 and "3 tokens excluded" in check.output


# ---- the index averages only runs of the same kind, and users can name runs --------------------------------------


def test_meta_names_the_engines_the_file_does_not(tmp_path):
    p = tmp_path / "plain.npz"
    d = to_padded(make_batch(n_seqs=8, mean_len=16), dtype=np.float64)
    np.savez(p, **d)
    res = run("build", p, "-o", tmp_path / "site", "--meta", "rollout_engine=vllm", "--meta", "rollout_dtype=bf16",
              "--meta", "trainer_engine=fsdp", "--meta", "trainer_dtype=fp32", "--meta", "model=qwen-7b", "--meta", "step=12")
    assert res.exit_code == 0, res.output
    run_meta = json.loads((tmp_path / "site" / "plain" / "summary.json").read_text())["run"]["meta"]
    assert (run_meta["rollout_engine"], run_meta["trainer_dtype"], run_meta["model"], run_meta["step"]) == ("vllm", "fp32", "qwen-7b", 12)
    res = run("build", p, "-o", tmp_path / "s2", "--meta", "rollout_engien=vllm")
    assert res.exit_code == 2 and "unknown key 'rollout_engien'" in res.stderr
    assert run("check", p, "--meta", "step=twelve").exit_code == 2


def test_meta_model_class_picks_the_band_the_page_states(tmp_path):
    p = tmp_path / "plain.npz"
    np.savez(p, **to_padded(make_batch(n_seqs=8, mean_len=16), dtype=np.float64))
    res = run("build", p, "-o", tmp_path / "site", "--meta", "model_class=MoE")
    assert res.exit_code == 0, res.output
    band = json.loads((tmp_path / "site" / "plain" / "summary.json").read_text())["diagnosis"]["band"]
    assert band["name"] == "MoE bf16" and "model_class=moe" in band["why"]
    assert "Noise band: MoE bf16" in (tmp_path / "site" / "plain" / "index.html").read_text()
    assert "Noise band: MoE bf16" in (tmp_path / "site" / "plain" / "report.md").read_text()
    res = run("build", p, "-o", tmp_path / "s2", "--meta", "model_class=huge")
    assert res.exit_code == 2 and "model_class=huge" in res.stderr and "dense, moe" in res.stderr


# ---- nothing file-supplied is printed raw -------------------------------------------------------------------------

EVIL_KEYS = ["x\n::notice::all good", "a\x1b[2J\x1b]0;pwned\x07b", "[/]", "[bold red]fake[/]"]


@pytest.mark.parametrize("key", EVIL_KEYS)
def test_hostile_key_names_reach_the_terminal_escaped(tmp_path, key):
    p = tmp_path / "evil.npz"
    np.savez(p, **{key: np.zeros((2, 3))})
    res = run("build", p, "-o", tmp_path / "site")
    assert res.exit_code == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "\x1b" not in res.stderr and "\x07" not in res.stderr
    assert not any(line.startswith("::") for line in res.output.splitlines())
    res = run("inspect", p, "--key", f"rollout={key}", "--key", f"trainer={key}")
    assert "Traceback" not in res.output and "\x1b" not in res.output
    assert not any(line.startswith("::") for line in res.output.splitlines())


def test_inspect_shows_rich_markup_like_keys_literally(tmp_path):
    d = to_padded(make_batch(n_seqs=4, mean_len=8), dtype=np.float64)
    d["[bold]x[/]"] = np.zeros(3)
    d["[/]"] = np.zeros(3)
    p = tmp_path / "m.npz"
    np.savez(p, **d)
    res = run("inspect", p)
    assert res.exit_code == 0, res.output
    assert "[bold]x[/]" in res.output and "[/]" in res.output


def test_one_line_even_when_the_path_holds_a_newline(tmp_path):
    res = run("build", tmp_path / "no\nsuch.npz", "-o", tmp_path / "site")
    line = res.stderr.strip()
    assert res.exit_code == 2 and "\n" not in line and "no\\x0asuch.npz" in line


def test_vllm_install_with_foreign_torchvision_is_named(monkeypatch, tmp_path):
    import importlib.metadata as md

    import tim_report.capture.environment as env

    real = md.version
    monkeypatch.setattr(env, "vllm_available", lambda: True)
    monkeypatch.setattr(env, "version", lambda name: {"torch": "2.13.0+cpu", "torchvision": "0.28.0"}.get(name) or real(name)
                        if name not in ("torchaudio", "torchcodec") else (_ for _ in ()).throw(md.PackageNotFoundError(name)))
    res = run("capture", "--model", ROOT / "models" / "tiny-qwen2", "--prompts", ROOT / "examples" / "prompts.jsonl",
              "--rollout", "vllm:bf16", "-o", tmp_path / "b.npz")
    assert res.exit_code == 2, res.output
    line = res.stderr.strip()
    assert "\n" not in line and "pip uninstall -y torchvision" in line
    assert not (tmp_path / "b.npz").exists()

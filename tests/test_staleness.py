"""The staleness split (issue 37, design §10, docs/staleness.md): tokens sampled by real older versions of the tiny
model (real Adam steps), scored by the newest in fp32, split by lag; a stuck engine, mislabelled versions, negative
lag, no versions, a synchronous batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tim_report import save_step
from tim_report.analysis import analyze
from tim_report.analysis.lag.split import split
from tim_report.analysis.tokens import valid_tokens
from tim_report.cli import main
from tim_report.config import Thresholds
from tim_report.testing import TINY_MODEL, make_batch, sample_versioned_batch

MODEL = str(Path(__file__).resolve().parents[1] / TINY_MODEL)


@pytest.fixture(scope="module")
def stale_run(tiny_versions):
    """Lags 0..3, eight sequences each, the engine in bf16 holding each version it is labelled with."""
    return sample_versioned_batch(tiny_versions, [0, 1, 2, 3], model_dir=MODEL)


def ids(report) -> dict[str, str]:
    return {f["id"]: f["severity"] for f in report.diagnosis["findings"]}


def check(tmp_path: Path, batch, *args: str):
    path = tmp_path / "step.npz"
    save_step(path, batch.rollout_logp, batch.trainer_logp, offsets=batch.offsets, token_ids=batch.token_ids,
              weight_version=batch.weight_version, trainer_version=batch.meta.get("trainer_version"),
              step=batch.meta.get("step"), rollout_dtype=batch.meta.get("rollout_dtype"),
              trainer_dtype=batch.meta.get("trainer_dtype"))
    return CliRunner().invoke(main, ["check", str(path), *args])


def test_real_older_versions_split_by_lag(stale_run, tmp_path):
    report = analyze(stale_run)
    st = report.staleness
    rows = {r["lag"]: r for r in st["by_lag"]}
    assert list(rows) == [0, 1, 2, 3]
    kl = [rows[k]["kl_k3"] for k in range(4)]
    assert kl == sorted(kl) and kl[3] > 20 * kl[0], kl  # KL rises with lag
    assert st["floor"]["within"] and st["floor"]["band"] == "dense bf16"  # lag 0: the bf16 engine's noise only
    assert st["trainer_version"] == 3 and st["trainer_version_source"] == "meta"
    assert 0.9 < st["share"] <= 1 and st["dominant"] == "staleness"
    lo, hi = st["share_interval"]
    assert lo <= st["share"] <= hi
    # exact and additive: the floor's share and each older bucket's excess add up to 1
    assert st["floor_share"] + sum(r["excess_share"] for r in st["by_lag"] if r["lag"] != 0) == pytest.approx(1, abs=1e-12)
    assert sum(r["kl_k3_part"] for r in st["by_lag"]) == pytest.approx(1, abs=1e-12)
    assert "stale_weights" not in ids(report) and "negative_lag" not in ids(report)
    assert "of KL k3 comes from lag ≥ 1 beyond the lag-0 floor" in report.diagnosis["verdict"]
    assert "lag 0 at dense bf16 noise" in report.diagnosis["verdict"]
    # the numerical regime is lag 0's: the batch as a whole is beyond noise (mean |δ| over the band) only by its lag
    assert report.metrics["abs_delta_mean"] > report.diagnosis["thresholds"]["noise_abs_delta_max"]
    assert report.diagnosis["regime"] == "numerical_noise" and report.diagnosis["regime_basis"] == "lag_0"
    assert report.diagnosis["verdict"].startswith("Numerical noise at lag 0: the 384 tokens"), report.diagnosis["verdict"]
    assert "What the lag costs: token ESS" in report.diagnosis["verdict"]
    assert report.diagnosis["glance"].startswith("numerical noise: staleness")
    assert report.diagnosis["what_to_check"].startswith("Nothing in the engines: the mismatch beyond noise is staleness")
    summary = json.loads(json.dumps(report.summary_dict(), default=str))
    assert summary["staleness"]["by_lag"][0]["lag"] == 0 and "kl_k3" in summary["staleness"]["by_lag"][0]
    r = check(tmp_path, stale_run)
    assert r.exit_code == 0, r.output  # staleness at its expected size is not a bug


def test_too_few_lag_zero_tokens_judge_the_mix(stale_run):
    """Lag 0 cut to a handful of tokens: the floor is not judged apart from the lag; with no finding the batch reads as
    the lag's (staleness, not "elevated"), and the verdict says why."""
    from dataclasses import replace

    offsets = stale_run.offsets
    keep = np.ones(stale_run.rollout_logp.shape[0], dtype=bool)
    lag0 = [i for i in range(stale_run.n_seqs) if int(stale_run.weight_version[i]) == 3]
    for i in lag0:  # 4 tokens of each lag-0 sequence stay: 32 in all, under the 64 a finding needs
        keep[offsets[i] + 4:offsets[i + 1]] = False
    report = analyze(replace(stale_run, mask=stale_run.mask & keep))
    assert not report.staleness["floor"]["enough"] and report.diagnosis["regime_basis"] == "lag"
    assert report.diagnosis["regime"] == "staleness"
    assert report.diagnosis["verdict"].startswith("Staleness at lags 1–3: the tokens were sampled by older weights")
    assert "Lag 0 holds only 32 tokens, too few to judge the numerics on" in report.diagnosis["verdict"]
    assert "What the lag costs" in report.diagnosis["verdict"]
    rows = {r["lag"]: r for r in report.staleness["by_lag"]}  # the median ratio: moved at lag 3, not at lag 0
    assert abs(rows[0]["below_one"] - 0.5) < 0.25 and rows[3]["below_one"] > rows[0]["below_one"]


def test_engine_stuck_at_an_old_version(tiny_versions, tmp_path):
    """The engine never received the weights after v0 while the labels say lags 0..3: lag 0 is far beyond its band."""
    stuck = sample_versioned_batch(tiny_versions, [0, 1, 2, 3], model_dir=MODEL, stuck_at=0)
    report = analyze(stuck)
    assert ids(report)["stale_weights"] == "error"
    assert report.diagnosis["regime"] == "systematic" and "regime_basis" not in report.diagnosis
    assert report.diagnosis["verdict"].startswith("Systematic: stale weights"), report.diagnosis["verdict"]
    finding = next(f for f in report.diagnosis["findings"] if f["id"] == "stale_weights")
    assert finding["evidence"]["times_band"] > 1 and "beyond the dense bf16 noise band" in finding["title"]
    r = check(tmp_path, stuck)
    assert r.exit_code == 1 and "stale_weights" in r.output, r.output


def test_lag_zero_tokens_that_look_like_lag_three(tiny_versions):
    """Sequences sampled by v0 but stamped with the trainer's version: the finding names the lag they look like."""
    mislabelled = sample_versioned_batch(tiny_versions, [3, 1, 2, 3], label_lags=[0, 1, 2, 3], model_dir=MODEL)
    finding = next(f for f in analyze(mislabelled).diagnosis["findings"] if f["id"] == "stale_weights")
    assert finding["evidence"]["looks_like_lag"] in (2, 3) and "look like lag" in finding["title"]


def test_synchronous_batch_raises_no_staleness_finding(tiny_versions):
    sync = sample_versioned_batch(tiny_versions, [0, 0], model_dir=MODEL)
    report = analyze(sync)
    assert [r["lag"] for r in report.staleness["by_lag"]] == [0]
    assert report.staleness["share"] == 0 and report.staleness["floor"]["within"]
    assert not {"stale_weights", "negative_lag", "version_span", "lag_ess_collapse"} & set(ids(report))
    assert "every token is at lag 0" in report.diagnosis["verdict"]


def test_no_versions_claims_no_lag(stale_run):
    from dataclasses import replace

    report = analyze(replace(stale_run, weight_version=None))
    assert report.staleness is None and "staleness" not in report.summary_dict()
    assert "Staleness" not in report.diagnosis["verdict"]


def test_negative_lag_and_unknown_versions():
    b = make_batch(n_seqs=24, mean_len=40, seed=2)
    b.weight_version = np.array(["5"] * 8 + ["6"] * 8 + ["7"] * 4 + [""] * 2 + ["v?"] * 2)
    b.meta["trainer_version"] = 6
    report = analyze(b)
    rows = {r["lag"]: r for r in report.staleness["by_lag"]}
    assert set(rows) == {-1, 0, 1, "unknown"}
    assert rows["unknown"]["tokens"] == report.staleness["unknown_tokens"] > 0  # missing stays missing, never lag 0
    assert ids(report)["negative_lag"] == "warn"
    finding = next(f for f in report.diagnosis["findings"] if f["id"] == "negative_lag")
    assert finding["evidence"]["min_lag"] == -1


def test_trainer_version_from_the_step_and_none():
    b = make_batch(n_seqs=8, mean_len=20)
    b.weight_version = np.array(["3"] * 8)
    b.meta["step"] = 4
    st = analyze(b).staleness
    assert st["trainer_version_source"] == "step" and st["by_lag"][0]["lag"] == 1
    del b.meta["step"]
    report = analyze(b)
    assert report.staleness["trainer_version"] is None and report.staleness["by_lag"][0]["lag"] == "unknown"
    assert "no lag is claimed" in report.diagnosis["verdict"]


def test_per_token_versions_and_spans():
    """Per-token versions split a sequence across buckets; a sequence of three versions is a version span."""
    b = make_batch(n_seqs=12, mean_len=30, seed=4)
    b.meta["trainer_version"] = 9
    b.weight_version = np.array(["7,8,9"] * 4 + ["9"] * 8)
    tv = np.full(b.n_tokens, 9, np.int64)
    tv[: b.offsets[4]] = 8
    b.token_version = tv
    tok, _ = valid_tokens(b)
    st = split(b, tok, Thresholds())
    assert {r["lag"]: r["tokens"] for r in st["by_lag"]} == {0: b.n_tokens - int(b.offsets[4]), 1: int(b.offsets[4])}
    report = analyze(b)
    assert ids(report)["version_span"] == "warn"


def test_idle_correction_reads_the_logged_clip_fraction(stale_run):
    from dataclasses import replace

    logged = replace(stale_run, meta={**stale_run.meta, "ppo_clip_fraction": 0.0})
    found = next(f for f in analyze(logged).diagnosis["findings"] if f["id"] == "idle_correction")
    assert found["evidence"]["expected"] > 0.01 and found["evidence"]["floor_from"] == "lag 0"
    assert "idle_correction" not in ids(analyze(replace(stale_run, meta={**stale_run.meta, "ppo_clip_fraction": 0.12})))


def test_canonical_file_keeps_versions(tmp_path):
    from tim_report.io import load

    b = make_batch(n_seqs=4, mean_len=10)
    path = save_step(tmp_path / "s.npz", b.rollout_logp, b.trainer_logp, offsets=b.offsets,
                     weight_version=[3, [2, 3], None, 4], token_version=np.full(b.n_tokens, 3), trainer_version=4)
    back = load(path)
    assert back.weight_version.tolist() == ["3", "2,3", "", "4"]
    assert back.token_version.dtype == np.int64 and (back.token_version == 3).all()
    assert back.meta["trainer_version"] == 4


def test_page_report_md_and_summary_show_the_split(stale_run, tmp_path):
    """One view model for both formats: the per-lag table on the page's first screen and in report.md."""
    from helpers import build_site

    site = build_site(tmp_path, [("async", stale_run)])
    page = (site / "async" / "index.html").read_text(encoding="utf-8")
    md = (site / "async" / "report.md").read_text(encoding="utf-8")
    summary = json.loads((site / "async" / "summary.json").read_text(encoding="utf-8"))
    assert page.index('id="staleness"') < page.index('id="headline"')  # in the verdict's column, before the numbers
    for text in (page, md):
        assert "Staleness by lag" in text and "KL beyond lag 0" in text and "at noise" in text
    assert md.index("<summary>Staleness by lag</summary>") < md.index("<summary>Findings</summary>")
    cost = summary["staleness"]["cost"]  # what the lag costs as importance weights, said under the table
    assert cost["tokens"] == 1152 and cost["clipped"] > cost["clipped_lag0"] and cost["ess"] < 1
    assert "What the lag costs: token ESS" in page and "What the lag costs: token ESS" in md
    rows = summary["staleness"]["by_lag"]
    assert [r["lag"] for r in rows] == [0, 1, 2, 3] and summary["staleness"]["dominant"] == "staleness"


def test_generate_calls_become_token_ranges():
    """slime / miles: one version per generate call; miles' spans name their tokens; calls that match the trained
    spans one for one split a multi-turn sample; a partial rollout's resumed calls inside one span do not."""
    from tim_report.io.sequences import call_token_versions, joined_versions
    from tim_report.model import UNKNOWN_VERSION

    mask = np.array([1, 1, 0, 0, 1, 1, 1], bool)  # two assistant turns around a tool's output
    assert call_token_versions(["4", "5"], mask, prompt_len=3).tolist() == [4, 4, 4, 4, 5, 5, 5]
    assert call_token_versions(["4"], mask, 3) is None  # one call: the sequence's version says it
    assert call_token_versions(["4", "5", "5"], mask, 3) is None  # resumed inside a span: no token mapping
    spans = [[{"version": "7", "abs_start": 3, "abs_end": 5}], [{"version": "8", "abs_start": 7, "abs_end": 10}]]
    assert call_token_versions(spans, mask, 3).tolist() == [7, 7, UNKNOWN_VERSION, UNKNOWN_VERSION, 8, 8, 8]
    assert joined_versions(spans, "d", 0) == "7,8" and joined_versions(["4", "5", "5"], "d", 0) == "4,5"


def test_second_lane_split_is_the_same(monkeypatch):
    """A large batch measures the split on analyze's second lane; the report is the same as in the diagnosis."""
    import tim_report.analysis as analysis

    b = make_batch(n_seqs=40, mean_len=30, seed=5)
    b.weight_version = np.array([str(7 - i % 3) for i in range(40)])
    b.meta["trainer_version"] = 7
    here = analyze(b).staleness
    monkeypatch.setattr(analysis, "THREAD_MIN_TOKENS", 0)
    assert analysis.analyze(b).staleness == here


def test_meta_names_the_trainer_version_and_the_logged_clip_fraction(stale_run, tmp_path):
    """`--meta ppo_clip_fraction=0` feeds the idle-correction check; a value that is no fraction is bad input."""
    r = check(tmp_path, stale_run, "--meta", "ppo_clip_fraction=0", "--fail-on", "warn", "--no-limits")
    assert r.exit_code == 1 and "warn idle_correction" in r.output, r.output
    r = check(tmp_path, stale_run, "--meta", "ppo_clip_fraction=2")
    assert r.exit_code == 2 and "ppo_clip_fraction=2: not a fraction" in r.output
    r = check(tmp_path, stale_run, "--meta", "trainer_version=2")  # the lags move by one: lag −1 appears
    assert r.exit_code == 0 and "negative lag (384 tokens) (warn)" in r.output and "position" not in r.output


def test_report_md_is_valid_gfm(stale_run, tmp_path):
    from helpers import build_site, check_gfm

    site = build_site(tmp_path, [("async", stale_run)])
    tokens = check_gfm((site / "async" / "report.md").read_text(encoding="utf-8"))  # asserts what GitHub would mangle
    assert any(t.type == "html_block" and "<summary>Staleness by lag</summary>" in t.content for t in tokens)


@pytest.mark.parametrize("bad", ["abc", float("nan"), True, np.bool_(True), "--3"])
def test_invalid_trainer_version_claims_no_lag_and_says_why(bad):
    """A trainer_version that is present but not an integer version is unknown: no lag from the step, and a note."""
    b = make_batch(n_seqs=8, mean_len=20)
    b.weight_version = np.array(["3"] * 8)
    b.meta.update(step=5, trainer_version=bad)
    report = analyze(b)
    st = report.staleness
    assert st["trainer_version"] is None and st["trainer_version_source"] == "invalid"
    assert [r["lag"] for r in st["by_lag"]] == ["unknown"] and st["share"] is None
    assert "not an integer version" in report.diagnosis["verdict"]
    assert any("trainer_version" in n and "unknown" in n for n in report.summary_dict()["run"]["notes"])
    b.meta["trainer_version"] = None  # absent (null): the step stands in, as documented
    assert analyze(b).staleness["trainer_version_source"] == "step"


@pytest.mark.parametrize("name", ["top_p", "top_k"])
@pytest.mark.parametrize("kept", [True, False])
def test_a_truncated_sampler_at_lag_0_is_truncated_sampling_not_stale_weights(name, kept):
    """A SmolLM2 top-p 0.9 / top-k 20 capture, every token labelled with the trainer's version (a synchronous framework
    that records versions): its rollout log-probs sit log S below the trainer's on every token, lag 0's too. That is
    truncated sampling (info, check passes), not a sync that did not arrive (it read stale_weights, error)."""
    from dataclasses import replace

    from tim_report.io import load

    b = load(Path(__file__).parent / "data" / "real_model" / f"{name}.npz")
    b = replace(b, meta={**b.meta, "trainer_version": 5}, weight_version=np.asarray(["5"] * b.n_seqs))
    if not kept:
        b = replace(b, kept_ids=None, kept_offsets=None, kept_log_mass=None)
    d = analyze(b).summary_dict()["diagnosis"]
    assert [(f["id"], f["severity"]) for f in d["findings"]] == [("processed_logprobs", "info")], d["findings"]
    assert d["regime"] == "elevated"

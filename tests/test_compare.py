"""`tim-report compare` and `tim_report.analysis.compare`: directions, per-token counts, atomic output, escaping."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import check_gfm

from tim_report.analysis.compare import compare_batches
from tim_report.cli import main
from tim_report.config import COMPARE_TOKEN_TOL as TOKEN_TOL
from tim_report.io import save_batch
from tim_report.render.compare.markdown import render_compare_md
from tim_report.render.md import MAX_CHARS as MD_LIMIT
from tim_report.render.md import width
from tim_report.testing import make_batch

EVIL = "<script>alert(1)</script>"
WORDS = [EVIL, " the", "\n", "|pipe|", "**b**", "a&b", "`tick`", "x"]


def with_text(batch, words=WORDS):
    batch.token_text = [words[i % len(words)] for i in range(batch.n_tokens)]
    return batch


@pytest.fixture
def pair():
    """Same tokens (same seed), the second with 5x less noise: every metric of size should improve."""
    return with_text(make_batch(n_seqs=24, mean_len=40, noise=0.05, seed=3)), \
        with_text(make_batch(n_seqs=24, mean_len=40, noise=0.01, seed=3))


@pytest.fixture
def files(tmp_path, pair):
    b, a = pair
    pb, pa = tmp_path / "noisy.npz", tmp_path / "clean.npz"
    save_batch(b, pb)
    save_batch(a, pa)
    return pb, pa


def row(cmp, key):
    return next(r for r in cmp["metrics"] if r["key"] == key)


def test_directions_follow_the_better_side(pair):
    b, a = pair
    cmp = compare_batches(b, a, labels=("noisy", "clean"))
    for key in ("abs_delta_median", "abs_delta_mean", "kl_k3", "kl_k2", "ess", "ess_seq", "corr_logp", "abs_dp_mean"):
        assert row(cmp, key)["direction"] == "better", key
    assert row(cmp, "tokens")["direction"] == "same" and row(cmp, "tokens")["better"] is None
    assert row(cmp, "ess")["change"] > 0 and row(cmp, "kl_k3")["change"] < 0
    rev = compare_batches(a, b)
    for key in ("abs_delta_median", "kl_k3", "ess", "corr_logp"):
        assert row(rev, key)["direction"] == "worse", key
    assert cmp["tally"]["better"] >= 10 and cmp["tally"]["worse"] == 0
    json.dumps(cmp, allow_nan=False)


def test_identical_batches_are_same(pair):
    b, _ = pair
    cmp = compare_batches(b, copy.deepcopy(b))
    assert {r["direction"] for r in cmp["metrics"]} <= {"same", "n/a"}
    pt = cmp["per_token"]
    assert pt["counts"] == {"better": 0, "worse": 0, "same": pt["tokens_compared"]}


def test_ratio_histograms_share_bins(pair):
    b, a = pair
    d = compare_batches(b, a)["distributions"]["ratio"]
    assert len(d["before"]["counts"]) == len(d["after"]["counts"]) == len(d["edges"]) - 1
    assert sum(d["before"]["counts"]) == b.n_tokens and sum(d["after"]["counts"]) == a.n_tokens
    assert d["edges"][-1] >= np.abs(b.trainer_logp - b.rollout_logp).max()


def test_per_token_counts_and_extremes():
    """Half the tokens move closer (better), a quarter further (worse), the rest are untouched."""
    b = make_batch(n_seqs=16, mean_len=30, noise=0.05, seed=7)
    a = copy.deepcopy(b)
    t = b.n_tokens
    delta = b.trainer_logp - b.rollout_logp
    first, second = slice(0, t // 2), slice(t // 2, 3 * t // 4)
    a.trainer_logp = b.trainer_logp.copy()
    a.trainer_logp[first] = b.rollout_logp[first] + 0.5 * delta[first]
    a.trainer_logp[second] = np.minimum(b.rollout_logp[second] + 3.0 * delta[second], 0.0)
    change = np.abs(a.trainer_logp - a.rollout_logp) - np.abs(delta)
    expected = {"better": int((change < -TOKEN_TOL).sum()), "worse": int((change > TOKEN_TOL).sum())}
    expected["same"] = t - expected["better"] - expected["worse"]
    pt = compare_batches(b, a)["per_token"]
    assert pt["available"] and pt["tokens_compared"] == t
    assert pt["counts"] == expected
    assert expected["better"] > t // 3 and expected["worse"] > t // 8
    assert pt["rollout_changed"] == 0 and pt["trainer_changed"] == expected["better"] + expected["worse"]
    best = pt["most_improved"]
    assert len(best) == 20 and best[0]["abs_change"] == pytest.approx(change.min())
    assert all(x["abs_change"] <= y["abs_change"] for x, y in zip(best, best[1:]))
    worst = pt["most_worsened"]
    assert worst[0]["abs_change"] == pytest.approx(change.max())
    k = int(b.offsets[worst[0]["sequence"]] + worst[0]["position"])
    assert k == int(np.argmax(change))
    assert worst[0]["token_id"] == int(b.token_ids[k])
    seqs = pt["sequences"]
    assert seqs["compared"] == b.n_seqs and sum(seqs["counts"].values()) == b.n_seqs
    assert seqs["most_improved"][0]["sequence"] < seqs["most_worsened"][0]["sequence"]  # first half improved


def test_different_tokens_skip_per_token_part():
    b = make_batch(n_seqs=16, mean_len=30, seed=1)
    other = make_batch(n_seqs=16, mean_len=30, seed=2)
    pt = compare_batches(b, other)["per_token"]
    assert pt["available"] is False and "not over the same tokens" in pt["reason"]
    same_shape = copy.deepcopy(b)
    same_shape.token_ids = (same_shape.token_ids + 1) % 2048
    pt = compare_batches(b, same_shape)["per_token"]
    assert pt["available"] is False and "token ids differ" in pt["reason"]
    no_ids = copy.deepcopy(same_shape)
    no_ids.token_ids = None
    pt = compare_batches(b, no_ids)["per_token"]
    assert pt["available"] is True and "only the shape" in pt["how"]


def test_cli_writes_three_files(tmp_path, files):
    pb, pa = files
    out = tmp_path / "cmp"
    res = CliRunner().invoke(main, ["compare", str(pb), str(pa), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "tokens" in res.output and "better" in res.output
    assert sorted(p.name for p in out.iterdir()) == [".tim-report.json", ".tim-report.lock", "assets", "compare.json",
                                                     "compare.md", "index.html"]
    assert sorted(p.name for p in (out / "assets").iterdir()) == ["style.css", "tim.js", "vega.js"]
    data = json.loads((out / "compare.json").read_text())
    assert data["labels"] == {"before": "noisy", "after": "clean"}
    assert data["per_token"]["available"]
    page = (out / "index.html").read_text()
    assert "Per token" in page and 'id="chart-ratio"' in page and 'id="chart-seqs"' in page
    assert '<script src="assets/vega.js"></script>' in page and "https://" not in page.split("<script")[0]
    md = (out / "compare.md").read_text()
    assert "(index.html)" in md
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    res = CliRunner().invoke(main, ["compare", str(pb), str(pa), "-o", str(out)])
    assert res.exit_code == 0
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == first  # deterministic
    alone = tmp_path / "alone"
    assert CliRunner().invoke(main, ["compare", str(pb), str(pa), "-o", str(alone), "--self-contained"]).exit_code == 0
    assert sorted(p.name for p in alone.iterdir()) == [".tim-report.json", ".tim-report.lock", "compare.json", "compare.md",
                                                       "index.html"]
    assert (alone / "index.html").read_text().count("window.vegaEmbed=") == 1  # one file to attach to a PR


def test_cli_different_tokens_is_not_an_error(tmp_path):
    pb, pa = tmp_path / "a.npz", tmp_path / "b.npz"
    save_batch(make_batch(n_seqs=8, mean_len=20, seed=1), pb)
    save_batch(make_batch(n_seqs=9, mean_len=20, seed=2), pa)
    out = tmp_path / "cmp"
    res = CliRunner().invoke(main, ["compare", str(pb), str(pa), "-o", str(out), "--label-before", "x", "--label-after", "y"])
    assert res.exit_code == 0, res.output
    assert "skipped" in res.output
    assert "not over the same tokens" in (out / "index.html").read_text()
    assert "not over the same tokens" in (out / "compare.md").read_text()


@pytest.mark.parametrize("bad", ["missing", "garbage"])
def test_bad_input_exit_2_nothing_written(tmp_path, files, bad):
    pb, _ = files
    target = tmp_path / "nope.npz"
    if bad == "garbage":
        target.write_bytes(b"not a zip file at all")
    out = tmp_path / "out" / "cmp"
    res = CliRunner().invoke(main, ["compare", str(pb), str(target), "-o", str(out)])
    assert res.exit_code == 2
    err = res.stderr if hasattr(res, "stderr") else res.output
    assert err.startswith("tim-report: error:") and err.strip().count("\n") == 0
    assert not out.exists()
    assert not any(p.name.startswith(".tim-report-") for p in tmp_path.rglob("*"))


def test_html_escapes_token_text_and_labels(tmp_path, files):
    pb, pa = files
    out = tmp_path / "cmp"
    res = CliRunner().invoke(main, ["compare", str(pb), str(pa), "-o", str(out), "--label-before", "<b>old</b>"])
    assert res.exit_code == 0, res.output
    page = (out / "index.html").read_text()
    assert EVIL not in page and "<b>old</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;old&lt;/b&gt;" in page
    md = (out / "compare.md").read_text()
    assert EVIL not in md and "<b>old</b>" not in md


def _md_html(text: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").render(text)


def test_markdown_is_bounded_and_valid(pair):
    b, a = pair
    cmp = compare_batches(b, a, labels=("noisy", "clean"))
    md = render_compare_md(cmp, "https://example.org/cmp/index.html")
    assert len(md) <= MD_LIMIT
    assert "▲" in md and "▼" in md and "🟢" in md
    assert "[Full comparison with charts](https://example.org/cmp/index.html)" in md
    html = _md_html(md)
    assert html.count("<table>") == 2  # the metrics and the most improved tokens (none got worse)
    # every metric row has the header's column count
    table = [ln for ln in md.splitlines() if ln.startswith("| ")]
    header_cols = table[0].count(" | ")
    assert all(ln.count(" | ") == header_cols for ln in table[: len(cmp["metrics"]) + 1])
    assert "<script" not in html and "<b>" not in html

    huge = copy.deepcopy(cmp)
    for t in huge["per_token"]["most_improved"] + huge["per_token"]["most_worsened"]:
        t["token"] = "|<x>" * 2000
    md = render_compare_md(huge)
    assert len(md) <= MD_LIMIT
    assert "<x>" not in md


def test_markdown_budget_counts_utf16_units_with_emoji_and_long_tokens(pair):
    """Emoji count twice where GitHub counts; tokens of any length never push compare.md past the limit."""
    b, a = pair
    cmp = compare_batches(b, a, labels=("🔥" * 200, "after"))
    for t in cmp["per_token"]["most_improved"] + cmp["per_token"]["most_worsened"]:
        t["token"] = "😀|`<" * 5000
    for r in cmp["metrics"]:
        r["name"] = "📈" * 3000
    md = render_compare_md(cmp)
    assert width(md) <= MD_LIMIT, width(md)
    assert len(md) < width(md)  # the emoji really are there, and counted twice
    check_gfm(md)
    assert "## tim-report compare:" in md and "| metric |" in md


def test_compare_says_why_first_the_findings_that_differ(tmp_path):
    """A fix for an off-by-one: the PR comment leads with what differs (the regime and the finding that went away), not
    just "systematic"; the reverse says which finding appeared."""
    from tim_report.testing import shifted

    broken, fixed = shifted(make_batch(n_seqs=16, mean_len=32, noise=0.01, seed=5)), make_batch(n_seqs=16, mean_len=32, noise=0.01, seed=5)
    pb, pa = tmp_path / "broken.npz", tmp_path / "fixed.npz"
    save_batch(broken, pb)
    save_batch(fixed, pa)
    res = CliRunner().invoke(main, ["compare", str(pb), str(pa), "-o", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    why = json.loads((tmp_path / "cmp" / "compare.json").read_text(encoding="utf-8"))["why"]
    assert why["regime"] == {"before": "systematic", "after": "numerical_noise", "changed": True}
    assert [f["id"] for f in why["gone"]] == ["shift"] and why["appeared"] == [] and why["same"] == []
    assert why["sentence"].startswith("After is numerical noise, before was systematic (better). Gone from after: Off-by-one")
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    check_gfm(md)
    assert md.index("**Why:** After is numerical noise, before was systematic (better). Gone from after: Off-by-one") \
        < md.index("| metric |")
    assert 'id="why"' in (tmp_path / "cmp" / "index.html").read_text(encoding="utf-8")
    back = compare_batches(fixed, broken)["why"]
    assert [f["id"] for f in back["appeared"]] == ["shift"] and "(worse). New in after: Off-by-one" in back["sentence"]
    same = compare_batches(fixed, make_batch(n_seqs=16, mean_len=32, noise=0.02, seed=5))["why"]
    assert same["sentence"].startswith("Both sides are numerical noise. No finding differs")


def test_ppo_eps_reaches_compare_as_it_does_build(tmp_path, files):
    """`compare --ppo-eps` sets the clip range of phantom clipping on both sides, as `build` and `check` do."""
    pb, pa = files

    def phantom(*extra: str) -> tuple[float, float]:
        out = tmp_path / f"cmp{len(extra)}"
        res = CliRunner().invoke(main, ["compare", str(pb), str(pa), "-o", str(out), *extra])
        assert res.exit_code == 0, res.output
        row = next(m for m in json.loads((out / "compare.json").read_text())["metrics"] if m["key"] == "phantom_clip")
        return row["before"], row["after"]

    default, narrow = phantom(), phantom("--ppo-eps", "0.0001", "0.0001")
    assert narrow[0] > default[0] and narrow[1] > default[1]

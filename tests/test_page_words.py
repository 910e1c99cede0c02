"""What the pages and report.md say to someone reading them elsewhere (issue 39): the model by its name, never a local
path; the index's verdict with its cause; a precision-gap box that says in words why it is empty."""

from __future__ import annotations

import json

import pytest
from helpers import build_site

from tim_report.model import model_label
from tim_report.testing import make_batch, shifted

LOCAL = "/home/someone/checkpoints/Qwen2.5-0.5B-Instruct"


@pytest.mark.parametrize("value, name", [
    (LOCAL, "Qwen2.5-0.5B-Instruct"), (LOCAL + "/", "Qwen2.5-0.5B-Instruct"), ("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B"),
    ("./ckpt/step_9", "step_9"), ("~/m/llama", "llama"),
    ("/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-7B/snapshots/0123abcd", "Qwen2.5-7B"),
    ("C:\\models\\llama-3-8b", "llama-3-8b"), ("synthetic", "synthetic"), ("<b>x</b>", "<b>x</b>"), ("", None), (None, None)])
def test_a_model_is_named_never_by_its_path(value, name):
    assert model_label({"model": value}) == name


def test_pages_report_md_and_the_index_show_the_models_name_not_its_folder(tmp_path):
    b = make_batch(n_seqs=8, mean_len=16)
    b.meta = {**b.meta, "model": LOCAL}
    out = build_site(tmp_path, [("run", b)])
    for path in (out / "run" / "index.html", out / "run" / "report.md", out / "index.html", out / "report.md",
                 out / "index.json"):
        text = path.read_text("utf-8")
        assert "/home/someone" not in text, path
    assert '<span class="model">Qwen2.5-0.5B-Instruct</span>' in (out / "run" / "index.html").read_text("utf-8")
    assert (out / "run" / "report.md").read_text("utf-8").startswith("# Qwen2.5-0.5B-Instruct: ")
    assert json.loads((out / "index.json").read_text("utf-8"))["runs"][0]["model"] == "Qwen2.5-0.5B-Instruct"


def test_capture_records_the_models_name_not_its_folder(tmp_path):
    from tim_report.capture.model_path import model_name

    folder = tmp_path / "snapshots" / "my-finetune"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert model_name(folder) == "my-finetune"
    (folder / "config.json").write_text(json.dumps({"_name_or_path": "/data/ckpt/step_900"}))
    assert model_name(folder) == "step_900"


def test_the_index_says_the_cause_beside_a_systematic_verdict(tmp_path):
    bad = shifted(make_batch(n_seqs=16, mean_len=32, seed=1))
    out = build_site(tmp_path, [("clean", make_batch(n_seqs=16, mean_len=32)), ("bad", bad)])
    row = next(r for r in json.loads((out / "index.json").read_text("utf-8"))["runs"] if r["id"] == "bad")
    assert row["regime"] == "systematic" and row["findings"][0] == "shift"
    page, md = (out / "index.html").read_text("utf-8"), (out / "report.md").read_text("utf-8")
    assert 'systematic<br><span class="small">off-by-one</span>' in page
    assert "| ❌ systematic (off-by-one) |" in md


def test_the_precision_gap_box_without_a_shadow_pass_says_so_in_words(tmp_path):
    out = build_site(tmp_path, [("run", make_batch(n_seqs=8, mean_len=16))])
    page = (out / "run" / "index.html").read_text("utf-8")
    assert "Precision gap β: not measured (no shadow pass)" in page
    assert "To measure it, capture with a shadow pass (<code>tim-report capture --shadow</code>)" in page
    assert "<th>available" not in page and "how_to_get" not in page


def test_a_geometric_rs_that_rejects_most_of_a_noisy_batch_says_what_that_means(tmp_path):
    """bf16-sized noise over short sequences: Geometric RS's ±0.001-nat band rejects most of them on noise alone; the
    what-if table says so beside the row, on the page and in report.md. A batch whose noise fits the band gets no note."""
    from tim_report.analysis import analyze

    geo = next(w for w in analyze(make_batch(n_seqs=32, mean_len=24, noise=0.01)).what_if if w["id"] == "geo_rs")
    assert geo["sequence_fraction"] > 0.5 and "tighter than this precision's noise" in geo["note"]
    quiet = next(w for w in analyze(make_batch(n_seqs=32, mean_len=24, noise=1e-6)).what_if if w["id"] == "geo_rs")
    assert "note" not in quiet
    out = build_site(tmp_path, [("run", make_batch(n_seqs=32, mean_len=24, noise=0.01))])
    for name in ("index.html", "report.md"):
        text = (out / "run" / name).read_text("utf-8")
        assert "Geometric RS would reject" in text and "use a token-level correction" in text, name

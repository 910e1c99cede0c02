"""The commands as a user runs them: build and inspect, good input and bad."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import read_samples

from tim_report.cli import main
from tim_report.io import save_batch
from tim_report.testing import make_batch, to_padded


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_build_writes_summary_and_samples(tmp_path, verl_pt, trl_npz):
    out = tmp_path / "site"
    res = run("build", verl_pt, trl_npz, "-o", out)
    assert res.exit_code == 0, res.output
    for rid in ("verl_step_7", "trl"):
        summary = json.loads((out / rid / "summary.json").read_text())
        assert summary["schema_version"] == 1 and summary["run"]["id"] == rid
        for section in ("metrics", "breakdowns", "routing", "what_if", "verl", "data_problems"):
            assert section in summary
        for key in ("kl_k1 kl_k2 kl_k3 chi2_token chi2_seq ess ess_seq ppl_rollout ppl_trainer log_ppl_diff corr_logp "
                    "spearman_logp corr_prob abs_dp_mean abs_dp_max token_mult_prob_error outside_2x outside_5x "
                    "phantom_clip veto_token_fraction veto_seq_fraction top1pct_mass abs_delta_mean abs_delta_median "
                    "abs_delta_p99 abs_delta_max bias").split():
            assert key in summary["metrics"], key
        verl = summary["verl"]  # verl's own names, to hold against a verl dashboard
        assert verl["rollout_corr/kl"] == summary["metrics"]["kl_k1"]
        assert verl["rollout_corr/k3_kl"] == pytest.approx(summary["metrics"]["kl_k3"])
        assert verl["training/rollout_probs_diff_mean"] == summary["metrics"]["abs_dp_mean"]
        for name in ("rollout_corr/chi2_token", "rollout_corr/chi2_seq", "rollout_corr/training_ppl",
                     "rollout_corr/rollout_ppl", "rollout_corr/log_ppl_diff", "training/rollout_probs_diff_max",
                     "training/rollout_actor_probs_pearson_corr"):
            assert isinstance(verl[name], float), name
        doc = read_samples(out / rid)
        samples = doc["samples"]
        assert [s["kind"] for s in samples].count("worst") == 8
        assert doc["schema_version"] == 3
        assert set(doc["derived"]) == {"diff", "r", "p_rollout", "p_trainer", "pos", "mask", "valid", "token"}
        cols = samples[0]["rows"]  # one array per field, one value per token row; the flags as the rows where false
        assert {"rollout_logp", "trainer_logp", "unmasked", "invalid"} <= set(cols)
        per_row = {k: v for k, v in cols.items() if k not in ("unmasked", "invalid")}
        assert len({len(v) for v in per_row.values()}) == 1 and len(cols["rollout_logp"]) == samples[0]["tokens"]
    assert "verl_step_7" in res.output


def test_worst_samples_really_are_worst(tmp_path):
    b = make_batch(30, 20, seed=9)
    b.trainer_logp[b.tokens_of(17)] -= 0.7
    save_batch(b, tmp_path / "w.npz")
    assert run("build", tmp_path / "w.npz", "-o", tmp_path / "s").exit_code == 0
    samples = read_samples(tmp_path / "s" / "w")["samples"]
    assert samples[0]["sequence"] == 17 and samples[0]["kind"] == "worst"


def test_samples_columns_hold_every_float32_log_prob_exactly(tmp_path):
    """samples.js (schema 3) writes each sample's rows as columns to 9 significant digits: read back as float32,
    every float32 log-prob is exactly the one saved."""
    b = make_batch(6, 20, seed=4)
    b.rollout_logp = b.rollout_logp.astype(np.float32).astype(np.float64)
    save_batch(b, tmp_path / "c.npz")
    assert run("build", tmp_path / "c.npz", "-o", tmp_path / "s").exit_code == 0
    doc = read_samples(tmp_path / "s" / "c")
    for s in doc["samples"]:
        cols, sl = s["rows"], b.tokens_of(s["sequence"])
        want = b.rollout_logp[sl][: len(cols["rollout_logp"])]  # the rows are the sequence's first tokens
        assert np.array_equal(np.asarray(cols["rollout_logp"], dtype=np.float32), want.astype(np.float32))


def test_run_id_option_and_safe_names(tmp_path, trl_npz):
    odd = tmp_path / "my run (v2)!.npz"
    odd.write_bytes(trl_npz.read_bytes())
    assert run("build", odd, "-o", tmp_path / "s").exit_code == 0
    assert (tmp_path / "s" / "my-run-v2" / "summary.json").exists()
    assert run("build", trl_npz, "--run-id", "bf16 vs fp32", "-o", tmp_path / "s").exit_code == 0
    assert (tmp_path / "s" / "bf16-vs-fp32" / "summary.json").exists()


def test_build_is_deterministic(tmp_path, verl_pt):
    run("build", verl_pt, "-o", tmp_path / "a")
    run("build", verl_pt, "-o", tmp_path / "b")
    for name in ("summary.json", "samples.js"):
        assert (tmp_path / "a" / "verl_step_7" / name).read_bytes() == (tmp_path / "b" / "verl_step_7" / name).read_bytes()


def test_inspect_shows_mapping(verl_pt):
    res = run("inspect", verl_pt)
    assert res.exit_code == 0
    assert "rollout_log_probs" in res.output and "old_log_probs" in res.output and "alignment" in res.output
    info = json.loads(run("inspect", verl_pt, "--json").output)
    assert info["roles"]["trainer"]["key"] == "old_log_probs"


def test_python_dash_m_and_fast_help():
    res = subprocess.run([sys.executable, "-m", "tim_report", "--help"], capture_output=True, text=True, check=True)
    assert "build" in res.stdout
    code = "import sys, tim_report.cli; print(any(m in sys.modules for m in ('torch', 'transformers', 'vllm')))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing written


def _padded(**changes):
    d = to_padded(make_batch(6, 10, seed=1), dtype=np.float64)
    d.update(changes)
    return {k: v for k, v in d.items() if v is not None}


def _bad_files(tmp_path):
    """name → (path, a phrase the message must contain)."""
    files = {}

    def npz(name, phrase, **arrays):
        p = tmp_path / f"{name}.npz"
        np.savez(p, **arrays)
        files[name] = (p, phrase)

    files["missing"] = (tmp_path / "nope.pt", "no such file")
    (tmp_path / "adir.pt").mkdir()
    files["directory"] = (tmp_path / "adir.pt", "is a directory")
    (tmp_path / "empty.pt").write_bytes(b"")
    files["empty"] = (tmp_path / "empty.pt", "empty")
    good = tmp_path / "good.pt"
    torch.save({k: torch.from_numpy(v) for k, v in _padded().items() if v.dtype.kind != "U"}, good)
    (tmp_path / "trunc.pt").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    files["truncated_pt"] = (tmp_path / "trunc.pt", "not a readable PyTorch file")
    npz("full", "", **_padded())
    (tmp_path / "trunc.npz").write_bytes((tmp_path / "full.npz").read_bytes()[:300])
    files["truncated_npz"] = (tmp_path / "trunc.npz", "not a readable .npz")
    del files["full"]
    (tmp_path / "batch.csv").write_text("a,b\n")
    files["suffix"] = (tmp_path / "batch.csv", "unknown file type")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    files["not_a_dict"] = (tmp_path / "list.pt", "expected a dict")
    npz("nokeys", "no rollout log-probs and trainer log-probs found (keys: foo, response_mask)",
        foo=np.zeros((2, 3)), response_mask=np.ones((2, 3)))
    npz("shape", "shape mismatch", **_padded(old_log_probs=np.zeros((6, 3))))
    npz("oned", "1-D", rollout_log_probs=np.zeros(5) - 1, old_log_probs=np.zeros(5) - 1)
    npz("mask_shape", "shape mismatch", **_padded(response_mask=np.ones((6, 2))))
    obj = np.empty((6, 3), dtype=object)
    obj[:] = "x"
    npz("object", "object arrays", **_padded(rollout_log_probs=obj))
    npz("strings", "not numeric", **_padded(rollout_log_probs=np.full((6, 3), "a")))
    npz("zero_tokens", "no tokens", rollout_log_probs=np.zeros((2, 0)), old_log_probs=np.zeros((2, 0)))
    d = _padded()
    npz("mask_zero", "selects no tokens", **{**d, "response_mask": np.zeros_like(d["response_mask"])})
    npz("all_nan", "no usable tokens", **{**d, "rollout_log_probs": np.full_like(d["rollout_log_probs"], np.nan)})
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    files["jsonl"] = (tmp_path / "bad.jsonl", "not valid JSON")
    return files


BAD = ["missing", "directory", "empty", "truncated_pt", "truncated_npz", "suffix", "not_a_dict", "nokeys", "shape",
       "oned", "mask_shape", "object", "strings", "zero_tokens", "mask_zero", "all_nan", "jsonl"]


@pytest.mark.parametrize("case", BAD)
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, case):
    path, phrase = _bad_files(tmp_path)[case]
    out = tmp_path / "site"
    res = CliRunner().invoke(main, ["build", str(path), "-o", str(out)])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"tim-report: error: {path}:")
    assert phrase in lines[0]
    assert "Traceback" not in res.output
    assert not out.exists()


def test_one_bad_file_among_good_ones_writes_nothing(tmp_path, verl_pt):
    out = tmp_path / "site"
    res = run("build", verl_pt, tmp_path / "nope.npz", "-o", out)
    assert res.exit_code == 2 and not out.exists()
    assert not list(tmp_path.rglob(".tim-report-staging-*"))


def test_self_contained_without_a_page_is_one_line(tmp_path, trl_npz):
    """`build --format md --self-contained` was accepted and did nothing; with html among the formats it still works."""
    res = run("build", trl_npz, "--format", "md", "--self-contained", "-o", tmp_path / "s")
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and lines == ["tim-report: error: --self-contained: applies to pages (html): --format md "
                                            "writes none"], res.output
    assert not (tmp_path / "s").exists()
    assert run("build", trl_npz, "--format", "md", "--format", "html", "--self-contained", "-o", tmp_path / "t").exit_code == 0


def test_inspect_bad_input(tmp_path):
    res = run("inspect", tmp_path / "nope.npz")
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_bad_key_override(trl_npz, tmp_path):
    res = run("build", trl_npz, "--key", "trainer=nothing", "-o", tmp_path / "s")
    assert res.exit_code == 2 and "no key 'nothing'" in res.stderr
    res = run("build", trl_npz, "--key", "bogus", "-o", tmp_path / "s")
    assert res.exit_code == 2 and "ROLE=NAME" in res.stderr


def test_page_stays_bounded_with_huge_token_strings(tmp_path):
    b = make_batch(40, 300, seed=12)
    b.token_text = ["x" * 5000] * b.n_tokens
    b.prompt_text = ["p" * 100_000] * b.n_seqs
    save_batch(b, tmp_path / "huge.npz")
    assert run("build", tmp_path / "huge.npz", "-o", tmp_path / "s").exit_code == 0
    for name in ("index.html", "samples.js", "report.md"):
        assert (tmp_path / "s" / "huge" / name).stat().st_size < 1_500_000, name

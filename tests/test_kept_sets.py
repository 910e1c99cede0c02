"""Kept sets (the ids top-k / top-p left for each sampled token): read wherever they are written, bounded, and shown as
the ratio over the full vocabulary and over the kept set; truncated sampling named with its kept mass (issue 43)."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import one_line_exit_2
from helpers import run as run_cli

import tim_report
from tim_report.analysis import analyze
from tim_report.errors import BadInput
from tim_report.io import load, save_batch
from tim_report.testing import make_batch, make_truncated_batch


def _finding(report, id_):
    return next((f for f in report.diagnosis["findings"] if f["id"] == id_), None)


@pytest.fixture(scope="module")
def truncated():
    return make_truncated_batch(top_p=0.9)


# ---------------------------------------------------------------- reading and writing


def test_save_step_takes_kept_sets_as_offsets_counts_or_padded_counts(tmp_path):
    r = np.log([0.5, 0.9, 1.0, 0.3])
    t = r - 0.01
    ids, counts = np.array([5, 9, 6, 7, 8, 1]), np.array([2, 1, 1, 2])
    flat = load(tim_report.save_step(tmp_path / "a.npz", r, t, offsets=[0, 2, 4], kept_ids=ids, kept_counts=counts,
                                     kept_log_mass=np.array([-0.1, -0.05, 0.0, -0.2])))
    assert flat.kept_ids.tolist() == ids.tolist() and flat.kept_offsets.tolist() == [0, 2, 3, 4, 6]
    assert flat.kept_log_mass.tolist() == [-0.1, -0.05, 0.0, -0.2]
    by_offsets = load(tim_report.save_step(tmp_path / "b.npz", r, t, offsets=[0, 2, 4], kept_ids=ids,
                                           kept_offsets=[0, 2, 3, 4, 6]))
    assert by_offsets.kept_offsets.tolist() == [0, 2, 3, 4, 6]
    # padded [B, T]: a size per position (the padding's ids dropped), ids in position order
    pad = lambda x: np.array([[x[0], x[1], 0.0], [x[2], x[3], 0.0]])
    padded = load(tim_report.save_step(tmp_path / "c.npz", pad(r), pad(t), mask=[[1, 1, 0], [1, 1, 0]],
                                       kept_ids=np.append(ids, 3), kept_counts=[[2, 1, 0], [1, 2, 1]]))
    assert padded.kept_ids.tolist() == ids.tolist() and padded.kept_offsets.tolist() == [0, 2, 3, 4, 6]


@pytest.mark.parametrize("bad, words", [
    (dict(kept_ids=[-1], kept_counts=[1, 0, 0, 0]), "not a vocabulary index"),
    (dict(kept_ids=[1.5], kept_counts=[1, 0, 0, 0]), "expected integers"),
    (dict(kept_ids=[1, 2], kept_offsets=[0, 1, 5, 2, 2]), "must rise from 0"),
    (dict(kept_ids=[1, 2], kept_offsets=[0, 2]), "one per token plus one"),
    (dict(kept_ids=[1]), "needs 'kept_offsets'"),
    (dict(kept_counts=[1, 0, 0, 0]), "go with 'kept_ids'"),
    (dict(kept_ids=[1], kept_counts=[-1, 2, 0, 0]), "no negative size"),
])
def test_save_step_refuses_kept_sets_that_do_not_add_up(tmp_path, bad, words):
    with pytest.raises(BadInput, match=words):
        tim_report.save_step(tmp_path / "x.npz", np.log([0.5, 0.9, 0.4, 0.3]), np.log([0.5, 0.9, 0.4, 0.3]),
                             offsets=[0, 2, 4], **{k: np.asarray(v) for k, v in bad.items()})
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_canonical_file_round_trips_kept_sets(tmp_path, truncated):
    save_batch(truncated, tmp_path / "k.npz")
    back = load(tmp_path / "k.npz")
    for name in ("kept_ids", "kept_offsets", "kept_log_mass"):
        np.testing.assert_array_equal(getattr(back, name), getattr(truncated, name))


def _rewrite(src: Path, dst: Path, **members) -> None:
    """A canonical file with some members replaced (as raw .npy bytes, so a header may lie about its size)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            name = info.filename[:-4]
            zout.writestr(info.filename, members.pop(name) if name in members else zin.read(info))
        for name, data in members.items():
            zout.writestr(f"{name}.npy", data)


def _npy(arr: np.ndarray, shape: tuple | None = None) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(arr.dtype), "fortran_order": False,
                                               "shape": shape or arr.shape})
    return buf.getvalue() + arr.tobytes()


@pytest.mark.parametrize("members, words", [
    ({"kept_ids": _npy(np.zeros(4, np.int32), shape=(10**12,))}, "more than this run reads"),
    ({"kept_offsets": _npy(np.zeros(3, np.int64))}, "one per token plus one"),
    ({"kept_ids": _npy(np.array([-5, 1], np.int32))}, "not a vocabulary index"),
    ({"kept_log_mass": _npy(np.zeros(2))}, "one float per token"),
])
def test_hostile_kept_sets_in_a_canonical_file_are_one_line_exit_2(tmp_path, truncated, members, words):
    save_batch(truncated, tmp_path / "ok.npz")
    _rewrite(tmp_path / "ok.npz", tmp_path / "bad.npz", **members)
    one_line_exit_2(run_cli("check", tmp_path / "bad.npz"), "bad.npz", words)


def test_kept_ids_without_offsets_is_bad_input(tmp_path, truncated):
    save_batch(replace(truncated, kept_offsets=None, kept_ids=None), tmp_path / "ok.npz")
    _rewrite(tmp_path / "ok.npz", tmp_path / "bad.npz", kept_ids=_npy(np.array([1, 2], np.int32)))
    with pytest.raises(BadInput, match="without 'kept_offsets'"):
        load(tmp_path / "bad.npz")


def test_rank_files_merge_their_kept_sets(tmp_path, truncated):
    half = int(truncated.offsets[truncated.n_seqs // 2])
    for rank, (lo, hi) in enumerate(((0, half), (half, truncated.n_tokens))):
        sl = slice(lo, hi)
        off = truncated.kept_offsets
        tim_report.save_step(tmp_path, truncated.rollout_logp[sl], truncated.trainer_logp[sl], step=3, rank=rank,
                             world_size=2, offsets=truncated.offsets[(truncated.offsets >= lo) & (truncated.offsets <= hi)] - lo,
                             token_ids=truncated.token_ids[sl], kept_ids=truncated.kept_ids[off[lo]:off[hi]],
                             kept_offsets=off[lo:hi + 1] - off[lo], kept_log_mass=truncated.kept_log_mass[sl])
    merged = load(tmp_path / "step_3")
    np.testing.assert_array_equal(merged.kept_ids, truncated.kept_ids)
    np.testing.assert_array_equal(merged.kept_offsets, truncated.kept_offsets)
    np.testing.assert_allclose(merged.kept_log_mass, truncated.kept_log_mass, rtol=1e-6)


# ---------------------------------------------------------------- what the report shows


def test_kept_sets_show_the_ratio_both_ways_and_name_truncated_sampling(truncated):
    report = analyze(truncated)
    k = report.diagnosis["kept_sets"]
    assert k["with_set"] == truncated.n_tokens and k["outside"] == 0
    assert 0.85 < k["mass_mean"] < 0.95 and k["size_median"] > 1 and 0 <= k["singleton_share"] < 1
    # truncation moves the full-vocabulary ratio by log S; over the kept set what is left is noise
    assert k["full"]["bias"] == pytest.approx(k["log_mass_mean"] + k["kept"]["bias"], abs=2e-3)
    assert k["kept"]["within_noise"] and k["kept"]["kl_k3"] < k["full"]["kl_k3"] / 5
    f = _finding(report, "processed_logprobs")
    assert f["severity"] == "info" and f["evidence"]["kept_mass_measured"] == 1
    assert f["evidence"]["kept_mass"] == pytest.approx(k["mass_geo_mean"])
    assert "score the trainer over the kept set" in f["what_to_check"]
    assert "truncated sampling (kept mass" in report.diagnosis["glance"]


def test_declared_truncation_is_decided_by_the_data_not_a_95_percent_line():
    """Engine noise large against log S: rollout ≥ trainer on ~70% of tokens only, as the issue's vLLM top-p capture
    (94.9%) was; the batch declares top_p=0.9, the data agree (δ significantly below 0, within what top-p allows)."""
    b = make_truncated_batch(top_p=0.9, noise=0.2, kept=False)
    f = _finding(analyze(b), "processed_logprobs")
    assert f is not None and f["severity"] == "info" and f["evidence"]["negative_delta_share"] < 0.9
    assert f["evidence"]["kept_mass_measured"] == 0 and 0.8 < f["evidence"]["kept_mass"] < 0.95
    # undeclared, the same data is no proof of truncation: the strict rule stays
    undeclared = make_truncated_batch(top_p=0.9, noise=0.2, kept=False, declared=False)
    assert _finding(analyze(undeclared), "processed_logprobs") is None


def test_a_clean_batch_has_no_kept_set_section_and_no_truncation():
    report = analyze(make_batch(n_seqs=16, mean_len=48))
    assert "kept_sets" not in report.diagnosis and _finding(report, "processed_logprobs") is None


def test_a_replaying_trainer_is_not_truncation(truncated):
    """prime-rl and miles renormalise the trainer over the kept set themselves: δ is already the kept-set ratio."""
    replayed = replace(truncated, trainer_logp=truncated.trainer_logp - truncated.kept_log_mass,
                       meta={**truncated.meta, "trainer_support": "kept"})
    report = analyze(replayed)
    assert _finding(report, "processed_logprobs") is None and report.diagnosis["regime"] == "numerical_noise"
    k = report.diagnosis["kept_sets"]
    assert k["kept"]["within_noise"] and k["full"]["bias"] < -0.05


def test_a_sampled_token_outside_its_kept_set_is_a_named_data_problem(truncated):
    ids = truncated.kept_ids.copy()
    off = truncated.kept_offsets
    for t in range(0, 40):  # these tokens' own id taken out of their sets
        seg = ids[off[t]:off[t + 1]]
        seg[seg == truncated.token_ids[t]] = (truncated.token_ids[t] + 1) % 256 if off[t + 1] - off[t] > 1 else 255
    report = analyze(replace(truncated, kept_ids=ids))
    f = _finding(report, "sampled_outside_kept")
    assert f is not None and f["severity"] == "warn" and f["evidence"]["tokens"] >= 30
    assert report.diagnosis["kept_sets"]["outside"] == f["evidence"]["tokens"]
    assert _finding(analyze(truncated), "sampled_outside_kept") is None


def test_a_one_sided_temperature_is_still_found_over_the_kept_set(truncated):
    """Truncation no longer hides a temperature when the kept mass says what truncation did."""
    tempered = replace(truncated, trainer_logp=truncated.trainer_logp * 1.3 + 0.0,
                       kept_log_mass=truncated.kept_log_mass * 1.3)
    assert _finding(analyze(tempered), "temperature") is not None


def test_page_and_markdown_show_the_kept_sets(tmp_path, truncated):
    save_batch(truncated, tmp_path / "k.npz")
    res = run_cli("build", tmp_path / "k.npz", "-o", tmp_path / "site")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "site" / "k" / "report.md").read_text()
    assert "<summary>Kept sets</summary>" in md and "over the kept set (renormalised)" in md  # folded under the verdict
    html = (tmp_path / "site" / "k" / "index.html").read_text()
    assert 'id="kept-sets"' in html and "Over the kept set the ratio is within" in html
    summary = json.loads((tmp_path / "site" / "k" / "summary.json").read_text())
    assert summary["diagnosis"]["kept_sets"]["mass_tokens"] == truncated.n_tokens


# ---------------------------------------------------------------- capture


def test_kept_set_from_vllm_on_cpu_is_refused_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU machine: vLLM can return kept sets there")
    res = run_cli("capture", "--model", "models/tiny-qwen2", "--prompts", "examples/prompts.jsonl", "--rollout",
                  "vllm:bf16", "--trainer", "hf:fp32", "--top-p", "0.9", "--kept-set", "-o", tmp_path / "x.npz")
    one_line_exit_2(res, "Model Runner V2", "GPU")
    assert not list(tmp_path.iterdir())


def test_kept_set_without_truncation_is_refused(tmp_path):
    res = run_cli("capture", "--model", "models/tiny-qwen2", "--prompts", "examples/prompts.jsonl", "--rollout",
                  "hf:bf16", "--trainer", "hf:fp32", "--kept-set", "-o", tmp_path / "x.npz")
    one_line_exit_2(res, "keeps the whole vocabulary")


@pytest.mark.slow
def test_hf_capture_records_the_kept_set_it_sampled_from_and_the_trainers_mass(tmp_path):
    """The sampler's kept set holds every sampled token; the trainer's log-mass is the log of its own probabilities
    summed over the set (checked against a full-vocabulary fp32 scoring); the renormalised ratio is at bf16 noise."""
    out = tmp_path / "t.npz"
    res = run_cli("capture", "--model", "models/tiny-qwen2", "--prompts", "examples/prompts.jsonl", "--max-prompts", "2",
                  "--n-samples", "2", "--max-new-tokens", "32", "--rollout", "hf:bf16", "--trainer", "hf:fp32",
                  "--top-p", "0.8", "--top-k", "40", "--top-k-logprobs", "0", "-o", out)
    assert res.exit_code == 0, res.output
    b = load(out)
    sizes = np.diff(b.kept_offsets)
    assert sizes.min() >= 1 and sizes.max() <= 40
    report = analyze(b)
    assert report.diagnosis["kept_sets"]["outside"] == 0 and report.diagnosis["kept_sets"]["kept"]["within_noise"]
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained("models/tiny-qwen2", dtype=torch.float32)
    for i in range(2):
        ids = torch.tensor([b.prompt_ids[i].tolist() + b.token_ids[b.tokens_of(i)].tolist()])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].double(), -1)
        p = len(b.prompt_ids[i])
        for j, t in enumerate(range(*b.tokens_of(i).indices(b.n_tokens))):
            kept = b.kept_ids[b.kept_offsets[t]:b.kept_offsets[t + 1]]
            assert b.token_ids[t] in kept
            expected = float(torch.logsumexp(logp[p - 1 + j, torch.as_tensor(kept, dtype=torch.long)], 0))
            assert b.kept_log_mass[t] == pytest.approx(expected, abs=2e-4)
    f = _finding(report, "processed_logprobs")
    assert f is not None and f["severity"] == "info" and f["evidence"]["kept_mass_measured"] == 1

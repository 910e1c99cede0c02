"""Real older checkpoints of the tiny model (real AdamW steps, tests/checkpoints.py): `capture --stale` samples with them
while the trainer scores with the current one, and `rescore` tells which checkpoint a planted stale rollout came from."""

from __future__ import annotations

import json

import numpy as np
import pytest
from checkpoints import MODEL, ROOT
from helpers import CI, one_line_exit_2, run

from tim_report.io import load, save_batch
from tim_report.testing import make_batch

PROMPTS = ROOT / "examples" / "prompts.jsonl"
pytestmark = pytest.mark.skipif(not (MODEL / "model.safetensors").exists() and not CI, reason="models/tiny-qwen2 not present")


@pytest.fixture(scope="module")
def versions(tiny_checkpoints):
    """v0 (the shipped model), v1, v2, v3: each one Adam step after the one before (shared per session)."""
    return tiny_checkpoints


def capture_args(model, out, *extra):
    return ["capture", "--model", model, "--prompts", PROMPTS, "--rollout", "hf:bf16", "--trainer", "hf:fp32",
            "--max-prompts", "6", "--n-samples", "2", "--max-new-tokens", "24", "--device", "cpu", *extra, "-o", out]


def kl_k3(d):
    return float(np.mean(np.exp(d) - 1 - d))


def test_capture_stale_labels_each_sequence_and_the_mismatch_grows_with_lag(tmp_path, versions):
    v0, v1, v2, v3 = versions
    out = tmp_path / "async.npz"
    res = run(*capture_args(v3, out, "--stale", f"1={v2}", "--stale", f"2={v1}", "--trainer-version", "7"))
    assert res.exit_code == 0, res.output
    assert "lags 0, 1, 2 (trainer version 7)" in res.stdout
    b = load(out)
    assert b.meta["trainer_version"] == 7 and b.meta["stale"]["samplers"] == {"0": str(v3), "1": str(v2), "2": str(v1)}
    lag = 7 - b.weight_version.astype(int)
    assert sorted(set(lag.tolist())) == [0, 1, 2]
    groups = {g: set(lag[b.group == g].tolist()) for g in set(b.group.tolist())}
    assert all(len(s) == 1 for s in groups.values())  # a prompt's samples share their sampler
    d = b.trainer_logp - b.rollout_logp
    per_lag = [kl_k3(d[np.repeat(lag == k, b.seq_lengths)]) for k in (0, 1, 2)]
    assert per_lag[0] < 1e-3 < per_lag[1] < per_lag[2], per_lag  # lag 0: bf16 against fp32 noise; then the lag's


def test_capture_stale_zero_is_an_engine_that_claims_the_current_version(tmp_path, versions):
    out = tmp_path / "stuck.npz"
    assert run(*capture_args(versions[3], out, "--stale", f"0={versions[1]}")).exit_code == 0
    b = load(out)
    assert set(b.weight_version.tolist()) == {"0"} and b.meta["trainer_version"] == 0
    assert kl_k3(b.trainer_logp - b.rollout_logp) > 2e-3  # labelled current, sampled by v1: 10× the bf16 floor


@pytest.mark.parametrize("case", ["not_lag", "twice", "no_checkpoint", "other_vocab", "with_recompute", "two_rollouts"])
def test_capture_stale_bad_input(tmp_path, versions, case):
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**json.loads((MODEL / "config.json").read_text()), "vocab_size": 7}))
    extra = {"not_lag": ["--stale", f"x={versions[1]}"], "twice": ["--stale", f"1={versions[1]}", "--stale", f"1={versions[2]}"],
             "no_checkpoint": ["--stale", f"1={tmp_path / 'nope'}"], "other_vocab": ["--stale", f"1={other}"],
             "with_recompute": ["--stale", f"1={versions[1]}", "--recompute", "hf:bf16"],
             "two_rollouts": ["--stale", f"1={versions[1]}", "--rollout", "hf:fp16"]}[case]
    out = tmp_path / ("out" if case == "two_rollouts" else "out.npz")  # two pairs are written into a folder
    res = run(*capture_args(versions[3], out, *extra))
    one_line_exit_2(res, "--stale" if case != "no_checkpoint" else "nope")
    assert not out.exists()


def test_rescore_tells_which_checkpoint_a_planted_stale_rollout_came_from(tmp_path, versions):
    """Sampled by v1, labelled as the trainer's own (v3): rescoring with v0, then v1 and v2 into the same file, names
    v1 (the single-checkpoint form, one call per checkpoint, reads as one call with all three)."""
    v0, v1, v2, v3 = versions
    planted = tmp_path / "planted.npz"
    assert run(*capture_args(v3, planted, "--stale", f"0={v1}", "--trainer-version", "3")).exit_code == 0
    out = tmp_path / "rescored.npz"
    first = run("rescore", planted, "--model", v0, "--as", "v0", "-o", out)
    assert first.exit_code == 0, first.output
    assert load(planted).sides == {}  # the input is left as it was
    for name, ckpt in (("v1", v1), ("v2", v2)):
        res = run("rescore", out, "--model", ckpt, "--as", name, "-o", out)
        assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[1].startswith("  lag 0: nearest v1 (labelled v3): the engine's tokens look like v1; "
                                                 "KL k3 against the rollout: v1 "), res.stdout
    b = load(out)
    assert set(b.sides) == {"v0", "v1", "v2"} and "chain" not in b.meta  # candidates, not links
    assert b.meta["rescore"]["v1"]["model"] == str(v1) and b.meta["rescore"]["v1"]["dtype"] == "fp32"
    assert b.meta["rescore"]["v1"]["version"] == 1
    site = tmp_path / "site"
    assert run("build", out, "-o", site, "--format", "json", "--format", "md").exit_code == 0
    summary = json.loads((site / "rescored" / "summary.json").read_text())
    (row,) = summary["rescore"]["by_lag"]
    assert row["nearest"] == "v1" and [r["side"] for r in row["by_side"]][0] == "v1"
    rows = {r["side"]: r["kl_k3"] for r in row["by_side"]}
    assert rows["v1"] < 1e-3 and rows["v1"] * 10 < min(rows["v0"], rows["v2"]) and rows["v1"] * 30 < rows["trainer"]
    assert "lag 0: nearest v1 (labelled v3): the engine's tokens look like v1" in summary["diagnosis"]["verdict"]
    assert "looks like v1" in (site / "rescored" / "report.md").read_text()


def test_rescore_of_a_synchronous_rollout_names_the_trainer_weights(tmp_path, versions):
    sync = tmp_path / "sync.npz"
    assert run(*capture_args(versions[3], sync)).exit_code == 0
    res = run("rescore", sync, "--model", versions[2], "--as", "v2", "-o", sync)
    assert res.exit_code == 0 and res.stdout.splitlines()[1].startswith("  every token: nearest the trainer; "), res.output


def test_a_negative_stale_lag_plants_a_negative_lag_on_purpose(tmp_path, versions):
    """`--stale -1=CKPT` is documented as deliberate (a test-planting tool): the batch flags its negative lag."""
    assert "negative LAG (-1=CKPT) is deliberate" in " ".join(run("capture", "--help").output.split())
    out = tmp_path / "negative.npz"
    res = run(*capture_args(versions[3], out, "--stale", f"-1={versions[2]}", "--max-prompts", "2", "--n-samples", "1"))
    assert res.exit_code == 0 and "lags -1, 0 (trainer version 0)" in res.output, res.output
    res = run("check", out)
    assert "negative lag" in res.output.lower(), res.output


def test_rescore_with_the_trainer_own_checkpoint_is_a_tie_not_a_winner(tmp_path, versions):
    """The trainer's own checkpoint in fp32 scores the tokens exactly as the trainer does: neither is named."""
    sync = tmp_path / "sync.npz"
    assert run(*capture_args(versions[3], sync, "--max-prompts", "2", "--n-samples", "1")).exit_code == 0
    res = run("rescore", sync, "--model", versions[3], "--as", "v3", "-o", sync)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[1].startswith("  every token: v3 and the trainer tie: these tokens cannot tell"), res.output


@pytest.mark.parametrize("case", ["no_tokens", "no_prompts", "no_checkpoint", "bad_name", "fixed_name", "not_npz",
                                  "other_vocab"])
def test_rescore_bad_input_is_one_line_and_writes_nothing(tmp_path, case):
    b = make_batch(n_seqs=4, mean_len=8, seed=0)
    b.token_ids = np.zeros(b.n_tokens, np.int64) + 5
    b.prompt_ids = [np.array([1, 2, 3])] * b.n_seqs
    args = {"--model": str(MODEL), "--as": "old"}
    out = tmp_path / "out.npz"
    if case == "no_tokens":
        b.token_ids = None
    elif case == "no_prompts":
        b.prompt_ids = None
    elif case == "no_checkpoint":
        args["--model"] = str(tmp_path / "nope")
    elif case == "bad_name":
        args["--as"] = "Old Name"
    elif case == "fixed_name":
        args["--as"] = "trainer"
    elif case == "not_npz":
        out = tmp_path / "out.pt"
    elif case == "other_vocab":
        b.token_ids[3] = 10**7
    step = tmp_path / "step.npz"
    save_batch(b, step)
    res = run("rescore", step, *[x for kv in args.items() for x in kv], "-o", out)
    phrase = {"no_tokens": "has no token ids", "no_prompts": "has no prompt ids", "no_checkpoint": "no such model folder",
              "bad_name": "--as", "fixed_name": "--as", "not_npz": "out.pt", "other_vocab": "outside"}[case]
    one_line_exit_2(res, phrase)
    assert not out.exists()


@pytest.mark.slow
def test_rescore_takes_a_gguf_as_capture_does(tmp_path, monkeypatch):
    """The real model: a step captured from SmolLM2's GGUF, rescored by the same GGUF (converted once into the cache)
    in fp32, gives the trainer's fp32 log-probs: the same folder, the same scoring routine."""
    from helpers import smollm2_gguf

    gguf = smollm2_gguf()
    monkeypatch.setenv("TIM_REPORT_CACHE", str(tmp_path / "cache"))
    step = tmp_path / "step.npz"
    res = run("capture", "--model", gguf, "--prompts", PROMPTS, "--rollout", "hf:bf16", "--trainer", "hf:fp32",
              "--max-prompts", "2", "--n-samples", "1", "--max-new-tokens", "8", "--device", "cpu", "-o", step)
    assert res.exit_code == 0, res.output
    res = run("rescore", step, "--model", gguf, "-o", tmp_path / "out.npz")
    assert res.exit_code == 0, res.output
    b = load(tmp_path / "out.npz")
    name = "smollm2_135m_instruct_q4_1"  # the file's stem as a side name
    assert list(b.sides) == [name] and np.allclose(b.sides[name], b.trainer_logp, atol=1e-6)

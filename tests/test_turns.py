"""Turns found in every layout (issue 20), on batches in the exact layout each framework writes.

The batches come from scripts/make_framework_fixtures.py (`verl_batch`, `trl_batch`, `openrlhf_batch`, and the
committed files it writes); `shift` takes nats off the trainer's log-prob of the first tokens after each tool
span, as a chat template that is not prefix-preserving does. Turns are long (30-60 tokens), as real ones are,
so the shifted heads are a small share of the tokens.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_frameworks import DATA, aligned, expected, fixtures, read, run

from tim_report.analysis import analyze
from tim_report.io import load
from tim_report.io.sequences import turn_index

LONG = (30, 60)


def findings(batch) -> dict:
    return {f["id"]: f["severity"] for f in analyze(batch).diagnosis["findings"]}


def saved(tmp_path, values: dict, name: str = "batch.pt"):
    """The dict as a user saves it (torch.save), read back as any plain dict is."""
    torch.save(values, tmp_path / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load(tmp_path / name)


def turn_starts_follow_placeholder_gaps(batch) -> None:
    """Within each sequence, the turn rises exactly at a trained token after an untrained run of 0.0 placeholders."""
    for i in range(batch.n_seqs):
        sl = batch.tokens_of(i)
        m, ro, t = batch.mask[sl], batch.rollout_logp[sl], batch.turn[sl]
        rises = np.flatnonzero(np.diff(t)) + 1
        assert (np.diff(t) >= 0).all() and (np.diff(t) <= 1).all()
        assert all(m[j] and not m[j - 1] and ro[j - 1] == 0.0 for j in rises)
        gaps = [j for j in range(1, len(m)) if m[j] and not m[j - 1] and m[:j].any()]
        assert list(rises) == gaps


def _turns_one_by_one(mask, rollout, offsets):
    """The rule read literally, token by token: a trained token after an untrained run of 0.0s, after a trained one."""
    out = np.zeros(len(mask), np.int32)
    for i in range(len(offsets) - 1):
        k, seen, gap_clean, in_gap = 0, False, True, False
        for j in range(offsets[i], offsets[i + 1]):
            if mask[j]:
                if seen and in_gap and gap_clean:
                    k += 1
                seen, in_gap, gap_clean = True, False, True
            elif seen:
                in_gap, gap_clean = True, gap_clean and rollout[j] == 0.0
            out[j] = k
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from([0.0, -0.5])), max_size=60), st.lists(st.integers(0, 60), max_size=6))
def test_turn_index_matches_the_rule_token_by_token(tokens, cuts):
    mask = np.array([t[0] for t in tokens], bool)
    rollout = np.array([t[1] for t in tokens])
    offsets = np.array(sorted([0, len(tokens), *[c for c in cuts if c <= len(tokens)]]), np.int64)  # empty ones too
    got, want = turn_index(mask, rollout, offsets), _turns_one_by_one(mask, rollout, offsets)
    np.testing.assert_array_equal(got if got is not None else np.zeros(len(tokens), np.int32), want)
    assert (got is None) == (not want.any())


# ---- verl: the tool output is zeros inside response_mask --------------------------------------------

@pytest.mark.parametrize("attention", [True, False])
def test_verl_padded_multi_turn_finds_the_turn_boundary(tmp_path, attention):
    """verl's agent loop (verl/experimental/agent_loop/tool_agent_loop.py, ToolAgentLoop
    `_handle_processing_tools_state`) appends tool output with response_mask 0 and `[0.0] * len(response_ids)`
    rollout log-probs; agent_loop.py `_postprocess` right-pads them to [B, R]. The turns are the gaps; with the
    first two tokens after each tool span 1.5 nats off, `turn_boundary` must fire (main: no turn finding)."""
    batch, _, _ = fixtures.verl_batch(np.random.default_rng(1), n=32, shift=1.5, max_turns=3, resp=LONG)
    values = {k: v for k, v in batch.items() if attention or k != "attention_mask"}
    b = saved(tmp_path, values)
    assert b.turn is not None and int(b.turn.max()) == 2
    turn_starts_follow_placeholder_gaps(b)
    assert findings(b).get("turn_boundary") == "warn"
    clean, _, _ = fixtures.verl_batch(np.random.default_rng(1), n=32, shift=0.0, max_turns=3, resp=LONG)
    assert not set(findings(saved(tmp_path, dict(clean), "clean.pt"))) & {"turn_boundary", "position_onset"}


def test_verl_tool_span_at_one_position_is_a_turn_boundary_not_an_onset(tmp_path):
    """Every first turn 40 tokens long: the tool spans sit at the same positions, so the shifted heads look like a
    mismatch switching on at position ~42. main called it `position_onset` (warn); the turns explain it."""
    batch, _, _ = fixtures.verl_batch(np.random.default_rng(2), n=32, shift=2.0, max_turns=2, resp=(40, 41))
    got = findings(saved(tmp_path, dict(batch)))
    assert got.get("turn_boundary") == "warn" and got.get("position_onset") in (None, "info")


def test_verl_rejected_tokens_are_not_turns(tmp_path):
    """verl's rollout correction (verl/trainer/ppo/rollout_corr_helper.py, compute_rollout_correction_and_add_to_batch)
    zeroes response_mask on rejected tokens, which were sampled (a log-prob ≠ 0.0): gaps, but not tool output."""
    batch, _, _ = fixtures.verl_batch(np.random.default_rng(3), n=16, max_turns=1, resp=LONG)
    batch["response_mask"][:, 10] = 0  # token-level rejection
    b = saved(tmp_path, dict(batch))
    assert b.turn is None and int((~b.mask).sum()) == 16  # kept in the tables, out of the metrics


# ---- TRL: tool_mask -------------------------------------------------------------------------------------

def test_trl_tool_tokens_stay_out_of_the_metrics():
    """TRL's GRPOTrainer (trl/trainer/grpo_trainer.py): `_tool_call_loop` appends `[0] * tool_length` to tool_mask
    and `[0.0] * tool_length` to the sampling log-probs; `_generate_and_score_completions` returns tool_mask, with
    completion_mask 1 on the tool result, and trains on `completion_mask * tool_mask`. A clean batch stays clean
    (main: the tool tokens enter the metrics, `dummy_zero` error and a systematic regime)."""
    path = DATA / "trl" / "step_5.pt"
    raw = torch.load(path, weights_only=True)
    keep = (raw["completion_mask"] * raw["tool_mask"]).numpy() > 0
    b = read(path)
    want = expected(raw["sampling_per_token_logps"].numpy()[keep], raw["old_per_token_logps"].numpy()[keep])
    m = analyze(b).metrics
    assert m["tokens"] == want["tokens"] and m["kl_k3"] == pytest.approx(want["kl_k3"], rel=1e-4)
    assert analyze(b).diagnosis["regime"] == "numerical_noise" and not findings(b)
    assert b.n_tokens == int(raw["completion_mask"].sum())  # tool results kept in the token tables
    assert any("tool_mask" in n and "tool-result tokens" in n for n in b.notes)
    assert b.turn is not None
    turn_starts_follow_placeholder_gaps(b)


def test_trl_tool_spans_give_turns(tmp_path):
    b = saved(tmp_path, fixtures.trl_batch(np.random.default_rng(4), n=32, shift=1.5, resp=LONG))
    assert findings(b).get("turn_boundary") == "warn"


# ---- OpenRLHF: both sides 0.0 off the action mask ---------------------------------------------------

def test_openrlhf_tool_tokens_are_not_padding():
    """OpenRLHF (openrlhf/trainer/ppo_utils/samples_generator.py `_process_response_into_experience`: action_mask
    and rollout_log_probs are [1:] of the sequence; openrlhf/utils/agent.py: 0.0 rollout log-probs on prompt and
    feedback tokens; openrlhf/models/actor.py `Actor.forward`: action_log_probs multiplied by action_mask;
    experience.py: right-padded). With attention_mask, the zeros inside a response are tool output: kept in the
    token table, untrained, positions not renumbered; the prompt positions before the first action are left out."""
    path = DATA / "openrlhf" / "step_6.pt"
    raw = {k: v.numpy() for k, v in torch.load(path, weights_only=True).items()}
    b = read(path)
    act, attn, seqs = raw["action_mask"], raw["attention_mask"][:, 1:] > 0, raw["sequences"][:, 1:]
    for i in range(b.n_seqs):
        first = int(np.flatnonzero(act[i])[0])
        np.testing.assert_array_equal(b.token_ids[b.tokens_of(i)], seqs[i, first:][attn[i, first:]])
        np.testing.assert_array_equal(b.mask[b.tokens_of(i)], act[i, first:][attn[i, first:]])
    aligned(b)
    prompt = sum(int(np.flatnonzero(a)[0]) for a in act)
    ex = {e["what"]: e["tokens"] for e in b.meta["exclusions"]}
    assert ex["prompt positions"] == prompt
    assert ex["placeholder 0.0 rollout log-probs outside the loss mask"] == int((~b.mask).sum()) > 0
    assert b.turn is not None
    turn_starts_follow_placeholder_gaps(b)


def test_openrlhf_turn_boundary(tmp_path):
    b = saved(tmp_path, fixtures.openrlhf_batch(np.random.default_rng(5), n=32, shift=1.5, resp=LONG))
    assert findings(b).get("turn_boundary") == "warn"


# ---- every reader, and explicit turn ids ------------------------------------------------------------

@pytest.mark.parametrize("path", ["prime-rl/token_exports/step_1", "nemo-rl/train_data_step1.jsonl", "slime/train_data/0.pt",
                                  "miles/train_data/0_0.pt", "skyrl/dumped_data/global_step_1_training_input.pkl",
                                  "verl/batch_step_4.pt", "trl/step_5.pt", "openrlhf/step_6.pt"])
def test_every_layout_has_its_turns(path):
    b = read(DATA / path, allow_pickle=True)
    assert b.turn is not None and int(b.turn.max()) >= 1, path
    turn_starts_follow_placeholder_gaps(b)


def test_explicit_turn_ids_win(tmp_path):
    """A file that writes its turn ids (the canonical `turn`, or `turn_ids`) is taken at its word."""
    batch, _, _ = fixtures.verl_batch(np.random.default_rng(6), n=8, max_turns=2)
    ids = torch.zeros_like(batch["response_mask"])
    ids[:, 5:] = 7
    b = saved(tmp_path, {**batch, "turn_ids": ids})
    assert b.meta["keys"]["turn"] == "turn_ids" and set(np.unique(b.turn)) == {0, 7}


# ---- SkyRL: inspect lists only the roles a dump fills ------------------------------------------------

@pytest.mark.parametrize("step,group", [(1, "metadata.policy_prompt_boundaries"), (2, None)])
def test_skyrl_inspect_lists_only_filled_roles(step, group):
    """SkyRL pops `rewards` and metadata["uids"] before dump_data (skyrl/train/trainer.py, RayPPOTrainer.train);
    main's `inspect` still listed reward=rewards and group=metadata.uids."""
    path = DATA / "skyrl" / "dumped_data" / f"global_step_{step}_training_input.pkl"
    res = run("inspect", path, "--allow-pickle", "--json")
    assert res.exit_code == 0, res.output
    roles = json.loads(res.stdout)["roles"]
    assert "reward" not in roles and roles.get("group", {}).get("key") == group
    assert roles["rollout"]["key"] == "rollout_logprobs" and roles["advantage"]["key"] == "advantages"


@pytest.mark.parametrize("bad", [np.nan, -1.0, 0.5])
def test_turn_ids_that_are_not_turn_numbers_are_bad_input(tmp_path, bad):
    batch, _, _ = fixtures.verl_batch(np.random.default_rng(7), n=4)
    ids = torch.zeros_like(batch["rollout_log_probs"])
    ids[0, 0] = bad
    torch.save({**batch, "turn": ids}, tmp_path / "t.pt")
    res = run("check", tmp_path / "t.pt")
    assert res.exit_code == 2 and "not turn numbers" in res.stderr and "Traceback" not in res.output

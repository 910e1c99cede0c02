#!/usr/bin/env python3
"""Write small, faithful dumps of each RL framework's on-disk format (tests/data/frameworks/).

Each file follows ../shared/framework-dumps.md (the writers' code, read per framework) with what the
readers must get right: a known mismatch, placeholder 0.0 log-probs on prompt and tool tokens,
first-token fillers, multi-turn tool spans, padding, duplicated and sliced ranks. Log-probs are a
function of the token id (rollout g(t), trainer g(t) + d(t)), so a test can check that every token
kept its own log-probs, whatever the layout, without trusting the reader:

    prime-rl/token_exports/step_{1,2}/rank_{0,1}.jsonl + STABLE   packed lines, tool spans, filler at index 0
    nemo-rl/train_data_step{1,2}.jsonl                          wrapped fields, right padding, a 0.0 inside the mask
    slime/train_data/{0,1}.pt + rollout_data/{0,1}.pt           train dump joined with the rollout dump
    miles/train_data/0_{0..3}.pt                                cp_size 2 zigzag slices, tp 2 duplicates, numpy inside
    skyrl/dumped_data/global_step_{1,2}_training_input.pkl      right-aligned (new) and right-padded (old) pickles
    verl/dataproto_step_3.pkl                                   DataProto.save_to_disk (needs verl to read)
    verl/batch_step_4.pt                                        the DataProto's tensors and uid, torch.save'd as a dict
    trl/step_5.pt                                               GRPOTrainer's batch with tools: tool_mask
    openrlhf/step_6.pt                                          a batched Experience: [B, T−1], both sides 0.0 off the mask

verl, TRL and OpenRLHF write no per-token file; their files are what a user saves of the in-memory batch
(the key names of design §3). `verl_batch`, `trl_batch` and `openrlhf_batch` take a size and a `shift`:
nats taken off the trainer's log-prob of the first HEAD tokens after each tool span (a chat template that
is not prefix-preserving), so tests build larger batches of the same layout with a known turn fault.

Deterministic: the same files every run (seeded; torch.save of the same objects gives the same bytes).

    python scripts/make_framework_fixtures.py               # → tests/data/frameworks/
    python scripts/make_framework_fixtures.py --out /tmp/fx
"""

from __future__ import annotations

import argparse
import io
import json
import math
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 151936
SKYRL_MODULE = "skyrl.backends.skyrl_train.training_batch"


def g(t):
    """Rollout log-prob of token t: in [-2.5, -0.001], fixed by the id."""
    return -((np.asarray(t) * 7919) % 1000) / 400.0 - 0.001


def d(t):
    """The known mismatch: trainer = g + d, |d| ≤ 0.02."""
    return 0.02 * np.sin(np.asarray(t, dtype=np.float64))


def trainer_of(t):
    return np.minimum(g(t) + d(t), 0.0)


def turns(rng, n_turns: int, prompt: int, resp: tuple[int, int], tool: tuple[int, int]):
    """Token ids and the trained mask of one conversation: prompt, then assistant turns with tool output between."""
    ids = list(rng.integers(10, 5000, prompt))
    mask = [False] * prompt
    for k in range(n_turns):
        n = int(rng.integers(*resp))
        ids += list(rng.integers(10, 5000, n))
        mask += [True] * n
        if k < n_turns - 1:
            m = int(rng.integers(*tool))
            ids += list(rng.integers(10, 5000, m))
            mask += [False] * m
    return np.array(ids, dtype=np.int64), np.array(mask, dtype=bool)


HEAD = 2  # tokens after each tool span that `shift` moves


def head_shift(mask: np.ndarray, shift: float) -> np.ndarray:
    """[L] added to the trainer's log-probs: −shift on the first HEAD tokens of every assistant turn after the first."""
    m = np.asarray(mask, bool)
    out = np.zeros(m.shape)
    if shift and m.any():
        first = int(np.flatnonzero(m)[0])
        for start in np.flatnonzero(m[1:] & ~m[:-1]) + 1:
            if start > first:
                out[start:start + HEAD] = np.where(m[start:start + HEAD], -shift, 0.0)
    return out


def conversations(rng, n: int, max_turns: int, resp=(3, 8), tool=(2, 4)) -> list:
    """n conversations, conversation i with 1 + i % max_turns assistant turns."""
    return [turns(rng, 1 + i % max_turns, int(rng.integers(3, 6)), resp, tool) for i in range(n)]


def r6(x) -> list[float]:
    return [float(round(v, 6)) for v in np.asarray(x, dtype=np.float64)]


# ---- prime-rl --------------------------------------------------------------------------------------

def prime_rl(out: Path, rng) -> None:
    for step in (1, 2):
        folder = out / "prime-rl" / "token_exports" / f"step_{step}"
        folder.mkdir(parents=True, exist_ok=True)
        seq_idx = 0
        for rank in (0, 1):
            lines = []
            for micro in range(2):
                packed = [turns(rng, int(rng.integers(1, 3)), int(rng.integers(4, 7)), (3, 7), (2, 4))
                          for _ in range(2 if micro == 0 else 1)]  # the first line packs two samples
                lines.append(json.dumps(_prime_line(packed, step, rank, micro, seq_idx, rng)))
                seq_idx += 1
            (folder / f"rank_{rank}.jsonl").write_text("\n".join(lines) + "\n")
        (folder / "STABLE").write_text("")


def _prime_line(packed, step, rank, micro, seq_idx, rng) -> dict:
    ids = np.concatenate([p[0] for p in packed])
    mask = np.concatenate([p[1] for p in packed])
    pos = np.concatenate([np.arange(len(p[0])) for p in packed])
    inference = np.where(mask, g(ids), 0.0)  # 0.0 on every token that was not sampled
    trainer = trainer_of(ids)
    trainer[0] = -math.log(VOCAB)  # index 0: filler log(1/V)
    entropy = np.abs(rng.normal(1.0, 0.3, len(ids)))
    entropy[0] = math.log(VOCAB)
    delta = np.where(mask, trainer - inference, np.nan)
    adv = np.where(mask, 0.5, 0.0)
    return {
        "schema_version": 1, "step": step, "rank": rank, "micro_step": micro, "micro_sequence_idx": 0,
        "export_sequence_idx": seq_idx, "env_name": "math" if rank == 0 else "tool-use",
        "token_ids": ids.tolist(), "position_ids": pos.tolist(), "loss_mask": mask.tolist(),
        "inference_logprobs": r6(inference), "trainer_logprobs": r6(trainer), "entropy": r6(entropy),
        "advantages": r6(adv),
        "log_importance_ratio": [None if np.isnan(x) else round(float(x), 6) for x in delta],
        "importance_ratio": [None if np.isnan(x) else round(float(np.exp(x)), 6) for x in delta],
        "mismatch_kl": [None if np.isnan(x) else round(float(np.expm1(x) - x), 8) for x in delta],
        "prob_delta": [None if np.isnan(x) else round(float(np.exp(t) - np.exp(i)), 6) for x, t, i in zip(delta, trainer, inference)],
        "is_masked": [False if m else None for m in mask], "is_masked_high": [False if m else None for m in mask],
        "is_masked_low": [False if m else None for m in mask],
        "rl_weights": [1.0 if m else None for m in mask], "ce_weights": [None] * len(ids), "ref_kl_weights": [None] * len(ids),
    }


# ---- NeMo-RL ---------------------------------------------------------------------------------------

def nemo_rl(out: Path, rng) -> None:
    folder = out / "nemo-rl"
    folder.mkdir(parents=True, exist_ok=True)
    for step in (1, 2):
        convs = [turns(rng, 1 + i % 2, int(rng.integers(4, 8)), (3, 8), (2, 5)) for i in range(6)]
        width = max(len(c[0]) for c in convs)
        lines = []
        for i, (ids, mask) in enumerate(convs):
            gen = np.where(mask, g(ids), 0.0)
            prev = trainer_of(ids)
            prev[0] = 0.0  # no token precedes index 0
            if step == 1 and i == 2:  # a tool token left inside the mask: rollout 0.0, a finding, not padding
                j = int(np.flatnonzero(mask)[-1])
                gen[j] = 0.0
            pad = width - len(ids)
            row = {
                "token_ids": [ids.tolist() + [0] * pad],
                "input_lengths": [len(ids)],
                "token_loss_mask": [mask.astype(int).tolist() + [0] * pad],
                "generation_logprobs": [r6(gen) + [0.0] * pad],
                "prev_logprobs": [r6(prev) + [0.0] * pad],
                "advantages": [r6(np.where(mask, 1.0 - i / 3, 0.0)) + [0.0] * pad],
                "sample_loss_mask": [0.0 if i == 5 else 1.0],  # the last sample is not trained
                "rewards": [float(i % 2)],
                "content": [[f"user: question {i}", f"assistant: answer {i}"]],
                "idx": i,
            }
            lines.append(json.dumps(row))
        (folder / f"train_data_step{step}.jsonl").write_text("\n".join(lines) + "\n")


# ---- slime -----------------------------------------------------------------------------------------

def slime(out: Path, rng) -> None:
    for rid in (0, 1):
        rollout, train = [], []
        for i in range(8):
            ids, mask = turns(rng, 1 + (i % 3 == 0), int(rng.integers(5, 9)), (4, 9), (2, 4))
            prompt_len = int(np.flatnonzero(mask)[0])
            resp = ids[prompt_len:]
            rmask = mask[prompt_len:].astype(np.int64)
            rollout_lp = np.where(rmask > 0, g(resp), 0.0)  # 0.0 on tool tokens
            rollout.append({
                "index": 100 * rid + i, "group_index": i // 4, "tokens": ids.tolist(), "response_length": len(resp),
                "loss_mask": rmask.tolist(), "rollout_log_probs": r6(rollout_lp), "rollout_routed_experts": None,
                "weight_versions": [str(rid + 3)] if i != 7 else [str(rid + 2), str(rid + 3)],
                "reward": float(i % 2), "status": "completed" if i != 6 else "truncated",
                "prompt": [{"role": "user", "content": f"problem {rid}-{i}"}], "response": f"answer {rid}-{i}",
                "metadata": {"source": "fixture"},
            })
            order = (i * 3) % 8  # the train dump's order differs from the rollout's: the join is by position
            train.append((order, {
                "rollout_position": i, "sample_index": 100 * rid + i, "tokens": torch.tensor(ids),
                "total_lengths": len(ids), "response_lengths": len(resp), "loss_masks": torch.tensor(rmask, dtype=torch.int32),
                "rollout_log_probs": torch.tensor(rollout_lp, dtype=torch.float32),
                "log_probs": torch.tensor(trainer_of(resp), dtype=torch.float32),
                "advantages": torch.tensor(np.where(rmask > 0, 0.25, 0.0), dtype=torch.float32),
                "returns": torch.tensor(np.where(rmask > 0, 0.25, 0.0), dtype=torch.float32),
                "rewards": float(i % 2), "truncated": i == 6,
            }))
        samples = [s for _, s in sorted(train, key=lambda x: x[0])]
        for sub in ("train_data", "rollout_data"):
            (out / "slime" / sub).mkdir(parents=True, exist_ok=True)
        torch.save({"rollout_id": rid, "samples": rollout}, out / "slime" / "rollout_data" / f"{rid}.pt")
        torch.save({"format_version": 2, "rollout_id": rid, "rank": 0, "samples": samples,
                    "dp_shards": [list(range(8))], "raw_reward": [float(i % 2) for i in range(8)]},
                   out / "slime" / "train_data" / f"{rid}.pt")


# ---- miles -----------------------------------------------------------------------------------------

def _zigzag(total: int, resp: int, cp: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank r's response indices (by logit position) and sequence positions, as miles slices them."""
    c = -(-total // (2 * cp))
    chunks = [(r * c, (r + 1) * c), ((2 * cp - r - 1) * c, (2 * cp - r) * c)]
    p = total - resp
    ridx = np.concatenate([np.arange(max(a, p - 1), min(b, total - 1)) - (p - 1) for a, b in chunks])
    return ridx.astype(np.int64), np.concatenate([np.arange(a, b) for a, b in chunks])


def miles(out: Path, rng) -> None:
    cp, tp = 2, 2
    folder = out / "miles" / "train_data"
    folder.mkdir(parents=True, exist_ok=True)
    samples = [turns(rng, 1 + (i == 1), int(rng.integers(5, 9)), (5, 11), (2, 4)) for i in range(5)]
    for cp_rank in range(cp):
        cols: dict[str, list] = {k: [] for k in ("sample_indices", "tokens", "response_lengths", "total_lengths", "rewards",
                                                 "loss_masks", "log_probs", "rollout_log_probs", "ref_log_probs",
                                                 "advantages", "weight_versions", "rollout_routed_experts")}
        for i, (ids, mask) in enumerate(samples):
            p = int(np.flatnonzero(mask)[0])
            resp, rmask = ids[p:], mask[p:].astype(np.int64)
            ridx, _ = _zigzag(len(ids), len(resp), cp, cp_rank)
            cols["sample_indices"].append(i)
            cols["tokens"].append(torch.tensor(ids))  # whole on every rank
            cols["response_lengths"].append(len(resp))
            cols["total_lengths"].append(len(ids))
            cols["rewards"].append(float(i % 2))
            cols["loss_masks"].append(torch.tensor(rmask[ridx], dtype=torch.int32))  # this rank's zigzag slice
            cols["log_probs"].append(torch.tensor(trainer_of(resp)[ridx], dtype=torch.float32))
            cols["rollout_log_probs"].append(np.where(rmask > 0, g(resp), 0.0)[ridx].astype(np.float32))  # numpy
            cols["ref_log_probs"].append(torch.tensor(g(resp)[ridx], dtype=torch.float32))
            cols["advantages"].append(torch.tensor(np.where(rmask > 0, 0.5, 0.0), dtype=torch.float32))  # whole
            cols["weight_versions"].append(["7"])
            cols["rollout_routed_experts"].append(np.zeros((len(ids) - 1, 2, 2), dtype=np.int32))
        for tp_rank in range(tp):
            rank = tp_rank + tp * cp_rank
            torch.save({"rollout_id": 0, "rank": rank, "cp_rank": cp_rank, "cp_size": cp, "qkv_format": "thd",
                        "rollout_data": cols}, folder / f"0_{rank}.pt")


# ---- SkyRL -----------------------------------------------------------------------------------------

def _skyrl_module():
    """Stand-ins so pickle writes SkyRL's own dotted names; removed again afterwards."""
    created = []
    for name in ("skyrl", "skyrl.backends", "skyrl.backends.skyrl_train", SKYRL_MODULE):
        if name not in sys.modules:
            sys.modules[name] = types.ModuleType(name)
            created.append(name)
    module = sys.modules[SKYRL_MODULE]

    class TrainingInputBatch(dict):
        def __getstate__(self):  # SkyRL's TensorBatch.__getstate__ returns the serialised batch
            return self.__dict__["_tb_state"]

    def _rebuild_tensor_batch(cls, state):  # never called here: the file is only written
        raise RuntimeError("write-only stand-in")

    for obj, name in ((TrainingInputBatch, "TrainingInputBatch"), (_rebuild_tensor_batch, "_rebuild_tensor_batch")):
        obj.__module__, obj.__qualname__ = SKYRL_MODULE, name
        setattr(module, name, obj)
    return module, created


def skyrl(out: Path, rng) -> None:
    folder = out / "skyrl" / "dumped_data"
    folder.mkdir(parents=True, exist_ok=True)
    module, created = _skyrl_module()
    try:
        for step, aligned in ((1, True), (2, False)):
            tensors, meta = _skyrl_batch(rng, aligned)
            (folder / f"global_step_{step}_training_input.pkl").write_bytes(_skyrl_pickle(module, tensors, meta, new=aligned))
    finally:
        for name in created:
            del sys.modules[name]


def _skyrl_batch(rng, right_aligned: bool):
    convs = [turns(rng, 1 + (i == 3), int(rng.integers(3, 7)), (3, 8), (2, 4)) for i in range(5)]
    splits = [int(np.flatnonzero(m)[0]) for _, m in convs]
    prompts = [c[0][:s] for c, s in zip(convs, splits)]
    resps = [(c[0][s:], c[1][s:]) for c, s in zip(convs, splits)]
    R, P = max(len(r) for r, _ in resps), max(len(p) for p in prompts)
    rows = {k: [] for k in ("sequences", "attention_mask", "response_mask", "loss_mask", "rollout_logprobs",
                            "action_log_probs", "advantages")}
    for prompt, (resp, rmask) in zip(prompts, resps):
        pad = R - len(resp)
        if right_aligned:  # one left-padded block; response tensors right-aligned
            total = max(len(p) + len(r) for p, (r, _) in zip(prompts, resps))
            left = total - len(prompt) - len(resp)
            seq = [0] * left + list(prompt) + list(resp)
            att = [0] * left + [1] * (len(prompt) + len(resp))
            place = lambda v, fill=0.0, pad=pad: [fill] * pad + list(v)
        else:  # prompt left-padded to P, response right-padded to R
            seq = [0] * (P - len(prompt)) + list(prompt) + list(resp) + [0] * pad
            att = [0] * (P - len(prompt)) + [1] * (len(prompt) + len(resp)) + [0] * pad
            place = lambda v, fill=0.0, pad=pad: list(v) + [fill] * pad
        rows["sequences"].append(seq)
        rows["attention_mask"].append(att)
        rows["response_mask"].append(place([1] * len(resp), 0))
        rows["loss_mask"].append(place(rmask.astype(int), 0))
        rows["rollout_logprobs"].append(place(np.where(rmask, g(resp), 0.0)))  # 0.0 on observation tokens
        rows["action_log_probs"].append(place(trainer_of(resp)))
        rows["advantages"].append(place(np.where(rmask, -0.5, 0.0)))
    tensors = {k: torch.tensor(v, dtype=torch.int64 if k in ("sequences", "attention_mask", "response_mask") else torch.float32)
               for k, v in rows.items()}
    tensors["loss_mask"] = tensors["loss_mask"].to(torch.int64)
    for k, t in tensors.items():  # one filler row (a copy of row 0, loss mask 0), as pad_training_input_batch adds
        filler = torch.zeros_like(t[:1]) if k == "loss_mask" else t[:1].clone()
        tensors[k] = torch.cat([t, filler])
    # the trainer pops `rewards` and metadata["uids"] before dump_data; SkyRL since prompt_mean (#1719) keeps
    # the groups as policy_prompt_boundaries (compute_prompt_boundaries(uids), over the rows before the filler)
    meta = {"policy_mini_batch_boundaries": [(0, 5)], "response_length": R, "avg_response_length": 5.0, "pad_size": 1}
    if right_aligned:
        meta["policy_prompt_boundaries"] = [(0, 2), (2, 4), (4, 5)]
    return tensors, meta


def _skyrl_pickle(module, tensors: dict, meta: dict, new: bool) -> bytes:
    """New SkyRL: __reduce__ → _rebuild_tensor_batch(cls, state) with numpy bytes. Old: dict subclass + torch.save bytes."""
    def numpy_field(t):
        a = t.numpy()
        return {"format": "numpy", "data": a.tobytes(), "shape": a.shape, "dtype": str(a.dtype)}

    def torch_field(t):
        buf = io.BytesIO()
        torch.save(t, buf)
        return {"type": "tensor", "data": buf.getvalue()}

    state = {"batch_dict": {k: (numpy_field(t) if new else torch_field(t)) for k, t in tensors.items()},
             "batch_size": len(tensors["sequences"]), "device": None, "metadata": meta}
    if new:
        class Shim:
            def __reduce__(self):
                return (module._rebuild_tensor_batch, (module.TrainingInputBatch, state))
        return pickle.dumps(Shim(), protocol=4)
    batch = module.TrainingInputBatch(tensors)  # default dict-subclass pickling: __newobj__, the items, then the state
    batch.__dict__["_tb_state"] = state
    return pickle.dumps(batch, protocol=4)


# ---- verl ------------------------------------------------------------------------------------------

def verl(out: Path, rng) -> None:
    """DataProto.save_to_disk: pickle.dump of the object, whose state is (torch.save bytes of the batch, non-tensor, meta)."""
    folder = out / "verl"
    folder.mkdir(parents=True, exist_ok=True)
    created = [n for n in ("verl", "verl.protocol") if n not in sys.modules]
    for n in created:
        sys.modules[n] = types.ModuleType(n)

    class DataProto:  # verl's DataProto.__getstate__: (torch.save bytes of the batch, non_tensor_batch, meta_info)
        def __getstate__(self):
            return self.__dict__["_state"]

    DataProto.__module__, DataProto.__qualname__ = "verl.protocol", "DataProto"
    sys.modules["verl.protocol"].DataProto = DataProto
    try:
        batch, non_tensor, meta_info = verl_batch(rng)
        buf = io.BytesIO()
        torch.save(batch, buf)
        proto = DataProto()
        proto.__dict__["_state"] = (buf.getvalue(), non_tensor, meta_info)
        (folder / "dataproto_step_3.pkl").write_bytes(pickle.dumps(proto, protocol=4))
    finally:
        for n in created:
            del sys.modules[n]


def verl_batch(rng, n: int = 6, shift: float = 0.0, max_turns: int = 2, resp=(3, 8)):
    """A DataProto's tensors (agent loop, tool_agent_loop.py): `response_mask` 0 on tool tokens, `rollout_log_probs`
    0.0 there ([0.0] * len(tool ids)), `old_log_probs` the trainer's on every response position, padding included."""
    convs = conversations(rng, n, max_turns, resp)
    splits = [int(np.flatnonzero(m)[0]) for _, m in convs]
    R, P = max(len(c[0]) - s for c, s in zip(convs, splits)), max(splits)
    out = {"rollout_log_probs": np.zeros((n, R)), "old_log_probs": np.full((n, R), -9.0)}  # the pad token's log-prob
    out.update(responses=np.zeros((n, R), np.int64), response_mask=np.zeros((n, R), np.int64),
               prompts=np.zeros((n, P), np.int64), attention_mask=np.zeros((n, P + R), np.int64))
    for i, ((ids, mask), s) in enumerate(zip(convs, splits)):
        resp_ids, rmask, k = ids[s:], mask[s:], len(ids) - s
        out["responses"][i, :k] = resp_ids
        out["response_mask"][i, :k] = rmask
        out["rollout_log_probs"][i, :k] = np.where(rmask, g(resp_ids), 0.0)
        out["old_log_probs"][i, :k] = trainer_of(resp_ids) + head_shift(rmask, shift)
        out["prompts"][i, P - s:] = ids[:s]
        out["attention_mask"][i, P - s:P + k] = 1
    batch = {k: torch.tensor(v, dtype=torch.float32 if v.dtype.kind == "f" else torch.int64) for k, v in out.items()}
    non_tensor = {"uid": np.array([f"u{i // 2}" for i in range(n)], dtype=object),
                  "__num_turns__": np.array([1 + i % max_turns for i in range(n)], dtype=object),
                  "min_global_steps": np.array([3, 3, 3, 3, 2, 2][:n] + [3] * (n - 6), dtype=object),
                  "max_global_steps": np.array([3, 3, 3, 3, 3, 2][:n] + [3] * (n - 6), dtype=object)}
    return batch, non_tensor, {"global_steps": 3}


def verl_dict(out: Path, rng) -> None:
    """What a verl user saves without pickling a DataProto: torch.save({**data.batch, "uid": [...]})."""
    batch, non_tensor, _ = verl_batch(rng, n=8, max_turns=3)
    (out / "verl").mkdir(parents=True, exist_ok=True)
    torch.save({**batch, "uid": [str(u) for u in non_tensor["uid"]]}, out / "verl" / "batch_step_4.pt")


# ---- TRL -------------------------------------------------------------------------------------------

def trl_batch(rng, n: int = 6, shift: float = 0.0, max_turns: int = 3, resp=(3, 8)) -> dict:
    """GRPOTrainer._generate_and_score_completions' output with tools (trl/trainer/grpo_trainer.py): tool results
    inside the completion (`completion_mask` 1, `tool_mask` 0, sampling log-prob 0.0 from _tool_call_loop),
    `tool_mask` right-padded with 1, `old_per_token_logps` the trainer's on every completion position."""
    convs = conversations(rng, n, max_turns, resp)
    splits = [int(np.flatnonzero(m)[0]) for _, m in convs]
    C, P = max(len(c[0]) - s for c, s in zip(convs, splits)), max(splits)
    out = {"prompt_ids": np.zeros((n, P), np.int64), "prompt_mask": np.zeros((n, P), np.int64),
           "completion_ids": np.zeros((n, C), np.int64), "completion_mask": np.zeros((n, C), np.int64),
           "tool_mask": np.ones((n, C), np.int64), "sampling_per_token_logps": np.zeros((n, C)),
           "old_per_token_logps": np.full((n, C), -9.0)}
    for i, ((ids, mask), s) in enumerate(zip(convs, splits)):
        comp, tmask, k = ids[s:], mask[s:], len(ids) - s
        out["prompt_ids"][i, P - s:], out["prompt_mask"][i, P - s:] = ids[:s], 1  # left-padded prompts
        out["completion_ids"][i, :k], out["completion_mask"][i, :k] = comp, 1
        out["tool_mask"][i, :k] = tmask
        out["sampling_per_token_logps"][i, :k] = np.where(tmask, g(comp), 0.0)
        out["old_per_token_logps"][i, :k] = trainer_of(comp) + head_shift(tmask, shift)
    tensors = {k: torch.tensor(v, dtype=torch.float32 if v.dtype.kind == "f" else torch.int64) for k, v in out.items()}
    tensors["advantages"] = torch.tensor(np.linspace(-1, 1, n), dtype=torch.float32)
    tensors["num_items_in_batch"] = tensors["completion_mask"].mul(tensors["tool_mask"]).sum()
    return tensors


def trl(out: Path, rng) -> None:
    (out / "trl").mkdir(parents=True, exist_ok=True)
    torch.save(trl_batch(rng), out / "trl" / "step_5.pt")


# ---- OpenRLHF --------------------------------------------------------------------------------------

def openrlhf_batch(rng, n: int = 6, shift: float = 0.0, max_turns: int = 3, resp=(3, 8)) -> dict:
    """A batched Experience (openrlhf/trainer/ppo_utils/experience.py): `sequences`, `attention_mask` [B, T]
    right-padded; `action_mask`, `rollout_log_probs`, `action_log_probs`, `advantages` [B, T−1], index j scoring
    token j+1 (samples_generator._process_response_into_experience slices [1:]); `rollout_log_probs` 0.0 on
    prompt and feedback tokens (utils/agent.py); `action_log_probs` multiplied by `action_mask` (Actor.forward)."""
    convs = conversations(rng, n, max_turns, resp)
    T = max(len(ids) for ids, _ in convs)
    out = {"sequences": np.zeros((n, T), np.int64), "attention_mask": np.zeros((n, T), np.int64),
           "action_mask": np.zeros((n, T - 1), bool), "rollout_log_probs": np.zeros((n, T - 1)),
           "action_log_probs": np.zeros((n, T - 1)), "advantages": np.zeros((n, T - 1))}
    for i, (ids, mask) in enumerate(convs):
        k = len(ids)
        out["sequences"][i, :k], out["attention_mask"][i, :k] = ids, 1
        act, nxt = mask[1:], ids[1:]
        out["action_mask"][i, :k - 1] = act
        out["rollout_log_probs"][i, :k - 1] = np.where(act, g(nxt), 0.0)
        out["action_log_probs"][i, :k - 1] = (trainer_of(nxt) + head_shift(act, shift)) * act
        out["advantages"][i, :k - 1] = np.where(act, 0.5, 0.0)
    tensors = {k: torch.tensor(v, dtype=torch.float32 if v.dtype.kind == "f" else None) for k, v in out.items()}
    tensors["rewards"] = torch.tensor([float(i % 2) for i in range(n)])
    return tensors


def openrlhf(out: Path, rng) -> None:
    (out / "openrlhf").mkdir(parents=True, exist_ok=True)
    torch.save(openrlhf_batch(rng), out / "openrlhf" / "step_6.pt")


WRITERS = {"prime-rl": prime_rl, "nemo-rl": nemo_rl, "slime": slime, "miles": miles, "skyrl": skyrl, "verl": verl,
           "verl-dict": verl_dict, "trl": trl, "openrlhf": openrlhf}


def write_all(out: Path) -> None:
    for i, writer in enumerate(WRITERS.values()):
        writer(out, np.random.default_rng(1000 + i))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "frameworks")
    args = ap.parse_args()
    write_all(args.out)
    for p in sorted(args.out.rglob("*")):
        if p.is_file():
            print(f"{p.relative_to(args.out)}  {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()

"""Synthetic step batches with known properties, for tests, benchmarks and examples.

Fast and vectorised so a benchmark can make 16M tokens; for mismatch that comes from real
logits, see the tiny model in `models/` and `tim-report capture`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BadInput
from .model import StepBatch


def make_batch(n_seqs: int = 64, mean_len: int = 128, noise: float = 0.01, seed: int = 0,
               group_size: int = 4) -> StepBatch:
    """A batch whose trainer log-probs differ from the rollout's by noise that grows on unlikely tokens."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(max(1, mean_len // 2), mean_len + mean_len // 2 + 1, n_seqs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    t = int(offsets[-1])
    confident = rng.random(t) < 0.6  # peaked distributions: most sampled tokens are likely, a tail is not
    rollout = -np.where(confident, rng.exponential(0.03, t), rng.exponential(2.0, t))
    rollout = np.maximum(rollout, -25.0)
    delta = noise * rng.standard_normal(t) * (1.0 + np.sqrt(-rollout))
    trainer = np.minimum(rollout + delta, 0.0)
    return StepBatch(
        rollout_logp=rollout,
        trainer_logp=trainer,
        offsets=offsets,
        mask=np.ones(t, bool),
        token_ids=rng.integers(0, 2048, t).astype(np.int64),
        group=np.repeat(np.arange((n_seqs + group_size - 1) // group_size), group_size)[:n_seqs].astype(str),
        reward=rng.random(n_seqs).round(3),
        meta={"model": "synthetic", "rollout_engine": "synthetic", "trainer_engine": "synthetic",
              "rollout_dtype": "bf16", "trainer_dtype": "fp32", "device": "cpu", "seed": seed},
    )


def _random_logits(rng: np.random.Generator, n_seqs: int, mean_len: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequence offsets (lengths mean_len / 2 to 3·mean_len / 2) and per-token Gaussian logits of a random scale
    (peaked to flat): the full distributions the sampled fixtures draw their tokens from."""
    lengths = rng.integers(max(1, mean_len // 2), mean_len + mean_len // 2 + 1, n_seqs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    t = int(offsets[-1])
    return offsets, np.exp(rng.uniform(np.log(0.5), np.log(6.0), t))[:, None] * rng.standard_normal((t, vocab))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of [T, V] logits."""
    z = x - x.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def make_sampled_batch(temperature: float = 1.0, tempered: str = "rollout", unrelated: str | None = None,
                       n_seqs: int = 32, mean_len: int = 64, vocab: int = 256, seed: int = 0) -> StepBatch:
    """A batch whose tokens are really sampled from full distributions, so its faults have a known truth.

    Each position has Gaussian logits of a random scale (peaked to flat). The tokens are drawn from the logits at
    `temperature`; the `tempered` side ("rollout" or "trainer") reports the log-probs of that sampling distribution
    and the other side those at T = 1, so T_rollout / T_trainer is `temperature` or its inverse. `unrelated` ("rollout"
    or "trainer") scores that side with independent logits instead (another model), as a broken side would."""
    rng = np.random.default_rng(seed)
    offsets, logits = _random_logits(rng, n_seqs, mean_len, vocab)
    t = int(offsets[-1])

    sampler = _log_softmax(logits / temperature)
    token = np.argmax(sampler + rng.gumbel(size=sampler.shape), axis=1)
    rows = np.arange(t)
    sides = {tempered: sampler[rows, token], "rollout" if tempered == "trainer" else "trainer": _log_softmax(logits)[rows, token]}
    if unrelated is not None:
        other = np.exp(rng.uniform(np.log(0.5), np.log(6.0), t))[:, None] * rng.standard_normal((t, vocab))
        sides[unrelated] = _log_softmax(other)[rows, token]
    return StepBatch(rollout_logp=sides["rollout"], trainer_logp=sides["trainer"], offsets=offsets, mask=np.ones(t, bool),
                     token_ids=token.astype(np.int64), meta={"model": "synthetic", "seed": seed})


def make_run(steps: int, n_seqs: tuple[int, int] = (16, 16), mean_len: int = 32, noise=0.01, wobble: float = 0.0,
             seed: int = 0) -> list[StepBatch]:
    """A run's batches, one per step (`meta["step"]` set): each step's size drawn from `n_seqs` (low, high), its noise
    `noise(step)` (or a constant) times a log-normal wobble of σ `wobble`, as a steady run's content varies."""
    rng = np.random.default_rng(seed)
    noise_of = noise if callable(noise) else (lambda _s: noise)
    out = []
    for step in range(steps):
        size = int(rng.integers(n_seqs[0], n_seqs[1] + 1))
        level = noise_of(step) * float(np.exp(wobble * rng.standard_normal()))
        b = make_batch(n_seqs=size, mean_len=mean_len, noise=level, seed=int(rng.integers(2**31)))
        b.meta["step"] = step
        out.append(b)
    return out


def to_padded(batch: StepBatch, *, rollout_key: str = "rollout_log_probs", trainer_key: str = "old_log_probs",
              mask_key: str = "response_mask", tokens_key: str = "responses", pad_logp: float = 0.0,
              dtype=np.float32) -> dict:
    """The batch as a framework would save it: right-padded [B, L] arrays plus a mask (verl names by default)."""
    lengths = batch.seq_lengths
    b, width = batch.n_seqs, int(lengths.max())
    cols = np.arange(width)
    keep = cols[None, :] < lengths[:, None]

    def pad(values: np.ndarray, fill: float, dtype: Any) -> np.ndarray:
        out = np.full((b, width), fill, dtype=dtype)
        out[keep] = values
        return out

    d = {
        rollout_key: pad(batch.rollout_logp, pad_logp, dtype),
        trainer_key: pad(batch.trainer_logp, pad_logp, dtype),
        mask_key: pad(batch.mask.astype(np.int64), 0, np.int64),
    }
    if batch.token_ids is not None:
        d[tokens_key] = pad(batch.token_ids, 0, np.int64)
    if batch.group is not None:
        d["uid"] = np.asarray(batch.group, dtype=str)
    if batch.reward is not None:
        d["token_level_scores"] = np.zeros((b, width), np.float32)
        d["token_level_scores"][np.arange(b), lengths - 1] = batch.reward
    return d


def shifted(batch: StepBatch) -> StepBatch:
    """The batch with an off-by-one trainer: its log-prob at t is the one of the token at t+1 of the same sequence (the
    last token keeps its own), as logits and labels sliced one apart give."""
    trainer = batch.trainer_logp.copy()
    inner = np.ones(batch.n_tokens, bool)
    inner[batch.offsets[1:] - 1] = False  # each sequence's last token
    trainer[inner] = batch.trainer_logp[np.flatnonzero(inner) + 1]
    batch.trainer_logp = trainer
    return batch


def write_prime_rl_run(out, steps: int = 30, n_seqs: int = 16, mean_len: int = 64, noise=0.01, seed: int = 0,
                       ranks: int = 1, fault=None, env_of=None) -> list:
    """A prime-rl run folder, `out/token_exports/step_S/rank_R.jsonl` (the fields our reader needs), one step per
    batch of `make_batch`; `noise(step)` (or a constant) sets each step's mismatch and `fault(step, batch)`, when given,
    returns the batch a step saves (e.g. `shifted(batch)` from some step on); `env_of(i)`, when given, names sequence i's
    environment (`env_name`). Returns the step folders."""
    import json
    from pathlib import Path

    noise_of = noise if callable(noise) else (lambda _s: noise)
    folders = []
    for step in range(steps):
        b = make_batch(n_seqs=n_seqs, mean_len=mean_len, noise=noise_of(step), seed=seed * 100_003 + step)
        if fault is not None:
            b = fault(step, b)
        folder = Path(out) / "token_exports" / f"step_{step}"
        folder.mkdir(parents=True, exist_ok=True)
        prompt = 4  # each line: a 4-token prompt (not trained; index 0 holds prime-rl's filler) then the response
        lines: list[list[str]] = [[] for _ in range(ranks)]
        for i in range(b.n_seqs):
            sl = b.tokens_of(i)
            n = sl.stop - sl.start
            ids = [1] * prompt + np.asarray(b.token_ids)[sl].tolist()
            lines[i % ranks].append(json.dumps({
                "schema_version": 1, "step": step, "rank": i % ranks, "export_sequence_idx": i,
                "token_ids": ids, "position_ids": list(range(prompt + n)), "loss_mask": [False] * prompt + [True] * n,
                "inference_logprobs": [0.0] * prompt + np.round(b.rollout_logp[sl], 6).tolist(),
                "trainer_logprobs": [-7.6] + [-1.0] * (prompt - 1) + np.round(b.trainer_logp[sl], 6).tolist(),
                "advantages": [0.0] * (prompt + n), **({"env_name": env_of(i)} if env_of else {})}))
        for r in range(ranks):
            (folder / f"rank_{r}.jsonl").write_text("\n".join(lines[r]) + "\n", encoding="utf-8")
        (folder / "STABLE").write_text("", encoding="utf-8")
        folders.append(folder)
    return folders


CHAIN_CAUSES = ("sampler", "engine", "train", "none")


def make_chain_batch(cause: str, n_seqs: int = 32, mean_len: int = 64, vocab: int = 256, top_p: float = 0.9,
                     noise: float = 2e-3, seed: int = 0) -> StepBatch:
    """A batch of four sides (rollout → recompute → trainer → train) over really sampled tokens, with one planted
    cause of mismatch (docs/chain.md):

        sampler  the sampler draws from the top-p set and reports its renormalised log-probs; the engine's re-score,
                 the trainer and its training forward score the full softmax (within bf16-sized noise of each other)
        engine   the engine samples and re-scores the same full-softmax log-probs; the trainer's logits differ (other
                 weights or kernels), its training forward agrees with its recompute
        train    rollout, recompute and trainer are the same array; the training forward alone moves (nondeterminism)
        none     all four sides are the same array: bitwise identical"""
    if cause not in CHAIN_CAUSES:
        raise ValueError(f"cause {cause!r}: one of {', '.join(CHAIN_CAUSES)}")
    rng = np.random.default_rng(seed)
    offsets, logits = _random_logits(rng, n_seqs, mean_len, vocab)
    t = int(offsets[-1])
    full = _log_softmax(logits)
    rows = np.arange(t)
    if cause == "sampler":  # top-p: the smallest set of most likely tokens whose mass reaches top_p, renormalised
        order = np.argsort(-full, axis=1)
        mass = np.cumsum(np.exp(np.take_along_axis(full, order, axis=1)), axis=1)
        keep_sorted = np.concatenate([np.ones((t, 1), bool), mass[:, :-1] < top_p], axis=1)
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=1)
        kept_mass = np.log(np.where(keep, np.exp(full), 0.0).sum(axis=1))
        sampler = np.where(keep, full - kept_mass[:, None], -np.inf)
    else:
        sampler = full
    token = np.argmax(sampler + rng.gumbel(size=sampler.shape), axis=1)
    truth = full[rows, token]

    def noisy(scale: float) -> np.ndarray:
        return np.minimum(truth + scale * rng.standard_normal(t), 0.0)

    if cause == "sampler":
        rollout, recompute, trainer = sampler[rows, token], noisy(noise), noisy(noise)
        train = trainer.copy()
    elif cause == "engine":
        other = logits + 0.5 * rng.standard_normal(logits.shape)
        oz = other - other.max(axis=1, keepdims=True)
        trainer = (oz - np.log(np.exp(oz).sum(axis=1, keepdims=True)))[rows, token]
        rollout, recompute, train = truth, truth.copy(), trainer.copy()
    elif cause == "train":
        rollout, recompute, trainer, train = truth, truth.copy(), truth.copy(), noisy(noise)
    else:
        rollout, recompute, trainer, train = truth, truth.copy(), truth.copy(), truth.copy()
    return StepBatch(rollout_logp=rollout, trainer_logp=trainer, offsets=offsets, mask=np.ones(t, bool),
                     token_ids=token.astype(np.int64), sides={"recompute": recompute, "train": train},
                     meta={"model": "synthetic", "seed": seed, "planted": cause})


def make_truncated_batch(top_p: float = 0.9, top_k: int = 0, n_seqs: int = 48, mean_len: int = 48, vocab: int = 256,
                         noise: float = 0.02, kept: bool = True, declared: bool = True, seed: int = 0) -> StepBatch:
    """Tokens really sampled with top-k / top-p: the rollout's log-probs renormalised over each token's kept set (as
    vLLM's processed log-probs are), the trainer's over the full vocabulary of a distribution within `noise` (in the
    logits) of the rollout's. With `kept`, each token's kept set and the trainer's log-mass on it (as `capture`
    records them); with `declared`, meta['sampling'] as `capture` writes it."""
    rng = np.random.default_rng(seed)
    offsets, logits = _random_logits(rng, n_seqs, mean_len, vocab)
    t = int(offsets[-1])

    rollout_full = _log_softmax(logits + noise * rng.standard_normal(logits.shape))
    trainer_full = _log_softmax(logits + noise * rng.standard_normal(logits.shape))
    order = np.argsort(-rollout_full, axis=1)
    mass = np.cumsum(np.exp(np.take_along_axis(rollout_full, order, axis=1)), axis=1)
    keep_sorted = np.concatenate([np.ones((t, 1), bool), mass[:, :-1] < top_p], axis=1)
    if top_k > 0:
        keep_sorted[:, top_k:] = False
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=1)
    sampler = np.where(keep, rollout_full - np.log(np.where(keep, np.exp(rollout_full), 0.0).sum(axis=1))[:, None], -np.inf)
    token = np.argmax(sampler + rng.gumbel(size=sampler.shape), axis=1)
    rows = np.arange(t)
    meta: dict = {"model": "synthetic", "seed": seed, "rollout_dtype": "bf16", "trainer_dtype": "fp32"}
    if declared:
        meta["sampling"] = dict(temperature=1.0, top_p=top_p, top_k=top_k, logprobs="processed",
                                truncated=top_p < 1.0 or top_k > 0)
    batch = StepBatch(rollout_logp=sampler[rows, token], trainer_logp=trainer_full[rows, token], offsets=offsets,
                      mask=np.ones(t, bool), token_ids=token.astype(np.int64), meta=meta,
                      group=np.asarray([f"g{i // 4}" for i in range(n_seqs)]))
    if kept:
        batch.kept_ids = np.flatnonzero(keep.reshape(-1)) % vocab
        batch.kept_offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
        batch.kept_log_mass = np.log(np.where(keep, np.exp(trainer_full), 0.0).sum(axis=1))
    return batch


# ---- real weight versions: the staleness split's test bed (design §10) ---------------------------------------

# The tiny model ships with the repository (models/, beside the package), not in the wheel: found from this file, so a
# script run from any folder finds it (a relative path was tried as a hub id, ten retries, then a traceback).
TINY_MODEL = str(Path(__file__).resolve().parents[1] / "models" / "tiny-qwen2")


def model_folder(model_dir: str) -> str:
    """`model_dir` when it is a local model folder; else BadInput saying where the tiny model comes from."""
    if not (Path(model_dir) / "config.json").is_file():
        raise BadInput(model_dir, "no model folder here (config.json): models/tiny-qwen2 ships with the repository "
                                  "checkout (scripts/train_tiny_model.py makes it); pass model_dir= for another model")
    return model_dir


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Torch on one thread while the tiny model runs: its forwards are far too small to share, and on a loaded
    machine two threads make each decode step 30× slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_versions(model_dir: str = TINY_MODEL, versions: int = 4, lr: float = 2e-4, seed: int = 0) -> list[dict]:
    """The weights of `versions` real versions of the tiny model: v0 as shipped, then one Adam step on a fresh batch of
    text (the Python standard library's `textwrap.py`, 8 × 64 tokens) per version. Returns their state dicts (CPU,
    fp32), v0 first; a few seconds on a CPU. Torch and transformers are imported here only."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _one_thread():
        return _train(AutoModelForCausalLM, AutoTokenizer, model_folder(model_dir), versions, lr, seed)


def _train(auto_model: Any, auto_tokenizer: Any, model_dir: str, versions: int, lr: float, seed: int) -> list[dict]:
    import textwrap as source

    import torch

    torch.manual_seed(seed)
    tok = auto_tokenizer.from_pretrained(model_dir)
    ids = torch.tensor(tok(open(source.__file__, encoding="utf-8").read())["input_ids"][: 8 * 64 * versions])
    model = auto_model.from_pretrained(model_dir, dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    states = [{k: v.detach().clone() for k, v in model.state_dict().items()}]
    for v in range(1, versions):
        batch = ids[(v - 1) * 512: v * 512].reshape(8, 64)
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        states.append({k: p.detach().clone() for k, p in model.state_dict().items()})
    return states


def sample_versioned_batch(states: list[dict], lags: list[int], model_dir: str = TINY_MODEL, new_tokens: int = 48,
                           seqs_per_lag: int = 8, stuck_at: int | None = None, rollout_dtype: str = "bf16",
                           label_lags: list[int] | None = None, seed: int = 0,
                           sampled_by: list[int] | None = None) -> StepBatch:
    """Tokens sampled by real older versions, scored by the newest in fp32: for each lag L in `lags`, `seqs_per_lag`
    sequences sampled (temperature 1, no truncation) by version newest − L in `rollout_dtype`, with that engine's
    log-probs as the rollout side and the newest version's fp32 log-probs as the trainer's. `weight_version` labels
    each sequence with its version (or, with `label_lags`, the lag written instead of the real one: a mislabelled
    batch) and `meta["trainer_version"]` is the newest. `stuck_at=V`: the engine never received weights after version
    V (every sequence sampled by V, whatever its label says); `sampled_by`: the version that really samples each lag's
    sequences (one bucket planted from another version, the others honest). `prompt_ids` holds each sequence's
    prompt, so `rescore` can score the batch again."""
    with _one_thread():
        by = sampled_by or [stuck_at if stuck_at is not None else len(states) - 1 - lag for lag in lags]
        return _sample(states, lags, model_folder(model_dir), new_tokens, seqs_per_lag, by, rollout_dtype, label_lags,
                       seed)


def _sample(states: list[dict], lags: list[int], model_dir: str, new_tokens: int, seqs_per_lag: int,
            sampled_by: list[int], rollout_dtype: str, label_lags: list[int] | None, seed: int) -> StepBatch:
    import torch
    from transformers import AutoModelForCausalLM

    newest = len(states) - 1
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[rollout_dtype]
    gen = torch.Generator().manual_seed(seed)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    labels = label_lags if label_lags is not None else lags
    seqs, rollout, versions = [], [], []
    with torch.no_grad():
        for label, version in zip(labels, sampled_by):
            model.load_state_dict(states[version])
            engine = model.to(dtype=dtype)
            x = torch.randint(3, 200, (seqs_per_lag, 4), generator=gen)  # short random prompts
            logps, past, step_in = [], None, x
            for _ in range(new_tokens):  # decode with the engine's KV cache, as an engine does
                out = engine(input_ids=step_in, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
                nxt = torch.multinomial(logp.exp(), 1, generator=gen)
                logps.append(logp.gather(1, nxt))
                x = torch.cat([x, nxt], dim=1)
                step_in = nxt
            model.to(dtype=torch.float32)
            seqs.append(x)
            rollout.append(torch.cat(logps, dim=1))
            versions += [str(newest - label)] * seqs_per_lag
        model.load_state_dict(states[newest])
        ids = torch.cat(seqs)
        trainer = torch.log_softmax(model(input_ids=ids).logits[:, 3:-1].float(), dim=-1).gather(2, ids[:, 4:, None])[..., 0]
    rollout_np = torch.cat(rollout).reshape(-1).double().numpy()
    n = ids.shape[0]
    return StepBatch(rollout_logp=rollout_np, trainer_logp=trainer.reshape(-1).double().numpy(),
                     offsets=np.arange(n + 1, dtype=np.int64) * new_tokens, mask=np.ones(n * new_tokens, bool),
                     token_ids=ids[:, 4:].reshape(-1).numpy().astype(np.int64),
                     prompt_ids=[p.astype(np.int64) for p in ids[:, :4].numpy()],
                     weight_version=np.asarray(versions, dtype=str),
                     meta={"model": "tiny-qwen2", "rollout_engine": "transformers", "rollout_dtype": rollout_dtype,
                           "trainer_engine": "transformers", "trainer_dtype": "fp32", "trainer_version": newest,
                           "step": newest})


def sample_prefix_cached_batch(states: list[dict], cache_version: int | None, model_dir: str = TINY_MODEL,
                               n_seqs: int = 32, prompt_len: int = 32, new_tokens: int = 32, rollout_dtype: str = "bf16",
                               seed: int = 0) -> StepBatch:
    """An engine with a prefix cache, on real versions: every sequence is sampled (temperature 1) by the newest version
    in `rollout_dtype` and scored by it in fp32 as the trainer; every other one (a hit) reads its prompt's KV from the
    cache, computed by version `cache_version` (None: the newest, a cache reset at the sync), the rest compute it
    afresh. `cached_tokens` is the prompt length less its last token (which an engine always recomputes), or 0."""
    with _one_thread():
        return _sample_cached(states, cache_version, model_folder(model_dir), n_seqs, prompt_len, new_tokens,
                              rollout_dtype, seed)


def _sample_cached(states: list[dict], cache_version: int | None, model_dir: str, n_seqs: int, prompt_len: int,
                   new_tokens: int, rollout_dtype: str, seed: int) -> StepBatch:
    import torch
    from transformers import AutoModelForCausalLM

    newest = len(states) - 1
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[rollout_dtype]
    gen = torch.Generator().manual_seed(seed)
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hit = np.arange(n_seqs) % 2 == 0
    prompts = torch.randint(3, 200, (n_seqs, prompt_len), generator=gen)
    seqs, rollout = [], []
    with torch.no_grad():
        for rows in (np.flatnonzero(hit), np.flatnonzero(~hit)):
            x, past, step_in = prompts[rows], None, prompts[rows]
            if hit[rows[0]]:  # the prompt less its last token, from the cache: computed by the cache's version
                model.load_state_dict(states[newest if cache_version is None else cache_version])
                past = model.to(dtype=dtype)(input_ids=x[:, :-1], use_cache=True).past_key_values
                model.to(dtype=torch.float32)
                step_in = x[:, -1:]
            model.load_state_dict(states[newest])
            engine, logps = model.to(dtype=dtype), []
            for _ in range(new_tokens):
                out = engine(input_ids=step_in, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
                step_in = torch.multinomial(logp.exp(), 1, generator=gen)
                logps.append(logp.gather(1, step_in))
                x = torch.cat([x, step_in], dim=1)
            model.to(dtype=torch.float32)
            seqs.append(x)
            rollout.append(torch.cat(logps, dim=1))
        ids = torch.cat(seqs)
        trainer = torch.log_softmax(model(input_ids=ids).logits[:, prompt_len - 1:-1].float(), dim=-1).gather(
            2, ids[:, prompt_len:, None])[..., 0]
    order = np.concatenate([np.flatnonzero(hit), np.flatnonzero(~hit)])
    return StepBatch(rollout_logp=torch.cat(rollout).reshape(-1).double().numpy(),
                     trainer_logp=trainer.reshape(-1).double().numpy(),
                     offsets=np.arange(n_seqs + 1, dtype=np.int64) * new_tokens, mask=np.ones(n_seqs * new_tokens, bool),
                     token_ids=ids[:, prompt_len:].reshape(-1).numpy().astype(np.int64),
                     prompt_ids=[p.numpy().astype(np.int64) for p in ids[:, :prompt_len]],
                     cached_tokens=np.where(hit[order], prompt_len - 1, 0).astype(np.int64),
                     weight_version=np.full(n_seqs, str(newest)),
                     meta={"model": "tiny-qwen2", "rollout_engine": "transformers", "rollout_dtype": rollout_dtype,
                           "trainer_engine": "transformers", "trainer_dtype": "fp32", "trainer_version": newest,
                           "step": newest, "prefix_cache": "clean (reset at the sync)" if cache_version is None
                           else f"computed by version {cache_version}"})

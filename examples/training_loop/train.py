"""A real (tiny) RL training loop that writes every step with `tim_report.save_step`, and plants a bug.

The rollout engine is the policy's bf16 copy (it samples the responses and scores what it sampled, as an inference
engine does); the trainer is the fp32 policy, which recomputes the log-probs of the same tokens and takes a
REINFORCE step (reward: the share of a response's characters that are spaces or letters, so the update is real).
After each update the trainer's weights are copied into the rollout engine, as a weight sync does.

From `--bug-step` on, one of these bugs is planted:

- `temperature`: the engine samples and scores at temperature 0.7, the trainer at 1.0 (a one-sided temperature);
- `shift`: the trainer's log-probs are off by one position (each token gets its neighbour's log-prob);
- `stale-weights`: the weight sync stops, so the engine keeps an old policy while the trainer moves on.

    python examples/training_loop/train.py --steps 12 --bug-step 6 --out runs/demo/tim_steps &
    tim-report watch runs/demo/tim_steps -o site/ --interval 1

On two CPU cores the 12 steps take about half a minute; `watch` prints one line per step and an alarm at the step
where the bug starts (docs/integrations.md, "A plain PyTorch loop", is this loop's core).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import tim_report

HERE = Path(__file__).resolve().parent
MODEL = HERE.parent.parent / "models" / "tiny-qwen2"
PROMPTS = HERE.parent / "prompts.jsonl"
BUGS = ("temperature", "shift", "stale-weights")


def policy_logprobs(model, input_ids, attention_mask, response_ids, temperature: float = 1.0):
    """[B, T] log-probs of `response_ids` (the last T columns of `input_ids`), each given everything before it."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -response_ids.shape[1] - 1:-1].float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)


def reward_of(texts: list[str]) -> torch.Tensor:
    """A toy reward the tiny model can move: the share of characters that are letters or spaces."""
    return torch.tensor([sum(c.isalpha() or c == " " for c in t) / max(len(t), 1) for t in texts])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/demo/tim_steps"), help="the run folder save_step writes")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--bug", choices=BUGS, default="temperature")
    parser.add_argument("--bug-step", type=int, default=6, help="the first step with the bug (-1: never)")
    parser.add_argument("--batch", type=int, default=8, help="responses per step (each prompt sampled batch/8 times)")
    parser.add_argument("--tokens", type=int, default=24, help="tokens per response")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds to wait between steps (to watch it live)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    policy = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)          # the trainer, fp32
    engine = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16).eval()  # the rollout engine, bf16
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    records = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    chats = [tokenizer.apply_chat_template(r.get("messages") or [{"role": "user", "content": r["prompt"]}],
                                           add_generation_prompt=True, tokenize=False) for r in records]

    for step in range(args.steps):
        bug = args.bug if 0 <= args.bug_step <= step else None
        index = [i % len(chats) for i in range(step * args.batch, (step + 1) * args.batch)]
        prompt = tokenizer([chats[i] for i in index], return_tensors="pt", padding=True, padding_side="left")
        temperature = 0.7 if bug == "temperature" else 1.0
        with torch.no_grad():  # the rollout: the engine samples and records the log-prob of what it sampled
            input_ids = engine.generate(**prompt, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                        max_new_tokens=args.tokens, min_new_tokens=args.tokens, pad_token_id=0)
            response_ids = input_ids[:, prompt.input_ids.shape[1]:]
            attention_mask = torch.cat([prompt.attention_mask, torch.ones_like(response_ids)], dim=1)
            rollout = policy_logprobs(engine, input_ids, attention_mask, response_ids, temperature)

        trainer = policy_logprobs(policy, input_ids, attention_mask, response_ids)  # the trainer's recompute, with gradients
        if bug == "shift":
            saved = torch.cat([trainer[:, 1:], trainer[:, -1:]], dim=1).detach()
        else:
            saved = trainer.detach()
        loss_mask = torch.ones_like(response_ids)
        tim_report.save_step(args.out, rollout, saved, mask=loss_mask, token_ids=response_ids,
                             group=torch.tensor(index), step=step, rank=0, world_size=1, model="tiny-qwen2",
                             rollout_engine="hf", rollout_dtype="bf16", trainer_engine="hf", trainer_dtype="fp32")

        rewards = reward_of(tokenizer.batch_decode(response_ids))
        advantage = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        loss = -(advantage[:, None] * trainer).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if bug != "stale-weights":  # the weight sync: the engine gets the trainer's new weights
            engine.load_state_dict(policy.state_dict())
        print(f"step {step}: reward {rewards.mean():.3f}{'  (bug: ' + bug + ')' if bug else ''}", flush=True)
        time.sleep(args.pause)


if __name__ == "__main__":
    main()

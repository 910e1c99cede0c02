"""Which key of a file fills which role of a StepBatch: the known names, in priority order, and `--key` overrides."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadInput
from .files import RawFile

# Roles and the key names that fill them, in priority order: the first key present wins.
# Canonical names come first, then the frameworks' (design §3). `--key role=name` overrides.
ROLE_ALIASES: dict[str, tuple[str, ...]] = {
    "rollout": ("rollout_logp", "rollout_log_probs", "sampling_per_token_logps", "inference_logprobs",
                "generation_logprobs", "rollout_per_token_logps", "rollout_logprobs", "logprobs"),
    "trainer": ("trainer_logp", "old_log_probs", "old_per_token_logps", "action_log_probs", "trainer_logprobs",
                "prev_logprobs", "log_probs", "prox_logp"),
    "mask": ("mask", "response_mask", "completion_mask", "action_mask", "loss_mask", "loss_masks", "token_mask"),
    "tokens": ("token_ids", "responses", "completion_ids", "response_ids", "sequences"),
    "text": ("token_text", "response_tokens", "token_strings"),
    "group": ("group", "uid", "group_id", "group_ids", "prompt_uid"),
    "reward": ("reward", "rewards", "token_level_rewards", "token_level_scores", "scores", "score"),
    "advantage": ("advantage", "advantages"),
    "shadow": ("shadow_logp", "shadow_log_probs", "shadow_logprobs"),
    "floor": ("floor_logp", "trainer_floor_logp"),
    # the chain's further sides (docs/chain.md): the rollout engine re-scoring the sampled tokens, the training forward
    "recompute": ("recompute_logp", "recompute_log_probs", "recompute_logprobs", "engine_recompute_logp"),
    "train": ("train_logp", "train_log_probs", "train_logprobs", "current_log_probs", "new_log_probs"),
    "prompt": ("prompt_ids", "prompts", "prompt_token_ids", "prompt_input_ids"),
    "tool": ("tool_mask",),
    "turn": ("turn", "turn_ids", "turn_index"),
    "prompt_text": ("prompt_text", "raw_prompt", "prompt"),
    "attention": ("attention_mask",),
    "offsets": ("offsets", "cu_seqlens"),
}
USER_ROLES = ("rollout", "trainer", "mask", "tokens", "text", "group", "reward", "advantage", "shadow", "floor", "recompute",
              "train", "prompt", "tool", "turn")
SIDE_ROLES = ("recompute", "train")  # roles that fill StepBatch.sides under their own name


@dataclass
class RoleChoice:
    key: str | None
    reason: str


def choose_roles(raw: RawFile, overrides: dict[str, str] | None = None) -> dict[str, RoleChoice]:
    overrides = overrides or {}
    for role, key in overrides.items():
        if role not in USER_ROLES:
            raise BadInput(raw.path, f"unknown role '{role}' in --key (roles: {', '.join(USER_ROLES)})")
        if key not in raw.values:
            raise BadInput(raw.path, f"--key {role}={key}: no key '{key}' (keys: {key_list(raw)})")
    taken = set(overrides.values())
    choices: dict[str, RoleChoice] = {}
    for role, aliases in ROLE_ALIASES.items():
        if role in overrides:
            choices[role] = RoleChoice(overrides[role], "--key override")
            continue
        present = [a for a in aliases if a in raw.values and a not in taken]
        if present:
            key = present[0]
            taken.add(key)
            others = f"; also present: {', '.join(present[1:])}" if len(present) > 1 else ""
            choices[role] = RoleChoice(key, f"first of {len(aliases)} known names{others}")
        else:
            choices[role] = RoleChoice(None, "none of: " + ", ".join(aliases))
    return choices


def key_list(raw: RawFile) -> str:
    return ", ".join(sorted(raw.values)) or "(none)"

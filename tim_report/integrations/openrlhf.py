"""OpenRLHF: the `Experience` list of one training step → one step file (read duck-typed; OpenRLHF is never imported).

Call it in `PPOTrainer.train_step` (openrlhf/trainer/ppo_trainer.py), after
`experiences = self.experience_maker.make_experience_batch(rollout_samples)`, as
`save_experiences(experiences, "tim_steps/", step=global_step)`. The fields, as OpenRLHF names them
(openrlhf/trainer/ppo_utils/experience.py, experience_maker.py and models/actor.py at commit 3c3be62):

    rollout_log_probs   [B, A] vLLM's log-probs; kept only with `algo.advantage.is_correction_enable`
                        (samples_generator.py asks vLLM for logprobs=1 then), else None
    action_log_probs    [B, A] the actor's recomputation, multiplied by action_mask (zero where masked)
    action_mask         [B, A] the loss mask over the last A tokens of `sequences`
    sequences           [B, S] prompt + response token ids; the actions are its last A columns
    advantages          [B, A];  rewards [B];  index  the prompt index of each sample (its group)

The experiences of a step have different widths A, so each is cut to its real tokens and the step is saved flat.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadInput
from ..io.save_step import save_step, step_path, to_numpy

WHO = "OpenRLHF Experience"


def save_experiences(experiences: Any, path: str | Path, *, step: int, **options: Any) -> Path:
    """Save a step's experiences (one Experience or a list); `options` are save_step's (rank, model, background, ...)."""
    parts = [_flat(i, e) for i, e in enumerate(experiences if isinstance(experiences, (list, tuple)) else [experiences])]
    if not parts:
        raise BadInput(WHO, f"no experience to save for step {step} ({step_path(path, step, options.get('rank', 0))})")
    lengths = np.concatenate([p["lengths"] for p in parts])
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "lengths" and all(k in p for p in parts)}
    return save_step(path, cat.pop("rollout"), cat.pop("trainer"), offsets=np.concatenate([[0], np.cumsum(lengths)]),
                     mask=cat.pop("mask"), token_ids=cat.pop("tokens"), advantage=cat.pop("advantage", None),
                     reward=cat.pop("reward", None), group=cat.pop("group", None), step=step,
                     **{**options, "meta": {"framework": "openrlhf", **options.get("meta", {})}})


def _flat(i: int, e: Any) -> dict[str, np.ndarray]:
    """One Experience's [B, A] tensors → flat arrays over its real action positions (right padding dropped)."""
    if getattr(e, "rollout_log_probs", None) is None:
        raise BadInput(WHO, f"experience {i} has no rollout_log_probs: run with algo.advantage.is_correction_enable so "
                            "OpenRLHF keeps vLLM's log-probs")
    rollout, trainer = to_numpy("rollout_log_probs", e.rollout_log_probs), to_numpy("action_log_probs", e.action_log_probs)
    mask = to_numpy("action_mask", e.action_mask).astype(bool)
    if not rollout.shape == trainer.shape == mask.shape:
        raise BadInput(WHO, f"experience {i}: rollout_log_probs {list(rollout.shape)}, action_log_probs "
                            f"{list(trainer.shape)} and action_mask {list(mask.shape)} differ")
    width = mask.shape[1]
    last = np.where(mask.any(axis=1), width - 1 - np.argmax(mask[:, ::-1], axis=1), -1)
    keep = np.arange(width)[None, :] <= last[:, None]  # a row's actions end at its last masked-in one
    out = {"rollout": rollout[keep], "trainer": trainer[keep], "mask": mask[keep],
           "tokens": to_numpy("sequences", e.sequences)[:, -width:][keep], "lengths": keep.sum(axis=1)}
    if getattr(e, "advantages", None) is not None:
        out["advantage"] = to_numpy("advantages", e.advantages)[keep].astype(np.float64)
    if getattr(e, "rewards", None) is not None:
        out["reward"] = to_numpy("rewards", e.rewards).astype(np.float64).reshape(-1)
    if getattr(e, "index", None) is not None:
        out["group"] = np.asarray(e.index).astype(str)
    return out

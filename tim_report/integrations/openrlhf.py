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
An Experience records no policy version (its `info` holds none at that commit, async training included), so the
step's versions are unknown unless the caller passes `weight_version=` (one per sample, in the experiences' order)
and `trainer_version=` through the options: never read as lag 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadInput
from ..io.save_step import save_step, step_path, to_numpy
from .checks import needs, user_meta

WHO = "OpenRLHF Experience"
EXPECTED = ("an OpenRLHF Experience or a list of them (openrlhf/trainer/ppo_utils/experience.py: rollout_log_probs, "
            "action_log_probs, action_mask [B, A] and sequences [B, S])")
FIELDS = ("rollout_log_probs", "action_log_probs", "action_mask", "sequences")


def save_experiences(experiences: Any, path: str | Path, *, step: int, **options: Any) -> Path:
    """Save a step's experiences (one Experience or a list); `options` are save_step's (rank, model, background, ...)."""
    parts = [_flat(i, e) for i, e in enumerate(_experiences(experiences))]
    if not parts:
        raise BadInput(WHO, f"no experience to save for step {step} ({step_path(path, step, options.get('rank', 0))})")
    lengths = np.concatenate([p["lengths"] for p in parts])
    cat = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "lengths" and all(k in p for p in parts)}
    return save_step(path, cat.pop("rollout"), cat.pop("trainer"), offsets=np.concatenate([[0], np.cumsum(lengths)]),
                     mask=cat.pop("mask"), token_ids=cat.pop("tokens"), advantage=cat.pop("advantage", None),
                     reward=cat.pop("reward", None), group=cat.pop("group", None), step=step,
                     **{**options, "meta": {"framework": "openrlhf", **user_meta(WHO, options)}})


def _experiences(value: Any) -> list:
    """One Experience, or any iterable of them (a list, a tuple, a generator): as a list."""
    if value is None or isinstance(value, (str, bytes, Mapping)) or hasattr(value, "action_log_probs"):
        return [value]
    if isinstance(value, Iterable) and not hasattr(value, "shape"):
        return list(value)
    return [value]


def _flat(i: int, e: Any) -> dict[str, np.ndarray]:
    """One Experience's [B, A] tensors → flat arrays over its real action positions (right padding dropped)."""
    needs(WHO, e, EXPECTED, FIELDS, f"experience {i}")
    if getattr(e, "rollout_log_probs", None) is None:
        raise BadInput(WHO, f"experience {i} has no rollout_log_probs: run with algo.advantage.is_correction_enable so "
                            "OpenRLHF keeps vLLM's log-probs")
    for name in FIELDS:
        if getattr(e, name) is None:
            raise BadInput(WHO, f"experience {i} has no {name}: expected {EXPECTED}")
    rollout, trainer = to_numpy("rollout_log_probs", e.rollout_log_probs), to_numpy("action_log_probs", e.action_log_probs)
    mask = to_numpy("action_mask", e.action_mask)
    if mask.dtype.kind not in "biuf":
        raise BadInput(WHO, f"experience {i}: action_mask holds {mask.dtype}, expected 0/1 or booleans")
    mask = mask.astype(bool)
    if not rollout.shape == trainer.shape == mask.shape or mask.ndim != 2:
        raise BadInput(WHO, f"experience {i}: rollout_log_probs {list(rollout.shape)}, action_log_probs "
                            f"{list(trainer.shape)} and action_mask {list(mask.shape)} must be the same [B, A]")
    sequences = to_numpy("sequences", e.sequences)
    width = mask.shape[1]
    if sequences.ndim != 2 or sequences.shape[0] != mask.shape[0] or sequences.shape[1] < width:
        raise BadInput(WHO, f"experience {i}: sequences is {list(sequences.shape)}, expected [{mask.shape[0]}, ≥ {width}] "
                            "(prompt + response; the actions are its last A columns)")
    last = np.where(mask.any(axis=1), width - 1 - np.argmax(mask[:, ::-1], axis=1), -1)
    keep = np.arange(width)[None, :] <= last[:, None]  # a row's actions end at its last masked-in one
    out = {"rollout": rollout[keep], "trainer": trainer[keep], "mask": mask[keep],
           "tokens": sequences[:, sequences.shape[1] - width:][keep], "lengths": keep.sum(axis=1)}
    rows = mask.shape[0]
    if getattr(e, "advantages", None) is not None:
        adv = to_numpy("advantages", e.advantages)
        if adv.shape != mask.shape:
            raise BadInput(WHO, f"experience {i}: advantages is {list(adv.shape)}, expected [B, A] {list(mask.shape)}")
        out["advantage"] = adv[keep].astype(np.float64)
    for name, key in (("rewards", "reward"), ("index", "group")):
        value = getattr(e, name, None)
        if value is not None:
            arr = np.asarray(to_numpy(name, value)).reshape(-1)
            if arr.shape != (rows,):
                raise BadInput(WHO, f"experience {i}: {name} has {arr.size} values for {rows} samples")
            out[key] = arr.astype(str) if key == "group" else _floats(i, name, arr)
    return out


def _floats(i: int, name: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind not in "biuf":
        raise BadInput(WHO, f"experience {i}: {name} holds {arr.dtype}, expected numbers")
    return arr.astype(np.float64)

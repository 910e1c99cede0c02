"""verl: a `DataProto` after the old log-probs → one step file (read duck-typed; verl is never imported).

Call it in `RayPPOTrainer.fit` (verl/trainer/ppo/ray_trainer.py), after `batch = compute_advantage(...)`, as
`save_dataproto(batch, "tim_steps/")`. The keys, as verl 0.9.1 names them (ray_trainer.py, rollout_corr_helper.py):

    batch["rollout_log_probs"]   [B, R] the rollout engine's log-probs (rollout.calculate_log_probs=True keeps them)
    batch["old_log_probs"]       [B, R] the trainer's recomputation (`_compute_old_log_prob`)
    batch["response_mask"]       [B, R] the loss mask (tool outputs of a multi-turn rollout are 0 here)
    batch["attention_mask"]      [B, P + R] real tokens (its last R columns cover the response)
    batch["responses"], batch["prompts"]   [B, R] and [B, P] token ids (prompts left-padded)
    batch["advantages"], batch["token_level_rewards"]   [B, R]
    non_tensor_batch["uid"]      [B] the prompt's id: GRPO's group
    non_tensor_batch["min_global_steps"], ["max_global_steps"]   [B] the policy versions that generated each sample
                                 (fully async and partial rollouts; None for a sample no version generated)
    meta_info["global_steps"]    the step, and the trainer's version

Each sample's generation version is its min and max global step (one integer when equal, the span when not; unknown
without them, never lag 0), the trainer's version the step, unless `weight_version=` / `trainer_version=` say otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..io.save_step import save_step
from .checks import needs, tensor, user_meta, version

WHO = "verl DataProto"


def save_dataproto(data: Any, path: str | Path, *, step: int | None = None, **options: Any) -> Path:
    """Save a verl DataProto's step (both log-probs, mask, ids, groups, rewards, advantages); returns the file's path.
    `options` are save_step's (rank, model, rollout_engine, rollout_dtype, trainer_dtype, background, ...)."""
    needs(WHO, data, "a verl DataProto (verl.protocol.DataProto: .batch, a TensorDict holding 'rollout_log_probs', "
                     "'old_log_probs', 'response_mask', 'attention_mask', 'responses'; .non_tensor_batch['uid']; "
                     ".meta_info['global_steps'])", ("batch",))
    batch = data.batch
    needs(WHO, batch, "DataProto.batch to be a TensorDict (keys() and [name])", ("keys", "__getitem__"))
    extra = getattr(data, "non_tensor_batch", None)
    extra = extra if isinstance(extra, dict) else {}
    keys = set(batch.keys())
    if "rollout_log_probs" not in keys:
        raise BadInput(WHO, "has no 'rollout_log_probs': set actor_rollout_ref.rollout.calculate_log_probs=True so verl "
                            "keeps the rollout engine's log-probs")
    if "old_log_probs" not in keys:
        raise BadInput(WHO, "has no 'old_log_probs' yet: call save_dataproto after verl computes them "
                            "(RayPPOTrainer.fit, after compute_advantage)")
    for name in ("rollout_log_probs", "old_log_probs", *(k for k in ("attention_mask", "response_mask", "prompts", "responses",
                                                                     "advantages", "token_level_rewards") if k in keys)):
        tensor(WHO, name, batch[name])
    rollout, trainer = batch["rollout_log_probs"], batch["old_log_probs"]
    if rollout.data_ptr() == trainer.data_ptr():
        raise BadInput(WHO, "'old_log_probs' is 'rollout_log_probs' (algorithm.rollout_correction.bypass_mode=True): "
                            "verl recomputed no trainer log-probs to compare")
    width = rollout.shape[1]
    attention = batch["attention_mask"] if "attention_mask" in keys else None
    mask = batch["response_mask"] if "response_mask" in keys else (attention[:, -width:] if attention is not None else None)
    prompts = batch["prompts"] if "prompts" in keys else None
    rewards = next((batch[k] for k in ("token_level_rewards", "token_level_scores") if k in keys), None)
    if step is None:
        meta_info = getattr(data, "meta_info", None)
        step = meta_info.get("global_steps") if isinstance(meta_info, dict) else None
    versions = {"weight_version": _versions(extra), "trainer_version": step if isinstance(step, int) else None}
    return save_step(
        path, rollout, trainer, mask=mask, attention_mask=attention,
        token_ids=batch["responses"] if "responses" in keys else None,
        prompt_ids=prompts, prompt_mask=attention[:, : prompts.shape[1]] if prompts is not None and attention is not None else None,
        group=extra.get("uid"), reward=rewards, advantage=batch["advantages"] if "advantages" in keys else None,
        step=step, **{**versions, **options, "meta": {"framework": "verl", **user_meta(WHO, options)}})


def _versions(extra: dict) -> list | None:
    """verl's per-sample min / max global steps → one version per sample (an integer, or [min, max] for a sample
    several versions generated); None when the batch has neither (a synchronous trainer records none)."""
    lo, hi = extra.get("min_global_steps"), extra.get("max_global_steps")
    if lo is None and hi is None:
        return None
    given = [x for x in (lo, hi) if x is not None]  # one of the two alone stands for both
    low, high = list(given[0]), list(given[-1])
    if len(low) != len(high):
        raise BadInput(WHO, f"min_global_steps has {len(low)} entries and max_global_steps {len(high)}")
    out = []
    for a, b in zip(map(version, low), map(version, high)):
        out.append(a if b is None or a == b else b if a is None else [a, b])
    return out

"""TRL: `TimReportCallback`, a TrainerCallback that saves each generation batch of a `GRPOTrainer`.

TRL (1.16, trl/trainer/grpo_trainer.py) keeps both log-probs in the dict `_generate_and_score_completions`
returns, before `_prepare_inputs` shuffles it and splits it into micro-batches; no callback event receives that
dict, so the callback wraps this one method of the trainer it is given, and closes its writer at `on_train_end`:

    sampling_per_token_logps   [B, C] the rollout's log-probs: vLLM's (use_vllm=True) or a rollout_func's "logprobs"
    old_per_token_logps        [B, C] the trainer's, computed when vllm_importance_sampling_correction is on (with vLLM)
                               or when gradient_accumulation_steps % (steps_per_generation × num_iterations) != 0
    completion_mask, tool_mask [B, C] TRL's loss mask is completion_mask * tool_mask (tool outputs are 0)
    completion_ids, prompt_ids, prompt_mask, advantages ([B])

Rows are this process's slice of the generation batch, `num_generations` consecutive rows per prompt, so a
row's group is its global index // num_generations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback

from ..errors import BadInput
from ..io.save_step import save_step
from ..io.step_writer import StepWriter

WHO = "TRL GRPOTrainer"


class TimReportCallback(TrainerCallback):
    """Saves `path/step_S/rank_R.npz` for each generation batch of `trainer` (a thread writes it unless background=False)."""

    def __init__(self, trainer: Any, path: str | Path, *, background: bool = True, **options: Any):
        self.path, self.options = Path(path), options
        self.writer = StepWriter() if background else None
        generate = trainer._generate_and_score_completions

        def generate_and_save(*args: Any, **kwargs: Any) -> dict:
            output = generate(*args, **kwargs)
            if trainer.model.training:  # evaluation batches are not training steps
                self.save(trainer, output)
            return output

        trainer._generate_and_score_completions = generate_and_save

    def save(self, trainer: Any, output: dict) -> Path:
        """One generation batch's dict → a step file (BadInput when TRL computed one of the two log-probs not)."""
        for key, why in (("sampling_per_token_logps", "TRL kept no rollout log-probs: generate with use_vllm=True, "
                          "or a rollout_func that returns 'logprobs'"),
                         ("old_per_token_logps", "TRL recomputed no trainer log-probs: keep "
                          "vllm_importance_sampling_correction=True (with vLLM), or set steps_per_generation × "
                          "num_iterations so that it does not divide gradient_accumulation_steps")):
            if output.get(key) is None:
                raise BadInput(WHO, f"no '{key}': {why}")
        rows = output["completion_ids"].shape[0]
        first = trainer.accelerator.process_index * rows
        group = (np.arange(first, first + rows) // trainer.num_generations).astype(str)
        args = trainer.args
        options = {"model": getattr(trainer.model.config, "_name_or_path", None),
                   "rollout_engine": "vllm" if trainer.use_vllm else "rollout_func",
                   "trainer_engine": "transformers", "trainer_dtype": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
                   **self.options, "meta": {"framework": "trl", **self.options.get("meta", {})}}
        return save_step(self.path, output["sampling_per_token_logps"], output["old_per_token_logps"],
                         mask=output["completion_mask"], tool_mask=output.get("tool_mask"),
                         token_ids=output["completion_ids"], prompt_ids=output["prompt_ids"], prompt_mask=output["prompt_mask"],
                         advantage=output["advantages"], group=group, step=trainer.state.global_step,
                         rank=trainer.accelerator.process_index, world_size=trainer.accelerator.num_processes,
                         background=self.writer if self.writer is not None else False, **options)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.writer is not None:
            self.writer.flush()

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
row's group is its global index // num_generations. Versions: TRL syncs vLLM before generating when
`state.global_step != _last_loaded_step`, so `_last_loaded_step` is the version vLLM holds (every row's
`weight_version`; the training model itself when it generates without vLLM), and `state.global_step` the trainer's.

`digests=True` adds the sync's round trip (docs/sync.md) where the engine is in this process: vLLM's colocate mode (the
model TRL loads the weights into, `llm.llm_engine.model_executor.driver_worker.model_runner.model`, beside the stream
TRL's own sync sends it, `vllm_generation._iter_named_params()`, packed as vLLM fuses it), or the training model itself
when it generates. Each is digested after the generation, in the engine's dtype, with its changed share since the
previous saved step. vLLM's server mode (the engine elsewhere) and its sleep mode (the weights put away after each
generation) are refused at construction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback

from ..errors import BadInput
from ..io.save_step import save_step
from ..io.step_writer import StepWriter
from ..io.weights import weight_digest
from .checks import needs, tensor, user_meta, version

WHO = "TRL GRPOTrainer"
TRAINER_FIELDS = ("_generate_and_score_completions", "accelerator", "num_generations", "state", "args", "model")
OUTPUT_FIELDS = ("completion_ids", "completion_mask", "prompt_ids", "prompt_mask", "advantages")


def _lm_head(trainer: Any) -> dict:
    """GRPOConfig.cast_lm_head_to_fp32 casts the policy's LM head to fp32 (and the head of the model it generates with,
    when it is that model); a vLLM engine's head stays in the engine's dtype: an fp32 head on the trainer side only."""
    cast = bool(getattr(trainer.args, "cast_lm_head_to_fp32", False))
    vllm = bool(getattr(trainer, "use_vllm", False))
    return {"lm_head_fp32": {"rollout": cast and not vllm, "trainer": cast}} if cast else {}


def _num_generations(trainer: Any) -> int:
    """Rows per prompt: a positive integer (0 made every row's group id bogus)."""
    n = trainer.num_generations
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise BadInput(WHO, f"num_generations is {n!r:.40}: expected a positive integer (the completions per prompt)")
    return int(n)


class TimReportCallback(TrainerCallback):
    """Saves `path/step_S/rank_R.npz` for each generation batch of `trainer` (a thread writes it unless background=False)."""

    def __init__(self, trainer: Any, path: str | Path, *, background: bool = True, digests: bool = False, **options: Any):
        needs(WHO, trainer, "a trl GRPOTrainer (it has _generate_and_score_completions, accelerator, num_generations, "
                            "state, args and model)", TRAINER_FIELDS)
        if not callable(trainer._generate_and_score_completions):
            raise BadInput(WHO, "_generate_and_score_completions is not callable: expected a trl GRPOTrainer")
        _num_generations(trainer)
        user_meta(WHO, options)
        self.path, self.options = Path(path), options
        self.digests = _Digests(trainer) if digests else None
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
        if not isinstance(output, dict):
            raise BadInput(WHO, f"_generate_and_score_completions returned {type(output).__name__}: expected its dict of "
                                "tensors (TRL 1.16's GRPOTrainer)")
        for key, why in (("sampling_per_token_logps", "TRL kept no rollout log-probs: generate with use_vllm=True, "
                          "or a rollout_func that returns 'logprobs'"),
                         ("old_per_token_logps", "TRL recomputed no trainer log-probs: keep "
                          "vllm_importance_sampling_correction=True (with vLLM), or set steps_per_generation × "
                          "num_iterations so that it does not divide gradient_accumulation_steps")):
            if output.get(key) is None:
                raise BadInput(WHO, f"no '{key}': {why}")
        missing = [k for k in OUTPUT_FIELDS if output.get(k) is None]
        if missing:
            raise BadInput(WHO, f"the generation batch has no '{missing[0]}': expected the dict GRPOTrainer."
                                f"_generate_and_score_completions returns ({', '.join(OUTPUT_FIELDS)})")
        ids = tensor(WHO, "completion_ids", output["completion_ids"])
        rows = ids.shape[0]
        first = getattr(trainer.accelerator, "process_index", 0) * rows
        group = (np.arange(first, first + rows) // _num_generations(trainer)).astype(str)
        args = trainer.args
        dtype = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"
        step = getattr(trainer.state, "global_step", None)
        versions = _weight_versions(trainer, step, rows)
        options = {"model": getattr(getattr(trainer.model, "config", None), "_name_or_path", None),
                   "weight_version": versions,
                   "trainer_version": step if isinstance(step, int) and not isinstance(step, bool) else None,
                   "rollout_engine": "vllm" if getattr(trainer, "use_vllm", False) else "rollout_func",
                   "trainer_engine": "transformers", "trainer_dtype": dtype,
                   **(self.digests(trainer, step, versions[0] if versions else None) if self.digests else {}),
                   **self.options, "meta": {"framework": "trl", **_lm_head(trainer), **user_meta(WHO, self.options)}}
        return save_step(self.path, output["sampling_per_token_logps"], output["old_per_token_logps"],
                         mask=output["completion_mask"], tool_mask=output.get("tool_mask"),
                         token_ids=output["completion_ids"], prompt_ids=output["prompt_ids"], prompt_mask=output["prompt_mask"],
                         advantage=output["advantages"], group=group, step=step,
                         rank=getattr(trainer.accelerator, "process_index", 0),
                         world_size=getattr(trainer.accelerator, "num_processes", None),
                         background=self.writer if self.writer is not None else False, **options)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.writer is not None:
            self.writer.flush()


class _Digests:
    """digests=True: the weights the engine generated with, and the trainer's cast to the engine's dtype, each with its
    changed share since the previous saved step (docs/sync.md)."""

    def __init__(self, trainer: Any):
        self.vllm = bool(getattr(trainer, "use_vllm", False))
        if self.vllm:
            gen = getattr(trainer, "vllm_generation", None)
            if getattr(trainer, "vllm_mode", None) != "colocate" or gen is None:
                raise BadInput(WHO, "digests=True needs the engine in this process: vLLM's colocate mode "
                                    "(vllm_mode='colocate') or generation by the training model; in server mode, digest "
                                    "the server's weights there (docs/sync.md)")
            if getattr(gen, "enable_sleep_mode", False):
                raise BadInput(WHO, "digests=True with vLLM's sleep mode: the engine's weights are put away after each "
                                    "generation, so they cannot be read then; check the sync with sleep mode off")
        self.engine: Any = None
        self.trainer: Any = None

    def __call__(self, trainer: Any, step: Any, engine_version: Any) -> dict:
        model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer.accelerator, "unwrap_model") \
            else trainer.model
        if self.vllm:  # what TRL loads the weights into, and what its sync sends (renamed, PEFT merged)
            engine = trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
            sent = getattr(trainer.vllm_generation, "_iter_named_params", None)
            weights, packed = (sent() if callable(sent) else model), getattr(engine, "packed_modules_mapping", None)
        else:  # the training model generates: it is the engine
            engine, weights, packed = model, model, None
        dtype = next(engine.parameters()).dtype
        out = {}
        if isinstance(engine_version, int):
            self.engine = weight_digest(engine, dtype, since=self.engine, version=engine_version)
            out["engine_digest"] = self.engine
        if isinstance(step, int) and not isinstance(step, bool):
            self.trainer = weight_digest(weights, dtype, since=self.trainer, version=step, packed=packed)
            out["trainer_digest"] = self.trainer
        return out


def _weight_versions(trainer: Any, step: Any, rows: int) -> list | None:
    """Every row's generation version: vLLM's last loaded step, or the step itself when the training model generates;
    None (unknown, never lag 0) when TRL records no loaded step."""
    if getattr(trainer, "use_vllm", False):
        loaded = version(getattr(trainer, "_last_loaded_step", None))
        return [loaded] * rows if isinstance(loaded, int) and loaded >= 0 else None
    return [step] * rows if isinstance(step, int) and not isinstance(step, bool) else None

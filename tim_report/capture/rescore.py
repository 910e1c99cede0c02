"""Score saved tokens with any checkpoint (`tim-report rescore`): which weights did the engine really use?

The tokens of a saved step (its prompts and responses as ids) are scored teacher-forced by a transformers checkpoint,
through the one scoring routine of `capture` (HFEngine.score → score.token_logprobs: fp32 log-softmax of each chunk,
the temperature applied, no top-p / top-k, as a trainer scores). The caller adds the result as a named side of the
batch; the chain then says which checkpoint the rollout is nearest to.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import BadInput
from .engines import one_line
from .model_path import resolve_model
from .spec import ENGINE_DTYPES


def check_checkpoint(model: str, dtype: str, notice: Callable[[str], None] | None = None) -> str:
    """The transformers folder CKPT stands for (a folder, or a GGUF converted once into the cache:
    model_path.resolve_model) and an hf dtype, checked before anything is loaded."""
    if dtype not in ENGINE_DTYPES["hf"]:
        raise BadInput("--dtype", f"{dtype}: rescore scores with transformers in {', '.join(ENGINE_DTYPES['hf'])}")
    return str(resolve_model(model, notice=notice))


def score_tokens(model: str, dtype: str, device: str, prompts: list[list[int]], completions: list[list[int]],
                 temperature: float, progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, str]:
    """Every completion token's log-prob under `model` ([T] float64, in the order of the sequences) and the
    transformers version that scored them."""
    import torch

    from .hf import HFEngine

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        engine = HFEngine(model, dtype, device=device)
    except Exception as exc:  # weights the checks before could not see (a shard cut short, a tensor of the wrong shape)
        raise BadInput(model, f"transformers cannot load the model ({one_line(exc)})") from None
    try:
        scored = engine.score(prompts, completions, temperature, progress=progress)
    finally:
        engine.close()
    flat = np.concatenate(scored) if scored else np.zeros(0)
    return flat.astype(np.float64, copy=False), engine.version

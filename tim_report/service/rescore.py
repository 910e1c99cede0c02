"""`rescore`: a saved step's tokens scored by another checkpoint, added as a named side, written as a new canonical
file (the input is never changed). The chain (analysis/chain.py) then reads the rollout against each rescored
checkpoint: the one it is nearest to is the weights the engine sampled with (docs/staleness.md, "Which weights")."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadInput
from ..io import LoadOptions, load, save_batch
from ..model import SIDE_NAME_CHARS, StepBatch

FIXED_SIDES = ("rollout", "trainer", "shadow", "floor")  # a rescored side cannot take a name the batch's fields hold


@dataclass
class RescoreOptions:
    model: str
    dtype: str = "fp32"
    name: str | None = None  # the side's name; default the checkpoint folder's, made a side name
    device: str = "auto"
    temperature: float | None = None  # default: the batch's sampling temperature (meta), else 1


@dataclass
class Rescored:
    batch: StepBatch
    name: str
    replaced: bool  # the batch already held a side of this name
    chain: dict | None  # the chain over the new file's sides, with `nearest` (analysis/chain.py)


@contextlib.contextmanager
def _quiet(_label: str, _total: int):
    yield lambda n=1: None


def side_name(opts: RescoreOptions) -> str:
    """`--as NAME`, or the checkpoint folder's name in lower case with other characters as `_`."""
    if opts.name is not None:
        name = opts.name
        if not name or set(name) - set(SIDE_NAME_CHARS):
            raise BadInput("--as", f"{name!r}: a side is named in lower-case letters, digits and _")
    else:
        given = Path(opts.model).resolve()
        stem = given.stem if given.suffix.lower() == ".gguf" else given.name
        name = re.sub(r"[^a-z0-9_]+", "_", stem.lower()).strip("_") or "checkpoint"
    if name in FIXED_SIDES:
        raise BadInput("--as", f"{name!r} is one of the batch's own sides ({', '.join(FIXED_SIDES)}): name the "
                               "rescored side otherwise")
    return name


def rescore(step: Path, out: Path, load_options: LoadOptions, opts: RescoreOptions, progress=None,
            notice: Callable[[str], None] | None = None) -> Rescored:
    """Load STEP, score its tokens with the checkpoint, add the side, write OUT (atomically); every check first."""
    from ..analysis.chain import chain_analysis
    from ..analysis.tokens import valid_tokens
    from ..capture.rescore import check_checkpoint, score_tokens

    if out.is_dir() or out.suffix.lower() != ".npz":
        raise BadInput(out, "the output is one canonical .npz file")
    name = side_name(opts)
    folder = check_checkpoint(opts.model, opts.dtype, notice)
    batch = load(step, load_options)
    if batch.token_ids is None or batch.prompt_ids is None:
        missing = " and ".join(n for n, v in (("token ids", batch.token_ids), ("prompt ids", batch.prompt_ids)) if v is None)
        raise BadInput(step, f"has no {missing}: rescore scores the saved tokens after their prompts (save_step's "
                             "token_ids= and prompt_ids=, capture's files)")
    prompts = [[int(t) for t in p] for p in batch.prompt_ids]
    completions = [[int(t) for t in batch.token_ids[batch.tokens_of(i)]] for i in range(batch.n_seqs)]
    _check_fits(step, folder, prompts, completions)
    temperature = opts.temperature if opts.temperature is not None else _sampling_temperature(batch)
    if not temperature > 0:
        raise BadInput("--temperature", f"{temperature} must be > 0")
    with (progress or _quiet)(f"scoring with {Path(opts.model).name} ({opts.dtype})", batch.n_seqs) as advance:
        logp, version = score_tokens(folder, opts.dtype, opts.device, prompts, completions, temperature, advance)
    replaced = name in batch.sides
    batch.sides[name] = logp
    batch.meta.setdefault("rescore", {})
    batch.meta["rescore"][name] = {"model": str(opts.model), "dtype": opts.dtype, "temperature": temperature,
                                   "engine": "transformers", "engine_version": version,
                                   "how": "teacher-forced, fp32 log-softmax, no top-p / top-k"}
    batch.meta["chain"] = chain_with(batch, name)
    batch.decoder = None
    out.parent.mkdir(parents=True, exist_ok=True)
    save_batch(batch, out)
    return Rescored(batch, name, replaced, chain_analysis(batch, valid_tokens(batch)[0]))


def chain_with(batch: StepBatch, name: str) -> list[str]:
    """The chain's path with the rescored side placed before the trainer's weights (after the sides rescored before
    it): rollout → [recompute] → older checkpoints → [shadow] → trainer → [train]."""
    path = [n for n in batch.chain_order() if n != name]
    at = next((i for i, n in enumerate(path) if n in ("shadow", "trainer")), len(path))
    return [*path[:at], name, *path[at:]]


def _sampling_temperature(batch: StepBatch) -> float:
    sampling = batch.meta.get("sampling")
    value = sampling.get("temperature") if isinstance(sampling, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.0


def _check_fits(step: Path, model: str, prompts: list[list[int]], completions: list[list[int]]) -> None:
    """Every sequence within the checkpoint's context and every id within its vocabulary (`model`: its folder)."""
    from ..capture.rescore import context_of

    ctx, vocab = context_of(model)
    longest = max((len(p) + len(c) for p, c in zip(prompts, completions)), default=0)
    if longest > ctx:
        raise BadInput(step, f"holds a sequence of {longest} tokens, beyond {model}'s context of {ctx}")
    top = max((max(s) for s in [*prompts, *completions] if s), default=0)
    low = min((min(s) for s in [*prompts, *completions] if s), default=0)
    if low < 0 or (vocab is not None and top >= vocab):
        raise BadInput(step, f"holds token id {low if low < 0 else top}, outside {model}'s vocabulary of {vocab}: "
                             "another tokenizer's ids")
    if not any(completions):
        raise BadInput(step, "has no response tokens to score")

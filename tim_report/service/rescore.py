"""`rescore`: a saved step's tokens scored by one or several checkpoints, each added as a named side, written as a new
canonical file (the input is never changed). Each checkpoint is a candidate for the weights the engine sampled with;
analysis/lag/rescored.py then says, lag bucket by lag bucket, which one the rollout is nearest to (docs/staleness.md,
"Which weights did the engine use")."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput
from ..io import LoadOptions, load, save_batch
from ..model import SIDE_KINDS, SIDE_NAME_CHARS, SIDE_NAME_MAX, StepBatch

# A checkpoint named for its version (v5, model_v5, step_5, global_step_5, checkpoint_500, iter_0000100): that version,
# the one a lag bucket's label is compared with. Any other name has no version (its bucket reads "nearest NAME").
VERSIONED_NAME = re.compile(r"(?:^|_)(?:v|version|step|iter|checkpoint|ckpt)_?([0-9]{1,18})$")


@dataclass
class Checkpoint:
    model: str  # a transformers folder or a .gguf (capture/model_path.resolve_model)
    name: str | None = None  # the side's name; default the checkpoint folder's, made a side name


@dataclass
class RescoreOptions:
    checkpoints: list[Checkpoint] = field(default_factory=list)
    dtype: str = "fp32"
    device: str = "auto"
    temperature: float | None = None  # default: the batch's sampling temperature (meta), else 1


@dataclass
class Scored:
    name: str
    model: str
    version: int | None  # from the name (VERSIONED_NAME); None: not named for a version
    replaced: bool  # the batch held a rescored side of this name, now replaced


@dataclass
class Rescored:
    batch: StepBatch
    scored: list[Scored]
    weights: dict | None  # the new file's per-lag reading (analysis/lag/rescored.weights_by_lag)
    temperature: float


@contextlib.contextmanager
def _quiet(_label: str, _total: int):
    yield lambda n=1: None


def side_names(opts: RescoreOptions) -> list[str]:
    """Each checkpoint's side name: `--as NAME`, or its folder's (a .gguf's stem) in lower case with other characters
    as `_`. A role's name and a name given twice are refused."""
    names = []
    for c in opts.checkpoints:
        if c.name is not None:
            name = c.name
            if not name or set(name) - set(SIDE_NAME_CHARS) or len(name) > SIDE_NAME_MAX:
                raise BadInput("--as", f"{name[:40]!r}{'…' if len(name) > 40 else ''}: a side is named in at most "
                                       f"{SIDE_NAME_MAX} lower-case letters, digits and _")
        else:
            given = Path(c.model).resolve()
            stem = given.stem if given.suffix.lower() == ".gguf" else given.name
            name = re.sub(r"[^a-z0-9_]+", "_", stem.lower()).strip("_") or "checkpoint"
        if name in SIDE_KINDS:
            raise BadInput("--as", f"{name!r} is a role of the batch's own sides ({', '.join(SIDE_KINDS)}): name the "
                                   "checkpoint otherwise")
        if name in names:
            raise BadInput("--as", f"two checkpoints would be the side {name!r}: give each its own --as")
        names.append(name)
    return names


def checkpoint_version(name: str) -> int | None:
    """The version a checkpoint's name says (VERSIONED_NAME), else None."""
    m = VERSIONED_NAME.search(name)
    return int(m.group(1)) if m else None


def rescore(step: Path, out: Path, load_options: LoadOptions, opts: RescoreOptions, progress=None,
            notice: Callable[[str], None] | None = None) -> Rescored:
    """Load STEP, score its tokens with each checkpoint in turn (one model in memory at a time), add the sides, write
    OUT (atomically); every check before the first model loads."""
    from ..analysis.lag.rescored import weights_by_lag
    from ..analysis.tokens import valid_tokens
    from ..capture.rescore import check_checkpoint, score_tokens

    if not opts.checkpoints:
        raise BadInput("--model", "name at least one checkpoint")
    if out.is_dir() or out.suffix.lower() != ".npz":
        raise BadInput(out, "the output is one canonical .npz file")
    names = side_names(opts)
    folders = [check_checkpoint(c.model, opts.dtype, notice) for c in opts.checkpoints]
    batch = load(step, load_options)
    done = batch.meta.get("rescore")
    done = {} if done is None else done
    if not isinstance(done, dict):
        raise BadInput(step, f"meta 'rescore' is a {type(done).__name__}, not the object rescore writes (a side name "
                             "for each checkpoint scored)")
    for name in names:
        if name in batch.sides and name not in done:
            raise BadInput("--as", f"{name!r} is already a side of {step} (not a rescored checkpoint): name the "
                                   "checkpoint otherwise")
    if batch.token_ids is None or batch.prompt_ids is None:
        missing = " and ".join(n for n, v in (("token ids", batch.token_ids), ("prompt ids", batch.prompt_ids)) if v is None)
        raise BadInput(step, f"has no {missing}: rescore scores the saved tokens after their prompts (save_step's "
                             "token_ids= and prompt_ids=, capture's files)")
    prompts = [[int(t) for t in p] for p in batch.prompt_ids]
    completions = [[int(t) for t in batch.token_ids[batch.tokens_of(i)]] for i in range(batch.n_seqs)]
    for folder in dict.fromkeys(folders):
        _check_fits(step, folder, prompts, completions)
    temperature = opts.temperature if opts.temperature is not None else _sampling_temperature(batch)
    if not temperature > 0:
        raise BadInput("--temperature", f"{temperature} must be > 0")
    scored = []
    for c, name, folder in zip(opts.checkpoints, names, folders):
        with (progress or _quiet)(f"scoring with {name} ({opts.dtype})", batch.n_seqs) as advance:
            logp, engine_version = score_tokens(folder, opts.dtype, opts.device, prompts, completions, temperature,
                                                advance)
        scored.append(Scored(name, str(c.model), checkpoint_version(name), name in batch.sides))
        batch.sides[name] = logp
        done[name] = {"model": str(c.model), "dtype": opts.dtype, "temperature": temperature,
                      "version": checkpoint_version(name), "engine": "transformers", "engine_version": engine_version,
                      "how": "teacher-forced, fp32 log-softmax, no top-p / top-k"}
    batch.meta["rescore"] = done
    if isinstance(batch.meta.get("chain"), list):  # checkpoints are candidates, not links (a file rescore wrote before)
        batch.meta["chain"] = [n for n in batch.meta["chain"] if n not in done]
    batch.decoder = None
    out.parent.mkdir(parents=True, exist_ok=True)
    save_batch(batch, out)
    return Rescored(batch, scored, weights_by_lag(batch, valid_tokens(batch)[0]), temperature)


def _sampling_temperature(batch: StepBatch) -> float:
    sampling = batch.meta.get("sampling")
    value = sampling.get("temperature") if isinstance(sampling, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 1.0


def _check_fits(step: Path, model: str, prompts: list[list[int]], completions: list[list[int]]) -> None:
    """Every sequence within the checkpoint's context and every id within its vocabulary (`model`: its folder)."""
    from ..capture.model_path import config_numbers

    ctx, vocab = config_numbers(model)
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

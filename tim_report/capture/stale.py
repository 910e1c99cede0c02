"""`capture --stale LAG=CKPT`: an asynchronous batch made on purpose. Part of the sequences is sampled by older
checkpoints while the trainer scores every token with `--model`, and each sequence is labelled with the version that
generated it, so the batch carries lag (design §10, docs/staleness.md).

The samplers are `--model` for lag 0 and each named checkpoint for its lag; the prompts are dealt to them in turn (a
prompt's `n_samples` sequences stay together, as a GRPO group is generated at once). `--stale 0=CKPT` makes CKPT the
lag-0 sampler: an engine that claims the trainer's version while it holds other weights (a weight sync that never
happened). A negative lag is a checkpoint labelled newer than the trainer.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import BadInput
from ..model import version_int
from .model_path import config_numbers


def parse_stale(values: tuple[str, ...] | list[str]) -> dict[int, str]:
    """`LAG=CKPT` strings → {lag: checkpoint folder}; each lag once."""
    out: dict[int, str] = {}
    for v in values:
        lag, sep, path = str(v).partition("=")
        n = version_int(lag)  # at most 18 digits: the versions it makes must fit int64
        if not sep or n is None or not path.strip():
            raise BadInput("--stale", f"'{v}' is not LAG=CKPT (an integer lag of at most 18 digits, then a checkpoint folder)")
        if n in out:
            raise BadInput("--stale", f"lag {n} is named twice")
        out[n] = path.strip()
    return out


def check_stale(model: str, stale: dict[int, str], n_rollouts: int, recompute: bool) -> None:
    """Every checkpoint a transformers folder with the model's vocabulary; one rollout engine, no recompute."""
    if not stale:
        return
    if n_rollouts != 1:
        raise BadInput("--stale", "samples with one rollout engine (one --rollout, no --matrix): the others would "
                                  "re-score tokens that several checkpoints sampled")
    if recompute:
        raise BadInput("--stale", "and --recompute cannot go together: the engine's re-score would need each "
                                  "sequence's own checkpoint")
    vocab = _vocab(Path(model))
    for lag, path in stale.items():
        p = Path(path)
        if not p.is_dir() or not (p / "config.json").is_file():
            raise BadInput(path, f"--stale {lag}=: not a transformers checkpoint folder (no config.json)")
        if _vocab(p) != vocab:
            raise BadInput(path, f"--stale {lag}=: vocabulary of {_vocab(p)} tokens, the model's has {vocab}: another "
                                 "tokenizer's checkpoint")


def _vocab(folder: Path) -> int | None:
    return config_numbers(folder)[1]


def samplers(model: str, stale: dict[int, str]) -> list[tuple[int, str]]:
    """(lag, checkpoint) of each sampler, lag 0 first (`--model` unless `--stale 0=` names another)."""
    out = {0: model, **stale}
    return sorted(out.items(), key=lambda kv: (kv[0] != 0, kv[0]))


def deal(n_prompts: int, n_samplers: int) -> list[int]:
    """Prompt i → sampler i mod n: the prompts dealt in turn."""
    return [i % n_samplers for i in range(n_prompts)]


def trainer_version(stale: dict[int, str], given: int | None) -> int:
    """The trainer's version: given, else the largest lag (so that every generation version is ≥ 0)."""
    return given if given is not None else max([0, *stale])


def labels(lags: list[int], version: int) -> list[str]:
    """Each sequence's generation version, as StepBatch.weight_version holds it."""
    return [str(version - lag) for lag in lags]


def version_label(model: str, stale: dict[int, str], sampler: str | None, given: int | None) -> str:
    """The weight version a sampler's engine says it holds (`sampler`: its checkpoint, None for --model): the
    trainer's version minus its lag, as vLLM labels the tokens it samples (`set_weight_version`)."""
    lag = next(lag for lag, path in samplers(model, stale) if (None if path == model else path) == sampler)
    return str(trainer_version(stale, given) - lag)

"""`tim-report rescore STEP --model CKPT [--model CKPT …] -o OUT.npz`: a saved step's tokens scored by each checkpoint,
added as named sides, written as a new canonical file (the input is left as it was). Which weights did the engine use:
lag bucket by lag bucket, the checkpoint the rollout is nearest to (docs/staleness.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ..catalogue import rescore as words
from ..catalogue.numbers import fmt
from ..errors import BadInput
from .options import fail_cleanly, load_options
from .text import safe


@click.command("rescore")
@click.argument("step", type=click.Path(path_type=Path))
@click.option("--model", "models", required=True, multiple=True, metavar="CKPT",
              help="A transformers checkpoint folder (config.json and weights), or a .gguf file (converted once into the "
                   "cache, as capture does). Repeat it to score with several checkpoints, one loaded at a time.")
@click.option("--as", "names", multiple=True, metavar="NAME",
              help="The side's name (lower-case letters, digits, _), once per --model in their order; default each "
                   "checkpoint folder's name. A name ending in its version (v5, step_5, global_step_5, iter_0000100) "
                   "is compared with each lag bucket's labelled version.")
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
              help="The precision every checkpoint scores in.")
@click.option("--temperature", type=float, default=None,
              help="Scoring temperature; default the step's sampling temperature (meta), else 1.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda[:N].")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="The new canonical .npz: the step with the rescored sides added (may name STEP itself: replaced "
                   "atomically).")
@fail_cleanly
@load_options
def rescore_command(step, models, names, dtype, temperature, device, out, load) -> None:
    """Score STEP's tokens (its prompt and token ids) with each checkpoint CKPT and write STEP plus those sides to OUT.

    Each checkpoint is a candidate for the weights the engine sampled with, never a link of the chain: per lag bucket
    (lag 0 first) the line below names the one the rollout is nearest to, or the candidates that tie, and whether
    that is the bucket's labelled version ("lag 0: nearest v5 (labelled v9): the engine's tokens look like v5")."""
    from ..service.rescore import Checkpoint, RescoreOptions, rescore
    from .progress import step_progress

    if names and len(names) != len(models):
        raise BadInput("--as", f"given {len(names)} time{'s' if len(names) != 1 else ''} for {len(models)} --model: "
                               "give one per --model, in their order, or none")
    checkpoints = [Checkpoint(str(m), names[i] if names else None) for i, m in enumerate(models)]
    done = rescore(step, out, load, RescoreOptions(checkpoints, dtype=dtype, device=device, temperature=temperature),
                   progress=step_progress, notice=lambda line: click.echo(f"tim-report: {safe(line)}", err=True))
    b, w = done.batch, done.weights
    each = ", ".join(f"{s.name}{' (replaced)' if s.replaced else ''} by {s.model}" for s in done.scored)
    click.echo(f"{safe(out)}: scored {safe(each)} ({dtype}), {b.n_seqs} sequences, {fmt(b.n_tokens)} tokens")
    for row in (w or {}).get("by_lag", []):
        click.echo(f"  {safe(words.bucket_line(row, bool(w and w['versions'])))}; KL k3 against the rollout: "
                   f"{safe(words.kl_list(row))} ({fmt(row['tokens'])} tokens)")

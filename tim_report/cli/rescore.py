"""`tim-report rescore STEP --model CKPT -o OUT.npz`: a saved step's tokens scored by any checkpoint, added as a named
side, written as a new canonical file (the input is left as it was). Which weights did the engine use: the chain of
the new file names the side the rollout is nearest to (docs/staleness.md)."""

from __future__ import annotations

from pathlib import Path

import click

from ..catalogue.chain import tie_words
from ..catalogue.numbers import fmt
from .options import fail_cleanly, load_options
from .text import safe


@click.command("rescore")
@click.argument("step", type=click.Path(path_type=Path))
@click.option("--model", required=True, metavar="CKPT",
              help="A transformers checkpoint folder (config.json and weights), or a .gguf file (converted once into the "
                   "cache, as capture does).")
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
              help="The precision the checkpoint scores in.")
@click.option("--as", "name", metavar="NAME", default=None,
              help="The side's name (lower-case letters, digits, _); default the checkpoint folder's name.")
@click.option("--temperature", type=float, default=None,
              help="Scoring temperature; default the step's sampling temperature (meta), else 1.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda[:N].")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="The new canonical .npz: the step with the rescored side added (may name STEP itself: replaced atomically).")
@fail_cleanly
@load_options
def rescore_command(step, model, dtype, name, temperature, device, out, load) -> None:
    """Score STEP's tokens (its prompt and token ids) with the checkpoint CKPT and write STEP plus that side to OUT.

    The side sits on the chain before the trainer (rollout → CKPT → trainer); rescore several checkpoints, oldest
    first, into the same file and `build` or `check` it: the chain names the side the rollout is nearest to, the
    weights the engine really sampled with."""
    from ..service.rescore import RescoreOptions, rescore
    from .progress import step_progress

    done = rescore(step, out, load, RescoreOptions(model=str(model), dtype=dtype, name=name, device=device,
                                                   temperature=temperature), progress=step_progress,
                   notice=lambda line: click.echo(f"tim-report: {safe(line)}", err=True))
    b = done.batch
    line = (f"{safe(out)}: side {done.name}{' (replaced)' if done.replaced else ''} scored by {safe(model)} ({dtype}), "
            f"{b.n_seqs} sequences, {fmt(b.n_tokens)} tokens")
    near = (done.chain or {}).get("nearest")
    if near:
        ranked = ", ".join(f"{r['side']} {fmt(r['kl_k3'])}" for r in near["by_side"])
        nearest = tie_words(near["tied"]) if near.get("tied") else near["side"]
        line += f"; KL k3 against the rollout: {safe(ranked)}; nearest: {safe(nearest)}"
    click.echo(line)

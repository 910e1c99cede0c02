"""`tim-report export SITE --tensorboard DIR`: a site's per-step numbers and change points for TensorBoard."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import BadInput
from .options import fail_cleanly
from .text import safe


@click.command("export")
@click.argument("site", type=click.Path(path_type=Path))
@click.option("--tensorboard", "tensorboard", type=click.Path(path_type=Path), metavar="DIR",
              help="Write TensorBoard event files into DIR (`tensorboard --logdir DIR`): each step's headline metrics as "
                   "tim/<metric>, the change points and the run verdict as text (pip install -e \".[tensorboard]\" in the checkout).")
@fail_cleanly
def export_command(site, tensorboard) -> None:
    """Write the numbers of SITE (a folder `build` or `watch` wrote) where the team already looks."""
    from ..service.export import export_tensorboard

    if tensorboard is None:
        raise BadInput("export", "name a target: --tensorboard DIR")
    done = export_tensorboard(site, tensorboard)
    click.echo(f"{done.steps} steps: {done.scalars} scalars and {done.texts} texts written to {safe(done.path)}/ "
               f"(tensorboard --logdir {safe(done.path)})")

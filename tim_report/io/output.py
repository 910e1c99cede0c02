"""Output that is all or nothing: files are rendered into a staging folder beside the target, then moved in."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from ..errors import BadInput


@contextlib.contextmanager
def staging(out: Path) -> Iterator[Path]:
    """A temporary folder on the same filesystem as `out`, removed afterwards whatever happens."""
    if out.exists() and not out.is_dir():
        raise BadInput(out, "output path exists and is not a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tim-report-", dir=out.parent) as tmp:
        yield Path(tmp)


def move_into(staging_dir: Path, out: Path) -> None:
    """Move everything staged into `out`, replacing what is there under the same names."""
    out.mkdir(parents=True, exist_ok=True)
    for item in sorted(staging_dir.iterdir()):
        target = out / item.name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        shutil.move(str(item), str(target))

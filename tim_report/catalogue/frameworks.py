"""The frameworks whose dumps tim-report reads: the registry every place that lists them reads.

A framework is its dump module in `tim_report/io/dumps/` (defining `DUMP`: how its files are recognised, the
shapes of its run folder, its completion marker, its layout notes and its reader) and one entry here: the name
`--format-hint` takes and `meta["framework"]` says, that module, `--format-hint`'s line for it, and how the
commands' help names its run folder. Detection and discovery (`io/detect.py`, `io/discover.py`), reading
(`io.load`), `inspect`, `watch`'s completeness rule, the command-line help and docs/formats.md's list all come
from here. The words live here, not in the dump module, so that `tim-report --help` can list the frameworks
without importing a reader (numpy, torch).

The order is the order detection tries them: frameworks recognised by their class names before those recognised
by dict keys alone. `dict` (a plain dict of arrays, key names matched to roles) has no dump module.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    name: str  # as `--format-hint` and meta["framework"] spell it
    module: str | None  # tim_report.io.dumps.<module> defines DUMP; None: read as a plain dict of arrays
    help: str  # its line in `--format-hint`'s help
    run_folder: str | None = None  # how the commands' help names its run folder (None: it has none)


FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("prime-rl", "prime_rl", "token_exports/step_S/rank_R.jsonl", "prime-rl token_exports/"),
    Framework("nemo-rl", "nemo_rl", "train_data_stepN.jsonl", "a NeMo-RL log dir"),
    Framework("skyrl", "skyrl", "dumped_data/global_step_N_training_input.pkl", "a SkyRL export"),
    Framework("verl", "verl", "a pickled DataProto"),
    Framework("slime", "slime", "--dump-details train_data/{id}.pt", "a slime --dump-details dir"),
    Framework("miles", "miles", "--dump-details train_data/{id}_{rank}.pt", "a miles --dump-details dir"),
    Framework("dict", None, "a plain dict of arrays"),
)}


def hint_help() -> str:
    """`--format-hint`'s help: every framework with its line."""
    return ("Read the input as this framework's dump instead of detecting it from the content: "
            + "; ".join(f"{f.name} ({f.help})" for f in FRAMEWORKS.values()) + ".")


def run_folders() -> str:
    """The run folders the commands read, as their help names them."""
    return ", ".join(f.run_folder for f in FRAMEWORKS.values() if f.run_folder)

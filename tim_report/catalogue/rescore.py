"""Which weights the engine used: the words of `rescore`'s reading, lag bucket by lag bucket (the numbers come from
analysis/lag/rescored.py; docs/staleness.md explains the rule). Each bucket reads one of:

    lag 0: nearest v5 (labelled v9): the engine's tokens look like v5
    lag 1: nearest v8, as labelled
    lag 0: v9 and the trainer tie (all v9), as labelled
    lag 2: v1 and v2 tie: these tokens cannot tell which of them sampled them
"""

from __future__ import annotations

from typing import Any

from .numbers import fmt

Row = dict[str, Any]


def version(v: int | None) -> str:
    """'v5' (a version as the lines write it), '—' unknown."""
    return f"v{v}" if v is not None else "—"


def side(name: str) -> str:
    return "the trainer" if name == "trainer" else name


def tie_words(tied: list[str]) -> str:
    """'v0 and the trainer tie' / 'v0, v1 and the trainer tie': the candidates the rollout is equally near to."""
    names = [side(n) for n in tied]
    return f"{', '.join(names[:-1])} and {names[-1]} tie"


def bucket_label(row: Row, versions: bool) -> str:
    """'lag 0', 'lag −1', 'tokens of unknown lag', or 'every token' when the batch names no weight version."""
    if row["lag"] == "unknown":
        return "tokens of unknown lag" if versions else "every token"
    return f"lag {fmt(row['lag']).replace('-', '−')}"


def reading(row: Row) -> str:
    """What a bucket's ranking says, after its label."""
    labelled, looks, same = row["labelled_version"], row["looks_like_version"], row["as_labelled"]
    if row["nearest"] is not None:
        head = f"nearest {side(row['nearest'])}"
        if row["nearest"] == "trainer" and looks is not None:
            head = f"nearest the trainer's weights ({version(looks)})"
    else:
        head = tie_words(row["tied"]) + (f" (all {version(looks)})" if looks is not None else "")
    if same:
        return f"{head}, as labelled"
    if same is False:
        return f"{head} (labelled {version(labelled)}): the engine's tokens look like {version(looks)}"
    if row["nearest"] is None and looks is None:
        return f"{head}: these tokens cannot tell which of them sampled them"
    return head + (f" (labelled {version(labelled)})" if labelled is not None else "")


def short_reading(row: Row) -> str:
    """A bucket's reading in a table cell: 'as labelled', 'looks like v5', 'cannot tell', 'nearest base'."""
    if row["as_labelled"]:
        return "as labelled"
    if row["as_labelled"] is False:
        return f"looks like {version(row['looks_like_version'])}"
    if row["nearest"] is None and row["looks_like_version"] is None:
        return "cannot tell"
    return f"nearest {side(row['nearest'])}" if row["nearest"] else f"looks like {version(row['looks_like_version'])}"


def bucket_line(row: Row, versions: bool) -> str:
    return f"{bucket_label(row, versions)}: {reading(row)}"


def kl_list(row: Row) -> str:
    """'v1 0.000127, v2 0.00161, trainer 0.00476': each candidate's KL k3 against the rollout, nearest first."""
    return ", ".join(f"{r['side']} {fmt(r['kl_k3'])}" for r in row["by_side"])


def verdict_sentence(rescore: dict | None) -> str | None:
    """The sentence the verdict gains once checkpoints were rescored: each bucket's reading."""
    if not rescore or not rescore["by_lag"]:
        return None
    lines = "; ".join(bucket_line(r, rescore["versions"]) for r in rescore["by_lag"])
    return f"Which weights (the rescored checkpoints and the trainer, nearest to the rollout): {lines}."


def table_intro(rescore: dict) -> str:
    """The sentence over the page's table."""
    tv = rescore["trainer_version"]
    label = (f"a bucket's labelled version is the trainer's ({version(tv)}) minus its lag" if tv is not None
             else "the trainer's version is unknown, so no bucket has a labelled version")
    return ("Each checkpoint `rescore` scored these tokens with, and the trainer's own weights, is a candidate for the "
            "weights that sampled them, never a link of the chain. Per lag bucket, each candidate's KL k3 against the "
            "rollout: the nearest (▶, smallest mean δ²) is the likeliest; candidates the tokens cannot tell from it "
            f"tie (=). {label[0].upper()}{label[1:]}.")

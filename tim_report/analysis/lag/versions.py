"""Weight versions → lags: which version generated each valid token, which the trainer holds, and the lag between.

    lag = trainer version − generation version        (docs/staleness.md)

The trainer's version is `meta["trainer_version"]` where the file or `--meta` gives one, else the step number (said
as `trainer_version_source`: "meta" or "step"; None when neither is known, "invalid" when the meta's is present but
not an integer version: then no lag is claimed, never one from the step). A token's
generation version is its `token_version` where the framework records one per token, else its sequence's
`weight_version`; a sequence several versions generated ("2,3") without per-token versions is counted at its oldest
version (its largest lag). A version that is missing or not an integer is unknown: its tokens go to the "unknown"
bucket, never to lag 0. Versions count from 0: a negative one is unknown too (AReaL writes −1 on the tokens no engine
generated).
"""

from __future__ import annotations

import numpy as np

from ...model import UNKNOWN_VERSION, VERSION_DIGITS, StepBatch, version_int
from ..tokens import Tokens

UNKNOWN = UNKNOWN_VERSION  # the sentinel of an unknown version, and of an unknown lag
LIMIT = 10**VERSION_DIGITS  # a version this large or larger is unknown (a lag must not wrap around int64)


def trainer_version(meta: dict) -> tuple[int | None, str | None]:
    """(the trainer's version, "meta" | "step" | "invalid" | None): meta["trainer_version"], else the step number.

    Only an absent (or null) trainer_version falls back to the step: one that is present but not an integer version
    ("abc", NaN, True) makes the trainer's version unknown ("invalid"), so no lag is claimed (missing stays missing)."""
    given = meta.get("trainer_version")
    if given is not None:
        v = _version(given)
        return (v, "meta") if v is not None else (None, "invalid")
    v = _version(meta.get("step"))
    return (v, "step") if v is not None else (None, None)


def _version(v: object) -> int | None:
    """An integer version from meta (an int, a whole float, ASCII digits as text) below LIMIT; None otherwise."""
    if isinstance(v, (bool, np.bool_)) or v is None:
        return None
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        v = int(v)
    if isinstance(v, (int, np.integer)) and abs(int(v)) < LIMIT:
        return int(v)
    return version_int(v) if isinstance(v, str) else None


def parse(text: str) -> list[int] | None:
    """A sequence's versions oldest → newest ("2,3" → [2, 3]); None when any part is not a non-negative integer."""
    parts = [version_int(p) for p in str(text).split(",") if p.strip()]
    if not parts or any(p is None or p < 0 for p in parts):
        return None
    return [p for p in parts if p is not None]


def sequence_versions(weight_version: np.ndarray | None, n_seqs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[N] oldest version, newest version, number of distinct versions of each sequence (UNKNOWN, UNKNOWN, 0 where
    unknown). The distinct strings are parsed once: a batch holds few."""
    oldest = np.full(n_seqs, UNKNOWN, np.int64)
    newest = oldest.copy()
    count = np.zeros(n_seqs, np.int64)
    if weight_version is None:
        return oldest, newest, count
    names, inverse = np.unique(np.asarray(weight_version, dtype=str), return_inverse=True)
    parsed = [parse(str(n)) for n in names]
    lo = np.array([min(p) if p else UNKNOWN for p in parsed], np.int64)
    hi = np.array([max(p) if p else UNKNOWN for p in parsed], np.int64)
    k = np.array([len(set(p)) if p else 0 for p in parsed], np.int64)
    return lo[inverse], hi[inverse], k[inverse]


def has_versions(batch: StepBatch) -> bool:
    """Whether the batch names any generation version at all (else no lag is claimed and no split made)."""
    return batch.weight_version is not None or batch.token_version is not None


def token_lags(batch: StepBatch, tok: Tokens, trainer: int | None) -> tuple[np.ndarray | None, np.ndarray]:
    """(per valid token lag, or None when every token of a sequence shares its sequence's lag; [N] per-sequence lag).

    Without per-token versions the lag is a sequence's (its oldest version's); UNKNOWN marks an unknown lag."""
    oldest, _, _ = sequence_versions(batch.weight_version, batch.n_seqs)
    seq_lag = _lag(trainer, oldest)
    if batch.token_version is None:
        return None, seq_lag
    gen = np.asarray(batch.token_version, np.int64)
    gen = gen if tok.valid_index is None else gen[tok.valid_index]
    gen = np.where((gen < 0) | (gen >= LIMIT), oldest[tok.seq], gen)  # UNKNOWN, negative or huge: the sequence's
    return _lag(trainer, gen), seq_lag


def _lag(trainer: int | None, generation: np.ndarray) -> np.ndarray:
    if trainer is None:
        return np.full(generation.shape, UNKNOWN, np.int64)
    return np.where(generation == UNKNOWN, UNKNOWN, trainer - generation)

"""How much a reader may read: derived from `--max-tokens`, checked before anything large is allocated.

A file can declare sizes it does not hold (an `.npy` header, a zip member, a tensor's shape over a tiny
storage): each declared size is checked against these bounds before the data is read, so a 1.6 KB
file cannot make the tool allocate 160 GB. The bounds reach the readers through a context variable
set by `io.load` (`limited`), so every framework reader gets them without a parameter of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from ..catalogue.numbers import fmt
from ..config import MAX_TOKENS


@dataclass(frozen=True)
class Limits:
    max_tokens: int = MAX_TOKENS

    @property
    def max_elements(self) -> int:
        """One array's elements: token-level arrays plus padding and prompts (a padded batch is rarely > 4× its tokens)."""
        return 4 * self.max_tokens

    @property
    def max_bytes(self) -> int:
        """One array's bytes: a float64 for each of its elements, and never less than MIN_ARRAY_BYTES. Counting elements
        alone let a string array of a wide dtype (`<U1000000`: 4 MB an element) take gigabytes in a few elements."""
        return max(8 * self.max_elements, MIN_ARRAY_BYTES)

    @property
    def max_text_bytes(self) -> int:
        """One string array's bytes: 8 for each token position (two UTF-32 characters on average), at least
        MIN_ARRAY_BYTES. numpy pads every string to the widest, so a few wide elements (`<U1000000` × [8, 32]: 1 GB
        declared by a 974 KiB file) would take what a real batch's text never needs, under max_bytes."""
        return max(8 * self.max_tokens, MIN_ARRAY_BYTES)

    @property
    def max_pickle_bytes(self) -> int:
        """A pickle's own records (Python numbers in lists cost ~4× their pickled size in memory)."""
        return 8 * self.max_tokens

    @property
    def max_line_bytes(self) -> int:
        """One JSON line: a sample of the longest context, every per-token field, with room to spare, and never more
        than parses within `max_bytes` (JSON_PARSE_FACTOR: a 1 GiB line of numbers is ~16 GB of Python objects)."""
        return min(64 * self.max_tokens, self.max_bytes // JSON_PARSE_FACTOR)


# The most memory a byte of JSON parses into: `"a",` (4 bytes) becomes a 50-byte str and an 8-byte list slot, `0.5,`
# a 24-byte float and its slot; so a line's parse stays within max_bytes when the line is at most max_bytes / 16.
JSON_PARSE_FACTOR = 16
MIN_ARRAY_BYTES = 1 << 28  # 256 MiB: room for a small run's token and prompt text, whatever --max-tokens says

_CURRENT: contextvars.ContextVar[Limits] = contextvars.ContextVar("tim_report_limits", default=Limits())  # noqa: B039 (frozen)


def current() -> Limits:
    return _CURRENT.get()


@contextlib.contextmanager
def limited(max_tokens: int | None) -> Iterator[Limits]:
    """Readers inside this block use `max_tokens` (None: the default)."""
    token = _CURRENT.set(Limits(max_tokens) if max_tokens else Limits())
    try:
        yield _CURRENT.get()
    finally:
        _CURRENT.reset(token)


def too_large(what: str, count: int, limits: Limits) -> str:
    return (f"{what} declares {fmt(count)} elements, more than this run reads ({fmt(limits.max_elements)}, from --max-tokens "
            f"{fmt(limits.max_tokens)}); raise --max-tokens if the file is real")

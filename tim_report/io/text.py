"""Text helpers for the readers: one-line messages, and strings that can be written as UTF-8.

A token string from a file can hold a lone surrogate (half of a UTF-16 pair: JSON allows "\\ud800",
numpy stores it) or bytes that are not UTF-8; written to a page or JSON it would crash the write (or,
in `check`, pass unnoticed). Every string a batch carries is made valid here, once, after reading,
and the count of repaired strings is said in the report (StepBatch.problems["text_invalid"]).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters): enough to say what broke."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def valid(s: str) -> str:
    """`s` with lone surrogates replaced by U+FFFD (valid strings are returned as they are)."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def decoded(values: np.ndarray) -> np.ndarray:
    """A bytes array (numpy 'S') as text, bytes that are not UTF-8 replaced by U+FFFD."""
    return np.asarray([v.decode("utf-8", "replace") for v in values.ravel()], dtype=str).reshape(values.shape)


def as_text(value: Any) -> Any:
    """Token text as str wherever it is bytes (a list of lists of bytes, a bytes or object array), bytes that are not
    UTF-8 replaced by U+FFFD; anything else as it is."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "S":
            return decoded(value)
        if value.dtype.kind == "O":
            return np.array([as_text(v) for v in value.ravel()], dtype=object).reshape(value.shape)
        return value
    if isinstance(value, (list, tuple)):
        return [as_text(v) for v in value]
    return value


def clean_strings(value: Any) -> tuple[Any, int]:
    """`value` (a str, a numpy str array, a list / dict of them) with every string valid; and how many were not."""
    if isinstance(value, str):
        fixed = valid(value)
        return fixed, int(fixed is not value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "U":
        codes = np.ascontiguousarray(value).view(np.uint32).reshape(value.shape + (-1,)) if value.size else None
        if codes is None or not ((codes >= 0xD800) & (codes <= 0xDFFF)).any():
            return value, 0  # the usual case: one vectorised look, no copy
        out = np.asarray([valid(str(v)) for v in value.ravel()], dtype=str).reshape(value.shape)
        return out, int(np.sum(out != value))
    if isinstance(value, list):
        items = [clean_strings(v) for v in value]
        return [v for v, _ in items], sum(n for _, n in items)
    if isinstance(value, dict):
        entries = {valid(str(k)): clean_strings(v) for k, v in value.items()}
        return {k: v for k, (v, _) in entries.items()}, sum(n for _, n in entries.values())
    return value, 0

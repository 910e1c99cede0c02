"""Small text helpers for the readers' one-line messages."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters): enough to say what broke."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]

"""The one exception type that means "the user's input is wrong" (exit code 2); the checks every reader shares (a
regular file before it is opened, a parser's limits turned into that exception); the warning that a file was unpickled
in full."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class BadInput(Exception):
    """Input the tool cannot use. The message is one line and names the file."""

    exit_code = 2

    def __init__(self, source: object, problem: str):
        self.source = str(source)
        self.problem = problem
        super().__init__(f"{self.source}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        """Picklable, so a BadInput raised in a `--jobs` worker process reaches the parent intact."""
        return (type(self), (self.source, self.problem))


class UnpicklingWarning(UserWarning):
    """A file was unpickled in full because --allow-pickle was given: raised each time one is, so that the
    CLI names every file a command unpickles (once per file), whatever Python's own warning registry holds."""


def regular_file(path: object, what: str = "file") -> None:
    """Refuse anything but a regular file (or a folder, which the caller tells apart) before it is opened, hashed or
    read: a FIFO blocks the reader forever, /dev/zero and /dev/urandom never end, a socket cannot be read. `os.stat`
    follows a symbolic link to its target and never blocks, whatever the path is."""
    import os
    import stat

    try:
        mode = os.stat(str(path)).st_mode
    except OSError:
        return  # missing or unreadable: the caller's own check says so in its words
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise BadInput(path, f"is {kind}, not a regular {what}: tim-report reads only regular files")


_INT_DIGITS = "integer string conversion"  # ValueError of int(str) past sys.get_int_max_str_digits() (4,300 digits)


def parser_limit(source: object, exc: BaseException) -> BadInput | None:
    """The one mapping of a parser's own limits to bad input: nesting past the recursion limit, an integer of more
    digits than Python converts, a number beyond a float's range. None for any other exception."""
    if isinstance(exc, RecursionError):
        return BadInput(source, "nests deeper than the parser allows (more than Python's recursion limit): not a batch")
    if isinstance(exc, ValueError) and _INT_DIGITS in str(exc):
        return BadInput(source, "holds an integer of more than 4,300 digits: not a batch")
    if isinstance(exc, OverflowError):
        return BadInput(source, "holds a number beyond the range of a 64-bit float or integer: not a batch")
    return None


@contextlib.contextmanager
def parser_limits(source: object) -> Iterator[None]:
    """`with parser_limits(path):` turns a parser limit met inside (`parser_limit`) into BadInput naming `path`."""
    try:
        yield
    except BadInput:
        raise
    except (RecursionError, ValueError, OverflowError) as exc:
        bad = parser_limit(source, exc)
        if bad is None:
            raise
        raise bad from None

"""The one exception type that means "the user's input is wrong" (exit code 2), and the warning that a file was
unpickled in full."""

from __future__ import annotations


class BadInput(Exception):
    """Input the tool cannot use. The message is one line and names the file."""

    exit_code = 2

    def __init__(self, source: object, problem: str):
        self.source = str(source)
        self.problem = problem
        super().__init__(f"{self.source}: {problem}")

    def __reduce__(self):
        """Picklable, so a BadInput raised in a `--jobs` worker process reaches the parent intact."""
        return (type(self), (self.source, self.problem))


class UnpicklingWarning(UserWarning):
    """A file was unpickled in full because --allow-pickle was given: raised each time one is, so that the
    CLI names every file a command unpickles (once per file), whatever Python's own warning registry holds."""

"""The command line's own errors (the library's are in :mod:`llamabatch.errors`)."""

from __future__ import annotations

from ..errors import LlamaBatchError


class UsageError(LlamaBatchError, ValueError):
    """Bad command-line usage or bad input (missing file, malformed line): exit status 2."""


class OutputCorrupt(LlamaBatchError, ValueError):
    """A whole line of an existing job output is not a JSON object with an ``"id"``."""


class OutputWriteError(LlamaBatchError, OSError):
    """The job's output could not be written (a full disk, a closed pipe): exit status 1,
    the message naming the output, the cause and how to continue; ``written``: the whole
    lines of the failed write that reached the output."""

    def __init__(self, message: str, written: int = 0) -> None:
        super().__init__(message)
        self.written = written

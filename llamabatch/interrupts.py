"""Ctrl-C during a call into llama.cpp: never lost.

llama.cpp calls back into Python during long calls (llama-cpp-python's log callback
runs for every log line while a model loads or a context is created; the abort
callback polls during compute). Python runs a signal handler in whatever Python code
runs next, so a SIGINT arriving then raises ``KeyboardInterrupt`` *inside the
callback*, and ctypes cannot pass an exception through C: it reports it to
``sys.unraisablehook`` ("Exception ignored on calling ctypes callback function") and
drops it, and the library call goes on as if nothing happened.

:func:`callback_interrupts` catches that report instead and raises
``KeyboardInterrupt`` as soon as the block (the library call) returns. It imports no
library: the engine may use it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()


class CallbackInterrupts:
    """What :func:`callback_interrupts` saw: ``caught`` is True once an interrupt raised
    inside a ctypes callback was dropped by ctypes in its block."""

    def __init__(self) -> None:
        self.caught = False

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if one was caught (and forget it)."""
        if self.caught:
            self.caught = False
            raise KeyboardInterrupt


@contextlib.contextmanager
def callback_interrupts(*, raise_at_end: bool = True) -> Iterator[CallbackInterrupts]:
    """During the block, a ``KeyboardInterrupt`` that ctypes drops in a callback is
    recorded (not printed) and, with ``raise_at_end``, raised when the block ends
    normally (else the caller checks the yielded :class:`CallbackInterrupts`).

    ``sys.unraisablehook`` is replaced for the block (other reports go to the previous
    hook) and put back after it. Blocks may nest; a report goes to the innermost.

    Raises:
        KeyboardInterrupt: at the end of the block, when one was dropped in it.
    """
    seen = CallbackInterrupts()
    with _lock:
        previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        exc_type = getattr(unraisable, "exc_type", None)
        if isinstance(exc_type, type) and issubclass(exc_type, KeyboardInterrupt):
            seen.caught = True
            return
        previous(unraisable)

    with _lock:
        sys.unraisablehook = hook
    try:
        yield seen
    finally:
        with _lock:
            if sys.unraisablehook is hook:
                sys.unraisablehook = previous
    if raise_at_end:
        seen.check()

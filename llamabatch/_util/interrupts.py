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
_blocks = threading.local()  # .stack: the open blocks of this thread, innermost last
_previous: Any = None  # the hook ours delegates to


def _hook(unraisable: Any) -> None:
    """Record a dropped ``KeyboardInterrupt`` in this thread's innermost open block;
    pass everything else (and everything outside a block) to the previous hook."""
    stack = getattr(_blocks, "stack", None)
    exc_type = getattr(unraisable, "exc_type", None)
    if stack and isinstance(exc_type, type) and issubclass(exc_type, KeyboardInterrupt):
        stack[-1].caught = True
        return
    (_previous or sys.__unraisablehook__)(unraisable)


def _install() -> None:
    """Put :func:`_hook` in front of the current ``sys.unraisablehook`` (once; again if
    someone replaced it since). It stays: outside a block it only passes reports on, so
    threads opening and closing blocks in any order never undo each other."""
    global _previous
    with _lock:
        if sys.unraisablehook is not _hook:
            _previous = sys.unraisablehook
            sys.unraisablehook = _hook


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

    A hook in front of ``sys.unraisablehook`` (installed on first use, passing every
    other report on) routes the report to the calling thread's innermost open block;
    ctypes reports in the thread that made the library call. Blocks may nest.

    Raises:
        KeyboardInterrupt: at the end of the block, when one was dropped in it.
    """
    seen = CallbackInterrupts()
    _install()
    stack = getattr(_blocks, "stack", None)
    if stack is None:
        stack = _blocks.stack = []
    stack.append(seen)
    try:
        yield seen
    finally:
        stack.remove(seen)
    if raise_at_end:
        seen.check()

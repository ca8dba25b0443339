"""Ctrl-C during a call into llama.cpp: never lost. ctypes drops a ``KeyboardInterrupt``
raised in a callback (llama.cpp's log or abort callback), reporting it to
``sys.unraisablehook``; :func:`callback_interrupts` catches that report and raises the
interrupt once the library call returns. Imports no library: the engine may use it."""

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
    """Record a dropped ``KeyboardInterrupt`` in this thread's innermost open block; pass every
    other report on to the previous hook."""
    stack = getattr(_blocks, "stack", None)
    exc_type = getattr(unraisable, "exc_type", None)
    if stack and isinstance(exc_type, type) and issubclass(exc_type, KeyboardInterrupt):
        stack[-1].caught = True
        return
    (_previous or sys.__unraisablehook__)(unraisable)


def _install() -> None:
    """Put :func:`_hook` in front of ``sys.unraisablehook`` (again if someone replaced it). It
    stays: outside a block it only passes reports on, so threads never undo each other."""
    global _previous
    with _lock:
        if sys.unraisablehook is not _hook:
            _previous = sys.unraisablehook
            sys.unraisablehook = _hook


class CallbackInterrupts:
    """What :func:`callback_interrupts` saw: ``caught`` is True once ctypes dropped an interrupt
    in its block."""

    def __init__(self) -> None:
        self.caught = False

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if one was caught (and forget it)."""
        if self.caught:
            self.caught = False
            raise KeyboardInterrupt


@contextlib.contextmanager
def callback_interrupts(*, raise_at_end: bool = True) -> Iterator[CallbackInterrupts]:
    """During the block, a ``KeyboardInterrupt`` ctypes drops in a callback of this thread is
    recorded (not printed) and, with ``raise_at_end``, raised when the block ends normally
    (else the caller checks the yielded :class:`CallbackInterrupts`). Blocks may nest."""
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

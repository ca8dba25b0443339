"""Ctrl-C during a call into llama.cpp: never lost. ctypes drops a ``KeyboardInterrupt``
raised in a callback (llama.cpp's log or abort callback), reporting it to
``sys.unraisablehook``; :func:`callback_interrupts` catches that report and raises the
interrupt once the library call returns. Imports no library: the engine may use it."""

from __future__ import annotations

import sys
import threading
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
    if sys.unraisablehook is _hook:  # the common case, without the lock
        return
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


def callback_interrupts(*, raise_at_end: bool = True) -> InterruptBlock:
    """During the block, a ``KeyboardInterrupt`` ctypes drops in a callback of this thread is
    recorded (not printed) and, with ``raise_at_end``, raised when the block ends normally
    (else the caller checks the yielded :class:`CallbackInterrupts`). Blocks may nest."""
    return InterruptBlock(raise_at_end)


class InterruptBlock:
    """The context manager of :func:`callback_interrupts` (a class, not a generator: it is
    entered around every decode step)."""

    __slots__ = ("_raise_at_end", "_seen", "_stack")

    def __init__(self, raise_at_end: bool) -> None:
        self._raise_at_end = raise_at_end

    def __enter__(self) -> CallbackInterrupts:
        self._seen = seen = CallbackInterrupts()
        _install()
        stack = getattr(_blocks, "stack", None)
        if stack is None:
            stack = _blocks.stack = []
        stack.append(seen)
        self._stack = stack
        return seen

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._stack.remove(self._seen)
        if exc_type is None and self._raise_at_end:
            self._seen.check()

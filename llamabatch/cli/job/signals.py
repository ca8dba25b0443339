"""SIGINT and SIGTERM in ``llamabatch complete``: stop between groups, never mid-write,
and never lost, even when they arrive while llama.cpp is calling back into Python."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from ..._util.interrupts import callback_interrupts


class Interrupts:
    """SIGINT and SIGTERM raise KeyboardInterrupt, except while a group is being written.

    A signal that arrives while :meth:`held` is active is kept and raised when it ends,
    so the output never holds part of a group and the count of items written is exact.
    Every signal is also remembered (:attr:`pending`): when its ``KeyboardInterrupt`` is
    raised inside a ctypes callback (llama-cpp-python's log callback while the model
    loads, the abort callback during a decode) ctypes drops it, and :meth:`check` or
    the end of :meth:`held` raises it again after the library call. While installed,
    such drops are not printed ("Exception ignored on calling ctypes callback").
    Handlers are installed only in the main thread (elsewhere :meth:`installed` does
    nothing and the signals keep their handlers).
    """

    def __init__(self) -> None:
        self.holding = False
        self.pending = False

    def _handler(self, signum: int, frame: object) -> None:
        self.pending = True
        if not self.holding:
            raise KeyboardInterrupt

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if a signal came (call after each library call)."""
        if self.pending:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Install the handlers for the duration of the block, then restore the old ones."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {
            sig: signal.signal(sig, self._handler) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            with callback_interrupts(raise_at_end=False):  # the handler set pending already
                yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold signals during the block; raise KeyboardInterrupt after it if one came."""
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.pending:
            raise KeyboardInterrupt

"""Online use: :class:`SubmitQueue`, the thread-safe queue of submitted requests and
their futures, and the source of the engine thread that owns the slots (``None`` while
nothing waits: the generator's run loop waits outside its lock). Futures follow
``concurrent.futures``: cancellable while waiting, running once the engine took them."""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from .completion import Completion
from .engine.request import Request
from .errors import GeneratorBusy, GeneratorClosed
from .locks import held_here

log = logging.getLogger("llamabatch")


def check_process(pid: int) -> None:
    """Raise GeneratorClosed when this is not process ``pid`` (the one that made the
    generator) but a child ``os.fork()`` made of it: the child has a copy of the generator
    without its engine thread, or any thread that held its locks at the fork, and llama.cpp's
    contexts (GPU ones above all) do not survive a fork. Read before any lock is taken."""
    here = os.getpid()
    if here != pid:
        raise GeneratorClosed(
            f"this BatchGenerator was made in process {pid}; this is process {here}, a child "
            "of it made by os.fork(), which has no engine thread and no llama.cpp context of "
            "its own: load the Llama and make the BatchGenerator in the child (or start "
            "children with multiprocessing's 'spawn' or 'forkserver' method)"
        )


class Submitted(Future[Completion]):
    """The future of one submitted item: a ``concurrent.futures.Future`` whose done-callbacks
    cannot reach the engine thread or another future. ``concurrent.futures`` logs an
    ``Exception`` a callback raises and lets any other ``BaseException`` (``SystemExit``,
    ``KeyboardInterrupt``) out of ``set_result``; here that one is logged too.
    :meth:`result` and :meth:`exception` raise GeneratorBusy, instead of waiting forever,
    where only the waiting thread could complete the item (:meth:`SubmitQueue.check_wait`)."""

    def __init__(self, queue: SubmitQueue) -> None:
        super().__init__()
        self._queue = queue

    def result(self, timeout: float | None = None) -> Completion:
        if not self.done():
            self._queue.check_wait("Future.result()")
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self.done():
            self._queue.check_wait("Future.exception()")
        return super().exception(timeout)

    def add_done_callback(self, fn: Callable[[Future[Completion]], object]) -> None:
        def guarded(future: Future[Completion]) -> None:
            try:
                fn(future)
            except Exception:
                raise  # logged by concurrent.futures
            except BaseException:  # noqa: BLE001 - it must not end the engine thread
                log.exception("llamabatch: a done-callback of %r raised", future)

        super().add_done_callback(guarded)


class SubmitQueue:
    """Submitted requests waiting for the engine, and the futures of all not yet done;
    ``run(queue)`` is the engine thread's body, started by :meth:`put` when none runs."""

    def __init__(self, run: Callable[[SubmitQueue], None], lock: object) -> None:
        self._run = run
        self._lock = lock  # the generator's: the engine thread takes it for every step
        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._futures: dict[int, Submitted] = {}
        self._taken = 0  # requests the engine took and has not completed yet
        self._next = 0
        self._accepting = True
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def number(self) -> int:
        """The next submission number (``Completion.index``); GeneratorClosed once closed."""
        with self._cond:
            self._check_accepting()
            n, self._next = self._next, self._next + 1
            return n

    def _check_accepting(self) -> None:
        if not self._accepting:
            raise GeneratorClosed("this BatchGenerator is closed; create a new one")

    def put(self, req: Request) -> Submitted:
        """Queue ``req`` (its ``index`` a :meth:`number`) and wake the engine thread,
        starting one when none runs. Raises GeneratorClosed once closed, and in a child of
        ``os.fork()`` (:func:`check_process`)."""
        check_process(self._pid)
        future = Submitted(self)
        with self._cond:
            self._check_accepting()
            self._futures[req.index] = future
            self._waiting.append(req)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, args=(self,), name="llamabatch-engine", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        return future

    def check_wait(self, what: str) -> None:
        """Raise GeneratorBusy when ``what`` (a wait for a submitted item) would never end:
        this thread holds the generator's lock, which the engine thread needs for every
        step, or is the engine thread (in a done-callback, which runs there), which alone
        completes the items; GeneratorClosed in a child of ``os.fork()``
        (:func:`check_process`), which has no engine thread."""
        check_process(self._pid)
        if held_here(self._lock):
            raise GeneratorBusy(
                f"{what} was called while this thread holds the generator's lock "
                "(llamabatch.llm_lock(llm) for a Llama): the engine thread needs it for every "
                "step, so the wait would never end. Wait outside the `with llm_lock(llm):` "
                "block (submit() inside it is fine)"
            )
        if threading.current_thread() is self._thread:
            raise GeneratorBusy(
                f"{what} was called on the generator's engine thread (in a done-callback "
                "of a submitted item, which runs there): it would wait for items only "
                "that thread completes. Hand the work to another thread (e.g. a "
                "concurrent.futures.ThreadPoolExecutor) or chain it with add_done_callback"
            )

    def source(self) -> Iterator[Request | None]:
        """The engine's requests: the next live one (a cancelled one is skipped), ``None``
        while none waits; ends once closed and empty."""
        while True:
            with self._cond:
                req = self._take()
                if req is None and not self._accepting:
                    return
            yield req

    def _take(self) -> Request | None:
        while self._waiting:
            req = self._waiting.popleft()
            if self._futures[req.index].set_running_or_notify_cancel():
                self._taken += 1
                return req
            del self._futures[req.index]  # cancelled while it waited: never runs
        return None

    @property
    def idle(self) -> bool:
        """True when nothing waits and the engine holds nothing."""
        with self._cond:
            return not self._waiting and self._taken == 0

    def wait(self) -> None:
        """Block until a request is submitted or the queue is closed (no lock held)."""
        with self._cond:
            while not self._waiting and self._accepting:
                self._cond.wait()

    def resolve(self, completion: Completion) -> None:
        """Give ``completion`` to its future."""
        with self._cond:
            future = self._futures.pop(completion.index)
            self._taken -= 1
        future.set_result(completion)  # callbacks run here, outside the queue's lock

    def fail(self, exc: BaseException) -> None:
        """The engine thread ended with ``exc``: set it on every future not yet done; a
        later :meth:`put` starts a new engine thread."""
        with self._cond:
            futures = list(self._futures.values())
            self._futures.clear()
            self._waiting.clear()
            self._taken = 0
            self._thread = None
        for future in futures:
            if future.running() or future.set_running_or_notify_cancel():
                future.set_exception(exc)

    def ended(self) -> None:
        """The engine thread ended normally (the queue is closed)."""
        with self._cond:
            self._thread = None

    def close(self) -> None:
        """Stop accepting, cancel the waiting futures, wake the engine thread and wait
        for it to finish the requests it took (unless called from it).

        Raises:
            GeneratorBusy: an engine thread runs and this thread holds the generator's lock,
                which it needs to end (nothing is changed: close again outside the lock).
        """
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            self.check_wait("close()")
        with self._cond:
            self._accepting = False
            waiting = [self._futures.pop(r.index) for r in self._waiting]
            self._waiting.clear()
            thread = self._thread
            self._cond.notify_all()
        for future in waiting:
            future.cancel()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

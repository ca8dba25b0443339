"""The ordered pager: items started ahead, finished in any order, given back in input order
a page at a time (the local engine beside submitted items, the pool of servers)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TypeVar

_R = TypeVar("_R")


def ordered_pages(
    started: Iterator[Future[_R]],
    window: int | Callable[[], int],
    page_size: int,
    *,
    whole: bool,
    result: Callable[[Future[_R]], _R] = Future.result,
) -> Iterator[list[_R]]:
    """The results of ``started``'s futures, in its order, a page at a time.

    ``started`` starts one item per ``next()`` and gives its future; it is read while fewer
    than ``window`` (>= 1; a callable is read before each refill) are not given back.
    ``whole``: pages of ``page_size`` results (the last one maybe shorter), each yielded
    once all of it is done; else a page is the oldest result and those done right after it
    (at most ``page_size``), yielded as soon as the oldest is done. ``result`` waits for
    one future and gives its result, or raises its exception (after the pages before it).
    Futures not given back when the iterator ends are cancelled: a waiting one never runs.
    """
    pending: deque[Future[_R]] = deque()
    page: list[_R] = []
    try:
        while True:
            limit = window() if callable(window) else window
            while len(pending) < limit and (future := next(started, None)) is not None:
                pending.append(future)
            if not pending:
                break
            page.append(result(pending.popleft()))
            while not whole and pending and len(page) < page_size and _succeeded(pending[0]):
                page.append(result(pending.popleft()))
            if not whole or len(page) == page_size:
                yield page
                page = []
        if page:
            yield page
    finally:
        for future in pending:
            future.cancel()


def _succeeded(future: Future) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None

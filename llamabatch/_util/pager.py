"""The ordered pager: results of items started ahead and finished in any order, given back
in input order a page at a time, with a bounded window of items in flight. The local
engine's runs beside submitted items and the pool of servers page this way."""

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

    Args:
        started: starts one item per ``next()`` and gives its future; read only while
            fewer than ``window`` futures wait to be given back.
        window: most futures started and not given back yet, >= 1; a callable is called
            before each refill (a window that grows as servers come up).
        page_size: most results per page, >= 1.
        whole: ``True``: pages of ``page_size`` results (the last one maybe shorter), each
            yielded once all of it is done. ``False``: a page is the oldest result and
            those done right after it, yielded as soon as the oldest is done.
        result: waits for one future and gives its result (default ``Future.result``).

    Yields:
        lists of results; together every future's result once, in ``started``'s order.

    Raises:
        what ``result`` raises for the oldest future (its exception), after the pages
        before it. The futures not given back when the iterator ends (closed early or
        raising) are cancelled: one still waiting never runs.
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

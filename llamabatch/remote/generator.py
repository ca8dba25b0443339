"""RemoteGenerator: the BatchGenerator surface over a pool of OpenAI-compatible servers.

Worker threads (daemons, one per slot of the pool) send blocking requests through one
shared ``httpx.Client``; the caller's thread only queues items and waits on a condition,
so a signal reaches it at once and no event loop is needed.
"""

from __future__ import annotations

import dataclasses
import queue
import random
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, wait

import httpx

from .._util.closing import Closing
from .._util.pager import ordered_pages
from ..completion import cut_off_choice
from ..errors import BadItem, GeneratorClosed, ParameterError
from ..items import per_item_sampling
from ..params import BatchConfig, SamplingParams
from ..shapes.requests import ServerRequest, build_request
from .client import ItemRejected, ServerFault, ServerReply, probe, send
from .completion import RemoteCompletion, RemoteStats, error_completion
from .pool import Server, ServerPool

#: Completions per page by default (``page_size=None``).
DEFAULT_PAGE_SIZE = 16


class RemoteGenerator(Closing):
    """Complete many prompts on a pool of OpenAI-compatible servers, in input order.

    Each item goes to one server (``/v1/completions`` for a prompt, ``/v1/chat/completions``
    for a list of messages; see :mod:`llamabatch.shapes.requests` for items with their own
    fields); each server has as many requests in flight as it has slots (llama-server's
    ``/props`` ``total_slots``, else ``concurrency``). A server that refuses, times out,
    answers 408/429/5xx or breaks off is put in a cool-down and the item is sent to another
    server after a backoff; a server whose cool-down ended is probed and used again. An
    item gets its error in place after ``max_attempts`` failed requests, or at once for
    any other 4xx (the request itself is bad).

    Args:
        servers: base URLs (``http://host:port``, ``/v1`` optional).
        concurrency: slots of a server without ``/props``, >= 1.
        max_tokens: most generated tokens per item (an item's own ``max_tokens`` wins).
        sampling: sampling fields sent with every item (default: llama-cpp-python's).
        page_size: most items yielded in one group (default 16).
        max_attempts: requests per item at most, >= 1.
        timeout_s: seconds a request may take before it counts as a fault.
        backoff_s: first wait before a retry; doubled per retry up to ``max_backoff_s``,
            times a random factor in [0.5, 1] ("equal jitter", M. Brooker, *Exponential
            Backoff And Jitter*, AWS Architecture Blog, 2015).
        cooldown_s, max_cooldown_s, give_up_s, connect_give_up_s: see
            :class:`~llamabatch.remote.pool.ServerPool` (the last: how soon a pool of which
            no server can be connected to at all gives up, 10 s).
        api_key: sent as ``Authorization: Bearer`` (vLLM ``--api-key``), or ``None``.
        client: an ``httpx.Client`` of yours (proxies, TLS, headers, a mock transport);
            it is not closed by :meth:`close`. Default: one owned by the generator.

    Raises:
        ValueError: a bad URL, a value out of range (named), or both ``api_key`` and
            ``client`` (set the header on your client).

    Thread safety: one :meth:`iter_groups` at a time (a second one raises RuntimeError).
    """

    def __init__(
        self,
        servers: Sequence[str],
        *,
        concurrency: int = 1,
        max_tokens: int = 200,
        sampling: SamplingParams | None = None,
        page_size: int | None = None,
        max_attempts: int = 3,
        timeout_s: float = 600.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        cooldown_s: float = 2.0,
        max_cooldown_s: float = 30.0,
        give_up_s: float = 120.0,
        connect_give_up_s: float = 10.0,
        api_key: str | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        if isinstance(servers, str):
            raise ValueError("servers is one string; give a list of URLs")
        # max_tokens and sampling: checked as for BatchGenerator
        given = SamplingParams() if sampling is None else sampling
        config = BatchConfig(max_tokens=max_tokens, sampling=given)
        for name, value, low in (
            ("max_attempts", max_attempts, 1),
            ("page_size", page_size or DEFAULT_PAGE_SIZE, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ParameterError(name, value, f"an integer >= {low}")
        for name, value in (
            ("timeout_s", timeout_s),
            ("backoff_s", backoff_s),
            ("max_backoff_s", max_backoff_s),
        ):
            if not isinstance(value, (int, float)) or not value >= 0:
                raise ParameterError(name, value, "seconds >= 0")
        self.sampling, self.max_tokens = config.sampling, config.max_tokens
        self.page_size = page_size or DEFAULT_PAGE_SIZE
        self._attempts, self._timeout = max_attempts, float(timeout_s)
        self._backoff, self._max_backoff = backoff_s, max_backoff_s
        if api_key is not None and client is not None:
            raise ValueError(
                "give api_key or client, not both: set the Authorization header on your client"
            )
        self._owns_client = client is None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._client = client or httpx.Client(headers=headers)
        probe_s = min(self._timeout, 10.0)
        try:
            self.pool = ServerPool(
                servers,
                lambda url: probe(self._client, url, probe_s),
                concurrency=concurrency,
                cooldown_s=cooldown_s,
                max_cooldown_s=max_cooldown_s,
                give_up_s=give_up_s,
                connect_give_up_s=connect_give_up_s,
            )
        except BaseException:  # a bad URL or option: no generator, so no client either
            if self._owns_client:
                self._client.close()
            raise
        self._stats = RemoteStats(
            servers={s.url: {"requests": 0, "faults": 0} for s in self.pool.servers}
        )
        self._lock = threading.Lock()
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._stop = threading.Event()
        self._probed = False
        self._running = False

    # -- lifetime -------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._stop.is_set()

    def close(self) -> None:
        """Stop the workers (requests in flight are abandoned) and close the owned client.
        Callable many times."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.pool.close()
        for _ in self._workers:
            self._todo.put(None)
        if self._owns_client:
            self._client.close()

    @property
    def stats(self) -> RemoteStats:
        """Counters so far (a snapshot)."""
        with self._lock:
            servers = {url: dict(counts) for url, counts in self._stats.servers.items()}
            return dataclasses.replace(self._stats, servers=servers)

    @property
    def servers(self) -> list[Server]:
        """The pool's servers (their slots, health and counters); each is probed at the
        first :meth:`iter_groups` (until then ``is_up`` is False and ``slots`` is
        ``concurrency``)."""
        return list(self.pool.servers)

    # -- one item (worker threads) ---------------------------------------------------------
    def _backoff_s(self, retry: int) -> float:
        return min(self._max_backoff, self._backoff * 2 ** (retry - 1)) * random.uniform(0.5, 1)

    def _complete(self, index: int, item: object, sampling: SamplingParams) -> RemoteCompletion:
        try:
            request = build_request(item, sampling, self.max_tokens)
        except BadItem as exc:
            return error_completion(index, str(exc), "", 0)
        tried: list[str] = []
        faults: list[str] = []
        for attempt in range(1, self._attempts + 1):
            if attempt > 1 and self._stop.wait(self._backoff_s(attempt - 1)):
                break
            server = self.pool.acquire(avoid=tried)
            if server is None:
                break
            self._count(server.url, "requests", retry=attempt > 1)
            try:
                reply = send(self._client, server.url, request, server.model, self._timeout)
            except ServerFault as exc:
                self.pool.release(server, fault=str(exc))
                self._count(server.url, "faults")
                tried.append(server.url)
                faults.append(f"{server.url}: {exc}")
                continue
            except ItemRejected as exc:
                self.pool.release(server)
                return error_completion(
                    index, f"{server.url} refused the request: {exc}", server.url, attempt
                )
            except BaseException:
                self.pool.release(server)
                raise
            self.pool.release(server)
            return self._completion(index, request, reply, server.url, attempt)
        return error_completion(
            index,
            f"failed {len(faults)} time(s): " + "; ".join(faults),
            tried[-1] if tried else "",
            len(faults),
        )

    @staticmethod
    def _completion(
        index: int, request: ServerRequest, reply: ServerReply, url: str, attempts: int
    ) -> RemoteCompletion:
        n_tokens = len(reply.token_ids) or reply.n_completion_tokens
        if reply.finish_reason == "length":
            cut = cut_off_choice(request.sampling.choices, reply.text, n_tokens)
            if cut is not None:  # as locally: the item's error
                return RemoteCompletion(
                    index,
                    "",
                    (),
                    "error",
                    cut,
                    reply.n_prompt_tokens,
                    "remote",
                    server=url,
                    attempts=attempts,
                )
        return RemoteCompletion(
            index,
            reply.text,
            reply.token_ids,
            reply.finish_reason,
            None,
            reply.n_prompt_tokens,
            "remote",
            server=url,
            attempts=attempts,
            n_completion_tokens=reply.n_completion_tokens,
        )

    def _count(self, url: str, key: str, retry: bool = False) -> None:
        with self._lock:
            self._stats.servers[url][key] += 1
            self._stats.requests += key == "requests"
            self._stats.retries += retry

    def _work(self) -> None:
        while True:
            job = self._todo.get()
            if job is None or self._stop.is_set():
                return
            future, index, item, sampling = job
            if not future.set_running_or_notify_cancel():
                continue  # an abandoned iteration's item
            try:
                done = self._complete(index, item, sampling)
            except BaseException as exc:  # PoolUnavailable, or a bug: raised in the caller
                future.set_exception(exc)
            else:
                future.set_result(done)

    def _start_workers(self) -> None:
        if not self._probed:
            self.pool.probe_all()
            self._probed = True
        while len(self._workers) < self.pool.capacity:
            worker = threading.Thread(
                target=self._work, daemon=True, name=f"llamabatch-remote-{len(self._workers)}"
            )
            worker.start()
            self._workers.append(worker)

    # -- work -----------------------------------------------------------------------------
    def _window(self) -> int:
        """Items in flight at most: the pool's slots plus a page (its workers started)."""
        self._start_workers()
        return self.pool.capacity + self.page_size

    def _result(self, future: Future[RemoteCompletion]) -> RemoteCompletion:
        """Wait for one item's completion (GeneratorClosed once closed) and count it."""
        while not future.done():
            if self._stop.is_set():
                raise GeneratorClosed("this RemoteGenerator was closed")
            wait((future,), timeout=1.0)
        result = future.result()
        self._tally(result)
        return result

    def iter_groups(
        self,
        prompts: Iterable[object],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> Iterator[list[RemoteCompletion]]:
        """Complete ``prompts``, yielding groups of consecutive completions in input order.

        Args:
            prompts: any iterable of prompts, message lists or item mappings; read ahead
                by at most the pool's slots plus ``page_size`` items.
            sampling: one :class:`SamplingParams` for every item, or a sequence of them,
                one per prompt (default: the generator's ``sampling``), as for
                :meth:`llamabatch.BatchGenerator.iter_groups`; an item mapping's own
                fields go on top (:func:`llamabatch.items.resolve_item`).

        Yields:
            lists of at most ``page_size`` completions, ``index`` counting from 0: each
            group is the run of finished items that follows the last one yielded.

        Raises:
            ValueError: ``sampling`` is not a SamplingParams or its count differs from
                the prompts' (checked up front for a sized ``prompts``).
            GeneratorClosed: the generator was closed.
            PoolUnavailable: no server answered for ``give_up_s`` seconds, or none
                could be connected to in ``connect_give_up_s`` from the start (every
                item yielded before is complete; the rest were not sent or are dropped).
        """
        if self.closed:
            raise GeneratorClosed("this RemoteGenerator is closed; create a new one")
        pairs = per_item_sampling(prompts, self.sampling if sampling is None else sampling)
        return self._iter_groups(pairs)

    def _iter_groups(
        self, pairs: Iterator[tuple[object, SamplingParams]]
    ) -> Iterator[list[RemoteCompletion]]:
        with self._lock:
            if self._running:
                raise RuntimeError(
                    "this RemoteGenerator is already iterating; one iter_groups at a time"
                )
            self._running = True
        try:
            yield from ordered_pages(
                self._send(pairs), self._window, self.page_size, whole=False, result=self._result
            )
        finally:  # an abandoned run's items still queued are cancelled: skipped
            with self._lock:
                self._running = False

    def _send(
        self, pairs: Iterator[tuple[object, SamplingParams]]
    ) -> Iterator[Future[RemoteCompletion]]:
        """Queue each item for the workers; its future holds its completion."""
        for index, (item, sampling) in enumerate(pairs):
            future: Future[RemoteCompletion] = Future()
            self._todo.put((future, index, item, sampling))
            yield future

    def _tally(self, done: RemoteCompletion) -> None:
        with self._lock:
            self._stats.items += 1
            self._stats.items_failed += not done.ok
            self._stats.prompt_tokens += done.n_prompt_tokens
            self._stats.generated_tokens += done.n_tokens

    def complete_many(
        self,
        prompts: Iterable[object],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RemoteCompletion]:
        """Complete every prompt; ``result[i]`` belongs to ``prompts[i]``.

        Raises:
            ValueError, GeneratorClosed, PoolUnavailable: see :meth:`iter_groups`.
        """
        return [c for group in self.iter_groups(prompts, sampling) for c in group]

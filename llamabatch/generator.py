"""BatchGenerator, the public entry point: items read lazily, resolved
(:mod:`llamabatch.items`), run by the :class:`~llamabatch.engine.scheduler.Scheduler` and
given back in input order, a page of ``slots`` items at a time; and
:func:`create_completions` / :func:`create_chat_completions`, llama-cpp-python's calls
(:mod:`llamabatch.shapes.requests`) on a generator opened for one call."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, cast

from ._util import busy
from ._util.closing import Closing
from ._util.interrupts import callback_interrupts
from ._util.pager import ordered_pages
from .completion import Completion
from .engine.auto_slots import SlotsChoice, choose_slots
from .engine.backend import Backend, BatchLimits
from .engine.request import Request, prepare
from .engine.scheduler import Scheduler
from .errors import GeneratorBusy, GeneratorClosed, LlamaBatchError, ParameterError
from .items import per_item_sampling, resolve_item
from .kv_estimate import KvEstimate
from .online import SubmitQueue, check_process
from .params import (
    AUTO_SLOTS,
    DEFAULT_N_CTX_SEQ,
    MAX_BATCH_FAILURES,
    BatchConfig,
    SamplingParams,
)
from .shapes.requests import chat_call, completion_call
from .stats import Stats

if TYPE_CHECKING:
    from .chat import ChatTemplate

log = logging.getLogger("llamabatch")
#: The busy-CPU warning's logger (a child of ``llamabatch``, to filter it by name); the
#: command line says it in its own terms instead (:func:`._util.busy.told_by_caller`).
busy_log = logging.getLogger("llamabatch.busy")

_END: Any = object()  # the end of a stream of requests


def _check_llm(llm: object) -> None:
    """Raise ``TypeError`` unless ``llm`` looks like a loaded ``llama_cpp.Llama`` (a model
    path is the common mistake: say how to load it)."""
    if isinstance(llm, (str, bytes, os.PathLike)):
        path = os.fsdecode(llm)
        raise TypeError(
            f"llm is a path ({path!r}), not a loaded model: give a llama_cpp.Llama, e.g. "
            f"BatchGenerator(llama_cpp.Llama(model_path={path!r}, n_ctx=4096))"
        )
    if not all(callable(getattr(llm, name, None)) for name in ("n_vocab", "n_ctx", "tokenize")):
        raise TypeError(
            f"llm is {type(llm).__name__}, not a loaded model: give a llama_cpp.Llama "
            "(or backend=... for another backend)"
        )


def _check_many(items: object) -> None:
    if isinstance(items, (str, bytes, bytearray, Mapping)):
        raise TypeError(
            f"items is one {type(items).__name__}; give a list of items (e.g. [item]), "
            "not a single item"
        )


class BatchGenerator(Closing):
    """Complete many prompts on one loaded model, several sequences at a time.

    Args:
        llm: a loaded ``llama_cpp.Llama``; its model is shared (no second copy of the
            weights) by a second llama.cpp context with ``slots`` sequences.
        backend: a :class:`~llamabatch.engine.backend.Backend` instead of ``llm`` (e.g.
            :class:`llamabatch.testing.FakeBackend`). Exactly one of the two is given.
        slots: sequences decoded together (``n_seq_max``), 1 to
            ``llama_max_parallel_sequences()``; 1 completes every item alone. ``"auto"``:
            the most (up to 8) whose KV cache of ``n_ctx_seq`` tokens takes at most half
            the free memory of the device, or of the host on a CPU build
            (:func:`~llamabatch.engine.auto_slots.choose_slots`; :attr:`slots_choice`
            says what was chosen and why, and it is logged).
        n_ctx_seq: KV cache tokens per sequence (prompt + reply; llama.cpp pads it to a
            multiple of 256); an item with ``n_prompt + max_tokens > n_ctx_seq`` is
            completed alone. ``None``: ``min(4096, n_ctx)`` of the ``Llama`` (no item
            needs more); :meth:`estimate_memory` tells its bytes.
        n_batch: most tokens per ``llama_decode`` (also ``n_ubatch``); for llama.cpp at
            least ``slots`` (each decode step has one output row per sequence).
        max_tokens: most generated tokens per item (``SamplingParams.max_tokens``
            overrides it per item).
        sampling: the default sampler chain of every item (default: llama-cpp-python's
            defaults); ``complete_many`` / ``iter_groups`` may give one per item.
        lookahead: how far ahead of the oldest unfinished item the engine may start
            items (so at most that many wait to be given back in order), a multiple of
            ``slots``; default :func:`~llamabatch.params.default_lookahead`.
        min_copy_tokens: copy another slot's cache to share a prompt prefix only when
            that saves at least this many prompt tokens (docs/engine.md).
        cache_ram_mib: MiB of host memory for the states of slots about to be mostly
            overwritten, loaded back for a later prompt sharing their prefix (as
            llama-server's ``--cache-ram``); 0 turns it off.
        max_batch_failures: failures of the batch path in a row (decode, cache copy,
            state save/load) after which batching is off for good, >= 1; before that
            each failure costs the items in flight one retry alone
            (docs/reliability-rules.md).
        backend_sampling: with ``llm``, sample plain chains (no grammar, active penalties,
            logprobs or label scores) on the model's device, llama.cpp's backend sampling:
            the same chain and seed (``Stats.backend_sampled_rows`` counts its rows).
            True: on, where the device check runs (on a GPU) only once it showed that greedy
            tokens sampled there equal the host chain's and a seeded sample repeats, with the
            generator's slots (else off); ``None`` / False: never (a chain changed after a
            decode corrupted the heap on a Vulkan device, and a batch changes chains).
            ``Stats.backend_sampling`` says which and why (docs/performance.md).
        check_device: before the first batch, run the shapes of known multi-sequence GPU
            defects (a prompt beside other sequences' reply steps, a refill into a slot
            just freed, a prompt longer than ``n_ubatch``; with 2, 4 and ``slots``
            sequences) and compare their logits with the same tokens one sequence at a
            time (:mod:`~llamabatch.engine.device_check`); if they disagree, batching is
            off and every item is completed alone, with a warning naming the step that
            failed (``Stats.batch_disabled_reason``, ``Stats.device_check``).
            ``None``: where the logits come from a GPU (``BackendInfo.device``); True /
            False: always / never.

    The keywords are one :class:`~llamabatch.BatchConfig`, checked before any library
    work; :meth:`from_config` takes a ready one.

    Raises:
        ValueError: a parameter out of range (named), a combination llama.cpp would
            abort on (``slots > n_batch``, docs/asserts.md), neither/both of llm and
            backend.
        TypeError: ``llm`` is not a loaded ``llama_cpp.Llama`` (e.g. a model path).
        llamabatch.errors.LibraryError: llama-cpp-python lacks an essential symbol.

    Attributes:
        lock: held around every use of llama.cpp: for a ``Llama``,
            :func:`llamabatch.llm_lock` ``(llm)``, shared with every generator on it.
        config: the :class:`~llamabatch.BatchConfig` in use (``slots`` and ``n_ctx_seq``
            resolved to numbers).
        slots_choice: with ``slots="auto"``, the
            :class:`~llamabatch.engine.auto_slots.SlotsChoice` (count and reason); else
            ``None``.

    Thread safety: one run (``iter_groups`` / ``complete_many``) at a time uses the slots;
    another thread's waits. Between decodes other threads may use the ``Llama``; wrap your
    own calls of it in ``with llamabatch.llm_lock(llm):`` (docs/reliability.md).
    """

    def __init__(
        self,
        llm: object = None,
        *,
        backend: Backend | None = None,
        slots: int | Literal["auto"] = 4,
        n_ctx_seq: int | None = None,
        n_batch: int = 512,
        max_tokens: int = 200,
        sampling: SamplingParams | None = None,
        lookahead: int | None = None,
        min_copy_tokens: int = 32,
        cache_ram_mib: int = 1024,
        max_batch_failures: int = MAX_BATCH_FAILURES,
        backend_sampling: bool | None = None,
        check_device: bool | None = None,
    ) -> None:
        config = BatchConfig(  # every plain parameter is checked before any library work
            slots=slots,
            n_ctx_seq=n_ctx_seq,
            n_batch=n_batch,
            max_tokens=max_tokens,
            sampling=SamplingParams() if sampling is None else sampling,
            lookahead=lookahead,
            min_copy_tokens=min_copy_tokens,
            cache_ram_mib=cache_ram_mib,
            max_batch_failures=max_batch_failures,
            backend_sampling=backend_sampling,
            check_device=check_device,
        )
        self._open(llm, backend, config)

    @classmethod
    def from_config(
        cls, config: BatchConfig, llm: object = None, *, backend: Backend | None = None
    ) -> BatchGenerator:
        """A generator of a ready :class:`~llamabatch.BatchConfig` (what the command line,
        Ray and ``tune`` pass): ``BatchGenerator(llm, **fields)`` without checking again.

        Raises:
            TypeError: ``config`` is not a BatchConfig, or as the constructor.
            ValueError: as the constructor.
        """
        gen = cls.__new__(cls)
        if not isinstance(config, BatchConfig):
            raise TypeError(f"config is {type(config).__name__}; give a llamabatch.BatchConfig")
        gen._open(llm, backend, config)
        return gen

    def _open(self, llm: object, backend: Backend | None, config: BatchConfig) -> None:
        if (llm is None) == (backend is None):
            raise ValueError("give exactly one of llm (a llama_cpp.Llama) or backend")
        if backend is not None and config.backend_sampling is not None:
            raise ValueError(
                "backend_sampling applies to an llm (a llama_cpp.Llama); a backend decides "
                "its own sampling (e.g. LlamaBackend(llm, backend_sampling=...))"
            )
        if backend is None:
            _check_llm(llm)
            from .llamacpp.backend import LlamaBackend  # loads llama.cpp only when asked

            backend = LlamaBackend(llm, backend_sampling=config.backend_sampling)
        caps = backend.info
        if config.n_ctx_seq is None:
            config = dataclasses.replace(config, n_ctx_seq=min(DEFAULT_N_CTX_SEQ, caps.n_ctx))
        self.slots_choice: SlotsChoice | None = None
        if config.slots == AUTO_SLOTS:
            self.slots_choice = choose_slots(caps, cast(int, config.n_ctx_seq), config.n_batch)
            log.info("llamabatch: %s", self.slots_choice.reason)
            config = dataclasses.replace(config, slots=self.slots_choice.slots)
        slots = cast(int, config.slots)  # a number from here on
        if slots > caps.max_slots:
            raise ParameterError(
                "slots",
                slots,
                f"1 to {caps.max_slots} (llama_max_parallel_sequences(): the most "
                "sequences this llama.cpp decodes together)",
            )
        self.config, self.sampling = config, config.sampling
        if caps.check_batch_params is not None and slots > 1:  # llama.cpp's own limits
            caps.check_batch_params(slots, cast(int, config.n_ctx_seq), config.n_batch)
        self.backend = backend
        self._llm = llm
        self._scheduler = Scheduler(backend, config, info=caps)
        self.lock = caps.lock if caps.lock is not None else threading.RLock()
        self._closed = False
        self._run_lock = threading.Lock()
        self._run_owner: int | None = None
        self._run_s, self._busy_told = 0.0, False  # _tell_if_busy
        self._template: ChatTemplate | None = None
        self._queue: SubmitQueue | None = None  # made by the first submit
        self._queue_lock = threading.Lock()
        self._pid = os.getpid()  # a child of os.fork() may not use it (check_process)

    @staticmethod
    def estimate_memory(
        llm_or_model_path: object, *, slots: int = 4, n_ctx_seq: int = DEFAULT_N_CTX_SEQ
    ) -> KvEstimate:
        """KV cache bytes a batch context of ``slots`` x ``n_ctx_seq`` would allocate,
        told before anything is allocated (``.bytes_per_slot``, ``.total_bytes``).

        Args:
            llm_or_model_path: a loaded ``llama_cpp.Llama`` (its KV types count) or a
                GGUF path (read without its weights; F16 K and V).
            slots, n_ctx_seq: as for the generator (n_ctx_seq padded up to 256).

        Returns:
            a :class:`~llamabatch.KvEstimate`; the formula and its source (llama.cpp's
            ``llama_kv_cache`` constructor) are in :mod:`llamabatch.llamacpp.kv_size`.

        Raises:
            ValueError: a size < 1 or a path llama.cpp cannot open.
        """
        from .llamacpp.kv_size import estimate  # loads llama.cpp only when asked

        return estimate(llm_or_model_path, slots=slots, n_ctx_seq=n_ctx_seq)

    # -- lifetime ---------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Free the batch context (callable many times). The ``Llama`` stays usable.

        With submitted items (:meth:`submit`): stop accepting (``submit`` then raises
        GeneratorClosed), cancel the futures still waiting, let the running items finish
        and end the engine thread, then free.

        In a child process made by ``os.fork()`` it only marks the copy closed: the
        engine thread and the batch context are the parent's.

        Raises:
            GeneratorBusy: an engine thread runs and this thread holds :attr:`lock`
                (``llm_lock(llm)``), which it needs to end; nothing is changed."""
        if os.getpid() != self._pid:
            self._closed = True
            return
        if self._queue is not None:
            self._queue.close()
        with self.lock:
            if not self._closed:
                self._closed = True
                self.backend.close()

    def _check_open(self) -> None:
        check_process(self._pid)
        if self._closed:
            raise GeneratorClosed("this BatchGenerator is closed; create a new one")
        if self.backend.closed:
            raise GeneratorClosed(
                "the Llama of this BatchGenerator was closed "
                "(Llama.close()); close the generator before the Llama"
            )

    # -- work -------------------------------------------------------------------------
    @property
    def stats(self) -> Stats:
        """Counters so far: items batched and alone, cache reuse, why batching is off,
        KV bytes allocated…"""
        return self._scheduler.stats

    @property
    def limits(self) -> BatchLimits | None:
        """What llama.cpp allocated for the batch context (``n_ctx_seq`` padded up to a
        multiple of 256, ``n_seq_max``, ``n_batch``, ``n_ctx``); ``None`` until two
        items that fit a slot were waiting together, and when it could not be created.
        A context that could not be created as asked is tried smaller (half the slots
        down to 2, then half ``n_ctx_seq`` down to the longest waiting item's need):
        these are the limits of the one that was created."""
        return self._scheduler.limits

    def _requests(
        self,
        items: Iterable[object],
        sampling: SamplingParams | Sequence[SamplingParams] | None,
        template: ChatTemplate | None = None,
    ) -> Iterator[Request]:
        """Each item's request (:func:`~llamabatch.items.resolve_item`, a chat through
        :func:`~llamabatch.chat.chat_prompt`); a bad item is its request's error."""
        pairs = per_item_sampling(items, self.sampling if sampling is None else sampling)
        for i, (item, base) in enumerate(pairs):
            yield self._request(i, item, base, template)

    def _request(
        self, i: int, item: object, base: SamplingParams, template: ChatTemplate | None = None
    ) -> Request:
        try:
            it = resolve_item(item, base)
            prompt = it.prompt if it.messages is None else self._chat(it.messages, template)
        except (ValueError, TypeError, RuntimeError, UnicodeError, LlamaBatchError) as exc:
            return Request(i, [], base, error=str(exc))
        return prepare(i, prompt, it.sampling, self.backend.vocab, self.backend.info.n_ctx)

    def _chat(self, messages: object, template: ChatTemplate | None) -> object:
        from .chat import chat_prompt

        return chat_prompt(messages, template or self._model_template(), self._llm)

    def _model_template(self) -> ChatTemplate:
        """The ``Llama``'s chat template (ChatTemplateError when it has none)."""
        if self._template is None:
            if self._llm is None:
                raise ValueError(
                    "a chat needs a chat template: the generator has a backend and no Llama; "
                    "give chat(..., template=llamabatch.ChatTemplate(...))"
                )
            from .chat import ChatTemplate

            self._template = ChatTemplate.from_llama(self._llm)
        return self._template

    @contextmanager
    def _run(self) -> Iterator[None]:
        me = threading.get_ident()
        if self._run_owner == me:
            raise GeneratorBusy(
                "this thread is already running this generator (an "
                "unfinished iter_groups); finish or close it first"
            )
        with self._run_lock:
            self._run_owner = me
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self._run_owner = None
                self._tell_if_busy(time.perf_counter() - t0)

    def _tell_if_busy(self, seconds: float) -> None:
        """Log the busy-CPU warning (:func:`~llamabatch._util.busy.busy_cpu_warning`)
        once per generator, when its runs have lasted long enough for the 1-minute load
        average to speak of them."""
        self._run_s += seconds
        if self._busy_told or self._run_s < busy.BUSY_MIN_S or busy.told_elsewhere():
            return
        warning = busy.busy_cpu_warning(
            busy.load_average(),
            os.cpu_count(),
            getattr(self._llm, "n_threads", None),
            threads_as="Llama(n_threads={})",
            during="this generator's runs",
        )
        if warning is not None:
            self._busy_told = True
            busy_log.warning("llamabatch: %s", warning)

    def iter_groups(
        self,
        items: Iterable[object],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> Iterator[list[Completion]]:
        """Complete ``items``, yielding them a page of ``slots`` items at a time.

        Items run in the slot engine as slots free up; a page is yielded as soon as all
        its items are done (later items may already be running: closing the iterator
        loses only those, never a yielded page).

        Args:
            items: any iterable, read lazily (a generator of a huge backlog is fine), of
                items: a prompt (``str``, tokenized like ``Llama.create_completion``;
                UTF-8 ``bytes``, ``bytearray`` or a ``memoryview`` of bytes; a list of
                token ids), chat messages (a list of ``{"role", "content"}``, formatted
                with the model's chat template as :meth:`chat` does), or a mapping with
                exactly one of ``"prompt"`` / ``"messages"`` and the item's own
                :class:`SamplingParams` fields (and OpenAI's ``response_format``) over
                ``sampling`` (:mod:`llamabatch.items`).
            sampling: one :class:`SamplingParams` for every item, or a sequence of them,
                one per item (default: the generator's ``sampling``).

        Yields:
            lists of ``slots`` completions (the last one maybe shorter) in input
            order; all together hold exactly one completion per item, ``index``
            counting from 0. An item that cannot be completed (a bad field, messages
            the template refuses, a prompt that cannot be tokenized) has its error in
            its place.

        Raises:
            ValueError: ``sampling`` is not a SamplingParams or its count differs from
                the items' (checked up front for a sized ``items``).
            GeneratorClosed: the generator, or its ``Llama``, was closed, or this process
                is a child of the one that made it (``os.fork()``).
            GeneratorBusy: this thread is already inside a run of this generator, or is
                its engine thread (a done-callback of a submitted item runs there).
            TypeError: ``items`` is one ``str``, ``bytes`` or mapping (not a list).
        """
        _check_many(items)
        self._check_open()
        return self._pages(self._requests(items, sampling), hand_back=True)

    def _pages(self, requests: Iterator[Request], *, hand_back: bool) -> Iterator[list[Completion]]:
        """The pages; with ``hand_back`` the caller's ``Llama`` is put back as it was
        before each page is yielded (the caller may use it in between)."""
        if self._queue is not None:  # the engine thread owns the slots: share them
            yield from self._queued_pages(self._queue, requests)
            return
        slots = cast(int, self.config.slots)
        done: dict[int, Completion] = {}
        page_start = 0
        with self._run():
            for finished in self._steps(requests, cast(int, self.config.lookahead)):
                if not finished:
                    continue
                for c in finished:
                    done[c.index] = c
                while all(i in done for i in range(page_start, page_start + slots)):
                    page = [done.pop(i) for i in range(page_start, page_start + slots)]
                    self._scheduler.count(page)
                    if hand_back:  # the backend locks the Llama itself
                        self._scheduler.release_alone()
                    yield page
                    page_start += slots
            if done:  # the run has ended: the Llama is already given back
                page = [done.pop(i) for i in sorted(done)]
                self._scheduler.count(page)
                yield page

    def _steps(
        self, requests: Iterator[Request | None], lookahead: int
    ) -> Iterator[list[Completion]]:
        """The run loop: each step's completions, holding the turn around reading and the
        step. A request is read only while the scheduler wants one and it is fewer than
        ``lookahead`` places after the oldest unfinished one; ``None`` from ``requests``
        means nothing now, more later: ``[]`` is yielded, to wait outside the turn."""
        scheduler = self._scheduler
        unfinished: set[int] = set()
        n_read = 0  # the index after the last request read
        scheduler.begin()
        try:
            while True:
                with _Turn(self):
                    req: Any = _END
                    while scheduler.wants and n_read < min(unfinished, default=n_read) + lookahead:
                        if (req := next(requests, _END)) is None or req is _END:
                            break
                        n_read = req.index + 1
                        unfinished.add(req.index)
                        scheduler.add(req)
                    finished = scheduler.finished
                    if finished and req is not None:
                        return  # the input is exhausted and every completion given
                    done = [] if finished else scheduler.step()
                if done:
                    unfinished.difference_update(c.index for c in done)
                yield done
        finally:
            scheduler.end()

    def _queued_pages(
        self, queue: SubmitQueue, requests: Iterator[Request]
    ) -> Iterator[list[Completion]]:
        """The pages of ``requests`` run by the engine thread beside the submitted items
        (at most ``lookahead`` of them submitted ahead of the oldest not given back)."""
        queue.check_wait("complete_many / iter_groups / create_completions")
        indices: deque[int] = deque()  # each request's own index: the queue numbers them

        def started() -> Iterator[Future[Completion]]:
            for req in requests:
                indices.append(req.index)
                req.index = queue.number()
                yield queue.put(req)

        lookahead, slots = cast(int, self.config.lookahead), cast(int, self.config.slots)
        for page in ordered_pages(started(), lookahead, slots, whole=True):
            yield [dataclasses.replace(c, index=indices.popleft()) for c in page]

    def complete_many(
        self,
        items: Iterable[object],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[Completion]:
        """Complete every item; ``result[i]`` belongs to ``items[i]``.

        Args:
            items, sampling: as for :meth:`iter_groups`.

        Raises:
            ValueError, GeneratorClosed, GeneratorBusy, TypeError: as :meth:`iter_groups`.
        """
        _check_many(items)
        self._check_open()
        return self._all(self._requests(items, sampling))

    def _all(self, requests: Iterator[Request]) -> list[Completion]:
        return [c for page in self._pages(requests, hand_back=False) for c in page]

    def chat(
        self,
        conversations: Iterable[Sequence[Mapping[str, Any]]],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        template: ChatTemplate | None = None,
    ) -> list[Completion]:
        """Complete chats: each conversation (a list of ``{"role", "content"}`` messages)
        is formatted with the model's own chat template, generation prompt appended, and
        tokenized as llama-cpp-python's chat handlers do
        (:func:`~llamabatch.chat.chat_prompt`, what ``llamabatch complete`` does
        with ``messages``).

        Args:
            conversations: a list of conversations (a list of message lists).
            sampling: as for :meth:`iter_groups`.
            template: a :class:`~llamabatch.ChatTemplate` instead of the model's
                (needed with a ``backend`` and no ``Llama``).

        Returns:
            one completion per conversation, in order; a conversation the template
            refuses (or that is not a list of messages) gets its error in its place.

        Raises:
            TypeError: ``conversations`` is one string, or one conversation (a list of
                message dicts) instead of a list of them.
            ChatTemplateError: the model has no chat template (and none was given).
            GeneratorClosed: as :meth:`iter_groups`.
        """
        _check_many(conversations)
        conversations = list(conversations)
        if conversations and isinstance(conversations[0], Mapping):
            raise TypeError(
                "conversations is one conversation (a list of messages); "
                "give a list of conversations, e.g. [messages]"
            )
        self._check_open()
        template = template or self._model_template()  # no template: raised here
        return self._all(
            self._requests([{"messages": c} for c in conversations], sampling, template)
        )

    def create_completions(self, prompts: Iterable[object], **kwargs: Any) -> list[dict]:
        """``[llm.create_completion(p, **kwargs) for p in prompts]``, batched: one response
        dict per prompt, in order, field for field as ``Llama.create_completion``'s;
        ``n`` gives ``n`` choices. The keyword rules are in :mod:`llamabatch.shapes.requests`.

        Raises:
            ValueError: a keyword the batch path cannot honour (named), a bad value.
            TypeError: ``prompts`` is one prompt, not a list.
            GeneratorClosed, GeneratorBusy: as :meth:`complete_many`.
        """
        call = completion_call(self._llm, prompts, kwargs)
        return call.responses(self.complete_many(call.items, call.sampling), self.backend)

    def create_chat_completions(
        self, messages_list: Iterable[Sequence[Mapping[str, Any]]], **kwargs: Any
    ) -> list[dict]:
        """``[llm.create_chat_completion(m, **kwargs) for m in messages_list]``, batched,
        formatted with the model's own chat template (as :meth:`chat`); the dicts are
        ``create_chat_completion``'s.

        Raises:
            ValueError: as :meth:`create_completions`; the ``Llama`` was given another
                ``chat_format`` or ``chat_handler`` than its GGUF template.
            TypeError: ``messages_list`` is one conversation, not a list of them.
        """
        call = chat_call(self._llm, messages_list, kwargs)
        return call.responses(self.complete_many(call.items, call.sampling), self.backend)

    # -- online -----------------------------------------------------------------------
    def submit(self, item: object, sampling: SamplingParams | None = None) -> Future[Completion]:
        """Queue one item from any thread; it joins the running batch as a slot frees up
        (one daemon engine thread, started here, owns the slots; a ``complete_many`` /
        ``iter_groups`` called meanwhile shares them). ``item`` and ``sampling``: as one
        item of :meth:`iter_groups`.

        Returns:
            a ``concurrent.futures.Future`` of its :class:`Completion` (``index``: the
            submission number, 0, 1, ...). ``cancel()`` works while it waits (it then
            never runs), not once the engine took it; ``result()`` yields to Ctrl-C, and
            raises GeneratorBusy in a done-callback (on the engine thread, which alone
            completes items) and while this thread holds :attr:`lock`, which each engine
            step needs; an exception of the engine thread is set on every future
            not yet done, and one a done-callback raises is logged.

        Raises:
            GeneratorClosed: the generator (or its ``Llama``) was closed, or this process
                is a child of the one that made it (``os.fork()``).
            ValueError: ``sampling`` is not a SamplingParams.
        """
        queue = self._open_queue(sampling)
        return queue.put(self._request(queue.number(), item, sampling or self.sampling))

    def _open_queue(self, sampling: SamplingParams | None) -> SubmitQueue:
        """The queue of submitted items, made on first use; the checks of :meth:`submit`."""
        self._check_open()
        if sampling is not None and not isinstance(sampling, SamplingParams):
            raise ValueError(f"sampling is {type(sampling).__name__}; give a SamplingParams")
        with self._queue_lock:
            if self._queue is None:
                self._queue = SubmitQueue(self._serve, self.lock)
        return self._queue

    async def acomplete(self, item: object, sampling: SamplingParams | None = None) -> Completion:
        """:meth:`submit` awaited from asyncio (cancelling the task cancels a waiting item).
        The item is numbered when the coroutine starts, as by :meth:`submit`, and resolved
        (chat formatted, tokenized) in a worker thread (``asyncio.to_thread``): the event
        loop never waits for it, however long the prompt.

        Raises:
            GeneratorClosed, ValueError: as :meth:`submit`.
            GeneratorBusy: the event loop's thread holds :attr:`lock` (``llm_lock(llm)``),
                which each engine step needs: the item could never complete.
        """
        queue = self._open_queue(sampling)
        queue.check_wait("acomplete()")
        index = queue.number()
        req = await asyncio.to_thread(self._request, index, item, sampling or self.sampling)
        return await asyncio.wrap_future(queue.put(req))

    def _serve(self, queue: SubmitQueue) -> None:
        """The engine thread: steps while the queue has work, waits idle without any lock."""
        try:
            with self._run():
                with _Turn(self):
                    self._scheduler.open()
                for done in self._steps(queue.source(), sys.maxsize):
                    self._scheduler.count(done)
                    for c in done:
                        queue.resolve(c)
                    if queue.idle:
                        self._scheduler.release_alone()
                        queue.wait()
        except BaseException as exc:  # noqa: BLE001 - every waiting future must learn it
            queue.fail(exc)
        else:
            queue.ended()


def create_completions(llm: Any, prompts: Iterable[object], **kwargs: Any) -> list[dict]:
    """``[llm.create_completion(p, **kwargs) for p in prompts]``, batched: one response
    dict per prompt, in order, from a :class:`BatchGenerator` opened on ``llm`` for this
    call (keep one and call its method to reuse its context).

    Raises:
        ValueError: a keyword that cannot be honoured (named) or a bad value.
        TypeError: ``prompts`` is one prompt, not a list; ``llm`` is not a ``Llama``.
    """
    with BatchGenerator(llm) as gen:
        return gen.create_completions(prompts, **kwargs)


def create_chat_completions(
    llm: Any, messages_list: Iterable[Sequence[Mapping[str, Any]]], **kwargs: Any
) -> list[dict]:
    """``[llm.create_chat_completion(m, **kwargs) for m in messages_list]``, batched, as
    :func:`create_completions` (errors: as :meth:`BatchGenerator.create_chat_completions`)."""
    with BatchGenerator(llm) as gen:
        return gen.create_chat_completions(messages_list, **kwargs)


class _Turn:
    """One step's hold of a generator: its lock, and Ctrl-C inside a C callback raised after
    the step (a class, not a generator: it is entered around every decode step)."""

    __slots__ = ("_gen", "_block")

    def __init__(self, gen: BatchGenerator) -> None:
        self._gen = gen

    def __enter__(self) -> None:
        gen = self._gen
        gen.lock.__enter__()
        try:
            self._block = callback_interrupts()
            self._block.__enter__()
        except BaseException:
            gen.lock.__exit__(*sys.exc_info())
            raise
        try:
            gen._check_open()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self._block.__exit__(exc_type, exc, tb)
        except BaseException:
            self._gen.lock.__exit__(*sys.exc_info())
            raise
        self._gen.lock.__exit__(exc_type, exc, tb)

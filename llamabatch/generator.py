"""BatchGenerator: the public entry point.

Holds a backend (llama.cpp through a loaded ``llama_cpp.Llama``, or a fake), reads the
prompts lazily, hands them to the :class:`~llamabatch.engine.scheduler.Scheduler` (the slot
engine) and gives the completions back in input order, a page of ``slots`` items at a
time, as soon as each page is complete.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from ._util.closing import Closing
from ._util.interrupts import callback_interrupts
from .completion import Completion, Stats
from .engine.backend import Backend, BatchLimits
from .engine.request import prepare
from .engine.scheduler import MAX_BATCH_FAILURES, Scheduler, check_max_batch_failures
from .errors import GeneratorBusy, GeneratorClosed, ParameterError
from .fields import per_item_sampling
from .params import BatchConfig, SamplingParams

if TYPE_CHECKING:
    from .llamacpp.kv_size import KvEstimate

#: Most KV cache tokens per sequence by default (``n_ctx_seq=None``).
DEFAULT_N_CTX_SEQ = 4096


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


def _check_many(prompts: object) -> None:
    if isinstance(prompts, (str, bytes, bytearray)):
        raise TypeError(
            f"prompts is one {type(prompts).__name__}; give a list of prompts "
            "(e.g. [prompt]), not a single prompt"
        )


class BatchGenerator(Closing):
    """Complete many prompts on one loaded model, several sequences at a time.

    Args:
        llm: a loaded ``llama_cpp.Llama``; its model is shared (no second copy of the
            weights) by a second llama.cpp context with ``slots`` sequences.
        backend: a :class:`~llamabatch.engine.backend.Backend` instead of ``llm`` (e.g.
            :class:`llamabatch.testing.FakeBackend`). Exactly one of the two is given.
        slots: sequences decoded together (``n_seq_max``), 1 to
            ``llama_max_parallel_sequences()``; 1 completes every item alone.
        n_ctx_seq: KV cache tokens per sequence (prompt + reply); llama.cpp pads it to a
            multiple of 256. A prompt with ``n_prompt + max_tokens > n_ctx_seq`` is
            completed alone. ``None`` (default): ``min(4096, n_ctx)`` of the ``Llama``
            (no item longer than its ``n_ctx`` can be completed anyway, so more KV cache
            could never be used); :meth:`estimate_memory` tells its bytes.
        n_batch: most tokens per ``llama_decode`` (also ``n_ubatch``); for llama.cpp at
            least ``slots`` (each decode step has one output row per sequence).
        max_tokens: most generated tokens per item (``SamplingParams.max_tokens``
            overrides it per item).
        sampling: the default sampler chain of every item (default: llama-cpp-python's
            defaults); ``complete_many`` / ``iter_groups`` may give one per item.
        lookahead: how far ahead of the oldest unfinished item the engine may start
            items (at most ``lookahead`` items wait to be given back in order), a
            multiple of ``slots`` (default: the largest such number <= max(16,
            4 * slots), :func:`~llamabatch.params.default_lookahead`).
        page_size: the former name of ``lookahead`` (deprecated: a
            ``DeprecationWarning``; a page is what :meth:`iter_groups` yields).
        min_copy_tokens: copy another slot's cache to share a prompt prefix only when
            that saves at least this many prompt tokens (default 32; a copy costs
            about as much as prefilling a few tokens, see docs/engine.md).
        cache_ram_mib: MiB of host memory for the states of slots whose cache was about
            to be mostly thrown away, so that a later prompt sharing their prefix loads it
            instead of prefilling it again (llama-server's ``--cache-ram``, which
            defaults to 8192; :mod:`llamabatch.engine.host_cache`). Default 1024; 0 turns it off.
        max_batch_failures: failures of the batch path in a row (a failed decode, cache
            copy or state save/load; no item completed in the batch in between) after
            which batching is turned off for good (default 3, >= 1). Before that, each
            failure empties the caches and costs only the items in flight one retry
            alone; a grammar error is the item's own error and never counts
            (:mod:`llamabatch.engine.scheduler`, docs/reliability-rules.md).
        backend_sampling: with ``llm``, sample the replies of plain chains (no grammar,
            penalties, logprobs or label scores) on the model's own device, llama.cpp's
            backend sampling: the same chain and seed, only the token comes back to the host
            (``Stats.backend_sampled_rows`` counts them). ``None`` (default): where it pays,
            when the model's output layer is on a GPU; True / False: always / never
            (docs/performance.md).

    Raises:
        ValueError: a parameter out of range (named), a combination llama.cpp would
            abort on (e.g. ``slots > n_batch``, see ``docs/asserts.md``), or
            neither/both of llm and backend.
        TypeError: ``llm`` is not a loaded ``llama_cpp.Llama`` (e.g. a model path).
        llamabatch.errors.LibraryError: llama-cpp-python lacks an essential symbol even
            for completing alone.

    Attributes:
        lock: the lock held around every use of llama.cpp (each group, ``close``): for a
            ``Llama``, :func:`llamabatch.llm_lock` ``(llm)``, shared with every other
            generator on that ``Llama`` and with your own calls of it.

    Thread safety: a generator may be shared by threads; one run (``iter_groups`` /
    ``complete_many``) at a time uses its slots, a run of another thread waits for it
    to end. Each decode runs under :attr:`lock`; between decodes other threads may use
    the ``Llama``. The ``Llama`` itself is not thread-safe: wrap your own calls of it
    (``create_completion``, ``close`` ...) in ``with llamabatch.llm_lock(llm):`` when
    generators run in other threads (and do not hold that lock while waiting for a
    generator another thread is running).
    """

    def __init__(
        self,
        llm: object = None,
        *,
        backend: Backend | None = None,
        slots: int = 4,
        n_ctx_seq: int | None = None,
        n_batch: int = 512,
        max_tokens: int = 200,
        sampling: SamplingParams | None = None,
        lookahead: int | None = None,
        min_copy_tokens: int = 32,
        cache_ram_mib: int = 1024,
        max_batch_failures: int = MAX_BATCH_FAILURES,
        page_size: int | None = None,
        backend_sampling: bool | None = None,
    ) -> None:
        lookahead = _lookahead(lookahead, page_size)
        # every plain parameter is checked before any library work (n_ctx_seq=None: a
        # stand-in until the Llama's n_ctx is known)
        stand_in = DEFAULT_N_CTX_SEQ if n_ctx_seq is None else n_ctx_seq
        config = BatchConfig(
            slots=slots,
            n_ctx_seq=stand_in,
            n_batch=n_batch,
            max_tokens=max_tokens,
            lookahead=lookahead,
        )
        if sampling is None:
            sampling = SamplingParams()
        if not isinstance(sampling, SamplingParams):
            raise ValueError(
                f"sampling is {type(sampling).__name__}; expected a llamabatch.SamplingParams"
            )
        if not isinstance(min_copy_tokens, int) or min_copy_tokens < 1:
            raise ParameterError("min_copy_tokens", min_copy_tokens, "an integer >= 1")
        if (
            not isinstance(cache_ram_mib, int)
            or isinstance(cache_ram_mib, bool)
            or cache_ram_mib < 0
        ):
            raise ParameterError(
                "cache_ram_mib",
                cache_ram_mib,
                "an integer >= 0 (MiB; 0 keeps no state in host memory)",
            )
        check_max_batch_failures(max_batch_failures)
        if backend_sampling is not None and not isinstance(backend_sampling, bool):
            raise ParameterError(
                "backend_sampling", backend_sampling, "True, False or None (where it pays)"
            )
        if (llm is None) == (backend is None):
            raise ValueError("give exactly one of llm (a llama_cpp.Llama) or backend")
        if backend is not None and backend_sampling is not None:
            raise ValueError(
                "backend_sampling applies to an llm (a llama_cpp.Llama); a backend decides "
                "its own sampling (e.g. LlamaBackend(llm, backend_sampling=...))"
            )
        self.sampling = sampling
        if backend is None:
            _check_llm(llm)
            from .llamacpp.backend import LlamaBackend  # loads llama.cpp only when asked

            backend = LlamaBackend(llm, backend_sampling=backend_sampling)
        caps = backend.info
        if slots > caps.max_slots:
            raise ParameterError(
                "slots",
                slots,
                f"1 to {caps.max_slots} (llama_max_parallel_sequences(): the most "
                "sequences this llama.cpp decodes together)",
            )
        if n_ctx_seq is None:
            n_ctx_seq = min(DEFAULT_N_CTX_SEQ, caps.n_ctx)
            config = dataclasses.replace(config, n_ctx_seq=n_ctx_seq)
        self.config = config
        check = caps.check_batch_params  # llama.cpp's own limits
        if check is not None and slots > 1:
            check(slots, n_ctx_seq, n_batch)
        self.backend = backend
        self._llm = llm
        self._scheduler = Scheduler(
            backend,
            self.config,
            min_copy_tokens,
            cache_ram_mib * 1024 * 1024,
            max_batch_failures=max_batch_failures,
            info=caps,
        )
        self.lock = caps.lock if caps.lock is not None else threading.RLock()
        self._closed = False
        self._run_lock = threading.Lock()
        self._run_owner: int | None = None

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
            a :class:`llamabatch.llamacpp.kv_size.KvEstimate`; the formula and its
            source (llama.cpp's ``llama_kv_cache`` constructor) are in that module.

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
        """Free the batch context (callable many times). The ``Llama`` stays usable."""
        with self.lock:
            if not self._closed:
                self._closed = True
                self.backend.close()

    def _check_open(self) -> None:
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

    def _samplings(
        self, prompts: Iterable[object], sampling: SamplingParams | Sequence[SamplingParams] | None
    ) -> Iterator[tuple[object, SamplingParams]]:
        """Each prompt with its SamplingParams, checked up front (:func:`per_item_sampling`)."""
        return per_item_sampling(prompts, self.sampling if sampling is None else sampling)

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
            try:
                yield
            finally:
                self._run_owner = None

    def _turn(self) -> _Turn:
        return _Turn(self)

    def iter_groups(
        self,
        prompts: Iterable[object],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> Iterator[list[Completion]]:
        """Complete ``prompts``, yielding them a page of ``slots`` items at a time.

        Items run in the slot engine as slots free up; a page is yielded as soon as all
        its items are done (later items may already be running: closing the iterator
        loses only those, never a yielded page).

        Args:
            prompts: any iterable of ``str``, UTF-8 ``bytes`` (``bytearray``, a
                ``memoryview`` of bytes) or lists of token ids; it is read lazily, so a
                generator of a huge backlog is fine.
            sampling: one :class:`SamplingParams` for every item, or a sequence of them,
                one per prompt (default: the generator's ``sampling``).

        Yields:
            lists of ``slots`` completions (the last one maybe shorter) in input
            order; all together hold exactly one completion per prompt, ``index``
            counting from 0.

        Raises:
            ValueError: ``sampling`` is not a SamplingParams or its count differs from
                the prompts' (checked up front for a sized ``prompts``).
            GeneratorClosed: the generator, or its ``Llama``, was closed.
            GeneratorBusy: this thread is already inside a run of this generator.
            TypeError: ``prompts`` is one ``str`` or ``bytes`` (not a list of prompts).
        """
        _check_many(prompts)
        self._check_open()
        return self._pages(self._samplings(prompts, sampling), hand_back=True)

    def _pages(
        self, prompts: Iterator[tuple[object, SamplingParams]], *, hand_back: bool
    ) -> Iterator[list[Completion]]:
        """The pages; with ``hand_back`` the caller's ``Llama`` is put back as it was
        before each page is yielded (the caller may use it in between)."""
        slots, backend = self.config.slots, self.backend
        vocab, n_ctx = backend.vocab, backend.info.n_ctx
        items = (prepare(i, p, s, vocab, n_ctx) for i, (p, s) in enumerate(prompts))
        done: dict[int, Completion] = {}
        page_start = 0
        with self._run():
            for finished in self._scheduler.iter_steps(
                items, self._turn, cast(int, self.config.lookahead)
            ):
                for c in finished:
                    done[c.index] = c
                while page_start in done and all(
                    i in done for i in range(page_start + 1, page_start + slots)
                ):
                    page = self._deliver(
                        [done.pop(i) for i in range(page_start, page_start + slots)]
                    )
                    if hand_back:  # the backend locks the Llama itself
                        self._scheduler.release_alone()
                    yield page
                    page_start += slots
            if done:  # the run has ended: the Llama is already given back
                yield self._deliver([done.pop(i) for i in sorted(done)])

    def _deliver(self, page: list[Completion]) -> list[Completion]:
        for c in page:
            self._scheduler.count(c)
        return page

    def complete_many(
        self,
        prompts: Iterable[object],
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[Completion]:
        """Complete every prompt; ``result[i]`` belongs to ``prompts[i]``.

        Args:
            prompts, sampling: as for :meth:`iter_groups`.

        Raises:
            ValueError: a bad ``sampling`` (see :meth:`iter_groups`).
            GeneratorClosed: the generator, or its ``Llama``, was closed.
            TypeError: ``prompts`` is one ``str`` or ``bytes`` (not a list of prompts).
        """
        _check_many(prompts)
        self._check_open()
        pages = self._pages(self._samplings(prompts, sampling), hand_back=False)
        return [c for group in pages for c in group]

    def chat(
        self, conversations: Iterable[Sequence[Mapping[str, Any]]], *, template: Any = None
    ) -> list[Completion]:
        """Complete chats: each conversation (a list of ``{"role", "content"}`` messages)
        is formatted with the model's own chat template, generation prompt appended, and
        tokenized as llama-cpp-python's chat handlers do (:mod:`llamabatch.llamacpp.chat`, what
        ``llamabatch complete`` does with ``messages``).

        Args:
            conversations: a list of conversations (a list of message lists).
            template: a :class:`~llamabatch.llamacpp.chat.ChatTemplate` instead of the model's
                (needed with a ``backend`` and no ``Llama``).

        Returns:
            one completion per conversation, in order; a conversation the template
            refuses (or that is not a list of messages) gets its error in its place.

        Raises:
            TypeError: ``conversations`` is one string, or one conversation (a list of
                message dicts) instead of a list of them.
            ChatTemplateError: the model has no chat template (and none was given).
            GeneratorClosed: the generator, or its ``Llama``, was closed.
        """
        from .llamacpp.chat import ChatTemplate, chat_tokens, check_messages

        _check_many(conversations)
        conversations = list(conversations)
        if conversations and isinstance(conversations[0], Mapping):
            raise TypeError(
                "conversations is one conversation (a list of messages); "
                "give a list of conversations, e.g. [messages]"
            )
        if template is None:
            if self._llm is None:
                raise ValueError(
                    "chat needs template= (a llamabatch.llamacpp.chat.ChatTemplate) "
                    "when the generator has a backend and no Llama"
                )
            template = ChatTemplate.from_llama(self._llm)
        prompts: list[object] = []
        refused: dict[int, str] = {}
        for k, messages in enumerate(conversations):
            try:
                text = template.render(check_messages(messages))
                prompts.append(chat_tokens(self._llm, text) if self._llm is not None else text)
            except (ValueError, TypeError, RuntimeError, UnicodeError) as exc:
                refused[k] = f"conversation {k}: {exc}"
                prompts.append([])  # an empty prompt: no model work, replaced below
        done = self.complete_many(prompts)
        return [
            dataclasses.replace(c, error=refused[c.index], finish_reason="error")
            if c.index in refused
            else c
            for c in done
        ]


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


def _lookahead(lookahead: int | None, page_size: int | None) -> int | None:
    """``lookahead``, or the deprecated ``page_size`` given in its place."""
    if page_size is None:
        return lookahead
    if lookahead is not None:
        raise ValueError("lookahead and page_size are both set: give lookahead only")
    warnings.warn(
        "BatchGenerator(page_size=...) is deprecated: call it lookahead=...",
        DeprecationWarning,
        stacklevel=3,
    )
    return page_size

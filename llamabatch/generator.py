"""BatchGenerator: the public entry point.

Holds a backend (llama.cpp through a loaded ``llama_cpp.Llama``, or a fake), reads the
prompts page by page, splits each page into groups of ``slots`` consecutive items and
hands each group to the :class:`~llamabatch.scheduler.Scheduler`.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .backend import Backend, BatchLimits
from .completion import Completion, Stats
from .errors import GeneratorClosed
from .params import BatchConfig, SamplingParams
from .prompts import prepare
from .scheduler import Scheduler


def _check_many(prompts: object) -> None:
    if isinstance(prompts, (str, bytes, bytearray)):
        raise TypeError(f"prompts is one {type(prompts).__name__}; give a list of prompts "
                        "(e.g. [prompt]), not a single prompt")


class BatchGenerator:
    """Complete many prompts on one loaded model, several sequences at a time.

    Args:
        llm: a loaded ``llama_cpp.Llama``; its model is shared (no second copy of the
            weights) by a second llama.cpp context with ``slots`` sequences.
        backend: a :class:`~llamabatch.backend.Backend` instead of ``llm`` (e.g.
            :class:`llamabatch.testing.FakeBackend`). Exactly one of the two is given.
        slots: sequences decoded together (``n_seq_max``), 1 to
            ``llama_max_parallel_sequences()``; 1 completes every item alone.
        n_ctx_seq: KV cache tokens per sequence (prompt + reply); llama.cpp pads it to a
            multiple of 256. A prompt with ``n_prompt + max_tokens > n_ctx_seq`` is
            completed alone.
        n_batch: most tokens per ``llama_decode`` (also ``n_ubatch``).
        max_tokens: most generated tokens per item.
        sampling: the sampler chain of every item (default: llama-cpp-python's defaults).
        page_size: items read from the input at a time, a multiple of ``slots``
            (default: the largest such number <= 16).

    Raises:
        ValueError: a parameter out of range (named), or neither/both of llm and backend.
        llamabatch.errors.LibraryError: llama-cpp-python lacks an essential symbol even
            for completing alone.

    Attributes:
        lock: the lock held around every use of llama.cpp (each group, ``close``): for a
            ``Llama``, :func:`llamabatch.llm_lock` ``(llm)``, shared with every other
            generator on that ``Llama`` and with your own calls of it.

    Thread safety: a generator may be shared by threads; each group runs under
    :attr:`lock`, between groups other threads may use the ``Llama``. The ``Llama``
    itself is not thread-safe: wrap your own calls of it (``create_completion``,
    ``close`` ...) in ``with llamabatch.llm_lock(llm):`` when generators run in other
    threads.
    """

    def __init__(self, llm: object = None, *, backend: Backend | None = None,
                 slots: int = 4, n_ctx_seq: int = 4096, n_batch: int = 512,
                 max_tokens: int = 200, sampling: SamplingParams | None = None,
                 page_size: int | None = None) -> None:
        self.config = BatchConfig(slots=slots, n_ctx_seq=n_ctx_seq, n_batch=n_batch,
                                  max_tokens=max_tokens, page_size=page_size)
        if sampling is None:
            sampling = SamplingParams()
        if not isinstance(sampling, SamplingParams):
            raise ValueError(f"sampling is {type(sampling).__name__}; "
                             "expected a llamabatch.SamplingParams")
        self.sampling = sampling
        if (llm is None) == (backend is None):
            raise ValueError("give exactly one of llm (a llama_cpp.Llama) or backend")
        if backend is None:
            from .llamacpp.backend import LlamaBackend  # loads llama.cpp only when asked
            backend = LlamaBackend(llm)
        if slots > backend.max_slots:
            raise ValueError(f"slots={slots} is out of range: valid is 1 to "
                             f"{backend.max_slots} (llama_max_parallel_sequences())")
        self.backend = backend
        self._llm = llm
        self._scheduler = Scheduler(backend, self.config, sampling)
        self.lock = getattr(backend, "lock", None) or threading.RLock()
        self._closed = False

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

    def __enter__(self) -> BatchGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise GeneratorClosed("this BatchGenerator is closed; create a new one")
        if getattr(self.backend, "llm_closed", False):
            raise GeneratorClosed("the Llama of this BatchGenerator was closed "
                                  "(Llama.close()); close the generator before the Llama")

    # -- work -------------------------------------------------------------------------
    @property
    def stats(self) -> Stats:
        """Counters so far: groups batched, items alone, why batching is off, …"""
        return self._scheduler.stats

    @property
    def limits(self) -> BatchLimits | None:
        """What llama.cpp allocated for the batch context (``n_ctx_seq`` padded up to a
        multiple of 256, ``n_seq_max``, ``n_batch``, ``n_ctx``); ``None`` until the first
        group of two or more items created it, and when it could not be created."""
        return self._scheduler.limits

    def iter_groups(self, prompts: Iterable[object]) -> Iterator[list[Completion]]:
        """Complete ``prompts`` group by group, yielding each group as soon as it is done.

        Args:
            prompts: any iterable of ``str``, UTF-8 ``bytes`` or lists of token ids; it
                is read one page at a time, so a generator of a huge backlog is fine.

        Yields:
            each group's completions (at most ``slots``), in input order; all groups
            together hold exactly one completion per prompt, ``index`` counting from 0.
            Closing the iterator between groups loses nothing already yielded.

        Raises:
            GeneratorClosed: the generator, or its ``Llama``, was closed.
            TypeError: ``prompts`` is one ``str`` or ``bytes`` (not a list of prompts).
        """
        _check_many(prompts)
        self._check_open()
        numbered = enumerate(prompts)
        slots, page_size = self.config.slots, self.config.page_size
        while True:
            page = list(itertools.islice(numbered, page_size))
            if not page:
                return
            for start in range(0, len(page), slots):
                with self.lock:
                    self._check_open()
                    items = [prepare(i, p, self.backend) for i, p in page[start:start + slots]]
                    done = self._scheduler.run_group(items)
                yield done

    def complete_many(self, prompts: Iterable[object]) -> list[Completion]:
        """Complete every prompt; ``result[i]`` belongs to ``prompts[i]``.

        Raises:
            GeneratorClosed: the generator, or its ``Llama``, was closed.
            TypeError: ``prompts`` is one ``str`` or ``bytes`` (not a list of prompts).
        """
        _check_many(prompts)
        return [c for group in self.iter_groups(prompts) for c in group]

    def chat(self, conversations: Iterable[Sequence[Mapping[str, Any]]], *,
             template: Any = None) -> list[Completion]:
        """Complete chats: each conversation (a list of ``{"role", "content"}`` messages)
        is formatted with the model's own chat template, generation prompt appended, and
        tokenized as llama-cpp-python's chat handlers do (:mod:`llamabatch.chat`, what
        ``llamabatch complete`` does with ``messages``).

        Args:
            conversations: a list of conversations (a list of message lists).
            template: a :class:`~llamabatch.chat.ChatTemplate` instead of the model's
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
        from .chat import ChatTemplate, chat_tokens, check_messages

        _check_many(conversations)
        conversations = list(conversations)
        if conversations and isinstance(conversations[0], Mapping):
            raise TypeError("conversations is one conversation (a list of messages); "
                            "give a list of conversations, e.g. [messages]")
        if template is None:
            if self._llm is None:
                raise ValueError("chat needs template= (a llamabatch.chat.ChatTemplate) "
                                 "when the generator has a backend and no Llama")
            template = ChatTemplate.from_llama(self._llm)
        prompts: list[object] = []
        refused: dict[int, str] = {}
        for k, messages in enumerate(conversations):
            try:
                text = template.render(check_messages(messages))
                prompts.append(chat_tokens(self._llm, text) if self._llm is not None
                               else text)
            except (ValueError, TypeError, RuntimeError, UnicodeError) as exc:
                refused[k] = f"conversation {k}: {exc}"
                prompts.append([])  # an empty prompt: no model work, replaced below
        done = self.complete_many(prompts)
        return [dataclasses.replace(c, error=refused[c.index], finish_reason="error")
                if c.index in refused else c for c in done]

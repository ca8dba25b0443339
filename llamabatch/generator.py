"""BatchGenerator: the public entry point.

Holds a backend (llama.cpp through a loaded ``llama_cpp.Llama``, or a fake), reads the
prompts page by page, splits each page into groups of ``slots`` consecutive items and
hands each group to the :class:`~llamabatch.scheduler.Scheduler`.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from .backend import Backend, BatchLimits
from .completion import Completion, Stats
from .errors import GeneratorClosed
from .interrupts import callback_interrupts
from .params import BatchConfig, SamplingParams
from .prompts import prepare
from .scheduler import Scheduler

if TYPE_CHECKING:
    from .llamacpp.kv_size import KvEstimate

#: Most KV cache tokens per sequence by default (``n_ctx_seq=None``).
DEFAULT_N_CTX_SEQ = 4096


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
            completed alone. ``None`` (default): ``min(4096, n_ctx)`` of the ``Llama``
            (no item longer than its ``n_ctx`` can be completed anyway, so more KV cache
            could never be used); :meth:`estimate_memory` tells its bytes.
        n_batch: most tokens per ``llama_decode`` (also ``n_ubatch``); for llama.cpp at
            least ``slots`` (each decode step has one output row per sequence).
        max_tokens: most generated tokens per item.
        sampling: the sampler chain of every item (default: llama-cpp-python's defaults).
        page_size: items read from the input at a time, a multiple of ``slots``
            (default: the largest such number <= 16).

    Raises:
        ValueError: a parameter out of range (named), a combination llama.cpp would
            abort on (e.g. ``slots > n_batch``, see ``docs/asserts.md``), or
            neither/both of llm and backend.
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
                 slots: int = 4, n_ctx_seq: int | None = None, n_batch: int = 512,
                 max_tokens: int = 200, sampling: SamplingParams | None = None,
                 page_size: int | None = None) -> None:
        # checked before any library work (n_ctx_seq=None: a stand-in), again below
        stand_in = DEFAULT_N_CTX_SEQ if n_ctx_seq is None else n_ctx_seq
        BatchConfig(slots=slots, n_ctx_seq=stand_in, n_batch=n_batch, max_tokens=max_tokens,
                    page_size=page_size)
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
        if n_ctx_seq is None:
            n_ctx_seq = min(DEFAULT_N_CTX_SEQ, backend.n_ctx)
        self.config = BatchConfig(slots=slots, n_ctx_seq=n_ctx_seq, n_batch=n_batch,
                                  max_tokens=max_tokens, page_size=page_size)
        check = getattr(backend, "check_batch_params", None)  # llama.cpp's own limits
        if check is not None and slots > 1:
            check(slots, n_ctx_seq, n_batch)
        self.backend = backend
        self._scheduler = Scheduler(backend, self.config, sampling)
        self.lock = getattr(backend, "lock", None) or threading.RLock()
        self._closed = False

    @staticmethod
    def estimate_memory(llm_or_model_path: object, *, slots: int = 4,
                        n_ctx_seq: int = DEFAULT_N_CTX_SEQ) -> KvEstimate:
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
        """Counters so far: groups batched, items alone, why batching is off, KV bytes…"""
        stats = self._scheduler.stats
        stats.kv_bytes = int(getattr(self.backend, "kv_bytes", 0))
        return stats

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
        """
        self._check_open()
        numbered = enumerate(prompts)
        slots, page_size = self.config.slots, self.config.page_size
        while True:
            page = list(itertools.islice(numbered, page_size))
            if not page:
                return
            for start in range(0, len(page), slots):
                with self.lock, callback_interrupts():  # Ctrl-C in a C callback too
                    self._check_open()
                    items = [prepare(i, p, self.backend) for i, p in page[start:start + slots]]
                    done = self._scheduler.run_group(items)
                yield done

    def complete_many(self, prompts: Iterable[object]) -> list[Completion]:
        """Complete every prompt; ``result[i]`` belongs to ``prompts[i]``.

        Raises:
            GeneratorClosed: the generator, or its ``Llama``, was closed.
        """
        return [c for group in self.iter_groups(prompts) for c in group]

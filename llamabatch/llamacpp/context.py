"""BatchContext: a second llama.cpp context on the model a ``llama_cpp.Llama`` loaded (weights
shared), with ``slots`` sequences and a non-unified KV cache of ``n_ctx_seq`` tokens each."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import _ffi
from .._util.closing import Closing
from ..engine.backend import BatchLimits
from ..errors import BatchUnavailable
from .batch import LlamaBatch
from .limits import check_context

#: Called before each decode with the batch's token count; an int it returns is used as
#: the return code instead of calling ``llama_decode`` (to inject failures in tests).
DecodeHook = Callable[[int], "int | None"]


def _free(lib: _ffi.Library, handle: _ffi.ContextHandle, llm: Any) -> None:
    """``llama_free`` the context; ``llm`` is an argument so the model outlives it."""
    lib.free_context(handle)
    del llm


class BatchContext(Closing):
    """A multi-sequence context sharing the ``Llama``'s model: ``slots`` sequences
    (1 .. ``llama_max_parallel_sequences()``) of ``n_ctx_seq`` KV cache tokens requested, at
    most ``n_batch`` (= ``n_ubatch``) tokens per ``llama_decode``. :attr:`limits` is what
    llama.cpp allocated (``n_ctx_seq`` padded up to 256). It holds the ``Llama`` and is freed
    by :meth:`close`, else by a ``weakref.finalize``, and before the model by ``Llama.close()``.

    Raises:
        ValueError: a value llama.cpp would assert on or refuse (:func:`~.limits.check_context`).
        LibraryError: llama-cpp-python lacks a symbol a batch context needs.
        BatchUnavailable: the ``Llama`` is closed, or llama.cpp returned NULL (out of memory?).
    """

    def __init__(
        self,
        llm: Any,
        slots: int,
        n_ctx_seq: int = 4096,
        n_batch: int = 512,
        *,
        decode_hook: DecodeHook | None = None,
    ) -> None:
        lib = _ffi.load()
        lib.require_batching()
        n_threads, n_threads_batch = _ffi.threads_of(llm)
        check_context(
            slots,
            n_ctx_seq,
            n_batch,
            max_slots=lib.max_parallel_sequences(),
            n_threads=n_threads,
            n_threads_batch=n_threads_batch,
        )
        model = _ffi.model_of(llm)
        params = lib.context_params(
            {
                "n_ctx": n_ctx_seq * slots,
                "n_batch": n_batch,
                "n_ubatch": n_batch,
                "n_seq_max": slots,
                "kv_unified": False,
                "n_threads": n_threads,
                "n_threads_batch": n_threads_batch,
                "no_perf": True,
                "embeddings": False,
            },
            like=_ffi.context_params_of(llm),
            copy=_ffi.SHARED_CONTEXT_FIELDS,
        )
        handle = lib.init_context(model, params)
        if handle is None:
            raise BatchUnavailable(
                f"llama.cpp could not create a context with {slots} sequences of "
                f"{n_ctx_seq} tokens (n_ctx={n_ctx_seq * slots}, n_batch={n_batch}); "
                "out of memory?"
            )
        self._finalizer = weakref.finalize(self, _free, lib, handle, llm)
        # Llama.close() frees the model: free this context first (a dead finalizer is a
        # no-op, and it holds nothing once called, so the Llama is not kept alive).
        _ffi.on_model_close(llm, self._finalizer)
        self._llm, self._lib, self._handle = llm, lib, handle
        self._hook = decode_hook
        self._abort_cb: Any = None
        self._outputs: frozenset[int] = frozenset()  # rows with logits, last decode
        memory = lib.memory(handle)
        if memory is None:
            self.close()
            raise BatchUnavailable("the batch context has no memory (KV cache)")
        self._memory = memory
        self.limits = BatchLimits(**lib.context_sizes(handle))
        self.n_vocab = lib.n_vocab(lib.vocab(model))

    # -- properties --------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return not self._finalizer.alive

    @property
    def handle(self) -> _ffi.ContextHandle:
        """The ``llama_context *``; ValueError when closed."""
        self._check_open()
        return self._handle

    @property
    def model(self) -> _ffi.ModelHandle:
        """``llama_get_model(ctx)``: the ``Llama``'s model."""
        self._check_open()
        return self._lib.get_model(self._handle)

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise ValueError("the BatchContext is closed")

    # -- memory ------------------------------------------------------------------
    def _seq(self, seq_id: int) -> int:
        n = self.limits.n_seq_max
        if not isinstance(seq_id, int) or isinstance(seq_id, bool) or not 0 <= seq_id < n:
            raise ValueError(f"seq_id={seq_id!r} is out of range: valid is [0, {n})")
        return seq_id

    def clear(self, seq_ids: Iterable[int]) -> None:
        """Remove whole sequences (``llama_memory_seq_rm(mem, s, -1, -1)``); ValueError for an id
        outside [0, n_seq_max) or a closed context."""
        self._check_open()
        for seq_id in seq_ids:
            self._memory.seq_rm(self._seq(seq_id), -1, -1)  # whole sequence: never refused

    def trim(self, seq_id: int, n_keep: int) -> bool:
        """Keep positions [0, n_keep) of ``seq_id`` (``llama_memory_seq_rm(mem, seq_id, n_keep,
        -1)``). False when the memory refused (recurrent or hybrid model): clear it whole then.
        ValueError for an id out of range, ``n_keep`` < 0 or a closed context."""
        self._check_open()
        if not isinstance(n_keep, int) or isinstance(n_keep, bool) or n_keep < 0:
            raise ValueError(f"n_keep={n_keep!r} is out of range: valid is an integer >= 0")
        if n_keep == 0:
            return self._memory.seq_rm(self._seq(seq_id), -1, -1)
        return self._memory.seq_rm(self._seq(seq_id), n_keep, -1)

    def copy_seq(self, src: int, dst: int) -> int:
        """Make ``dst``'s cells a copy of ``src``'s (``llama_state_seq_get_data`` / ``set_data``,
        which work across the streams of a non-unified cache); the bytes copied, 0 on failure.
        ValueError for an id out of range, ``src == dst`` or a closed context; LibraryError when
        the binding lacks ``llama_state_seq_*``."""
        self._require_state_seq()
        src, dst = self._seq(src), self._seq(dst)
        if src == dst:
            raise ValueError(f"copy_seq of seq {src} onto itself")
        return self._lib.copy_seq(self._handle, src, dst)

    def save_seq(self, seq_id: int) -> Any:
        """``seq_id``'s cells in a host buffer (``llama_state_seq_get_data``; ``len()`` is its
        bytes), ``None`` when llama.cpp wrote nothing. Raises as :meth:`copy_seq`."""
        self._require_state_seq()
        return self._lib.save_seq(self._handle, self._seq(seq_id))

    def load_seq(self, seq_id: int, state: Any) -> int:
        """Replace ``seq_id``'s cells with a :meth:`save_seq` state (``llama_state_seq_set_data``);
        the bytes read, 0 when refused. Raises as :meth:`copy_seq`."""
        self._require_state_seq()
        return self._lib.load_seq(self._handle, self._seq(seq_id), state)

    def _require_state_seq(self) -> None:
        """The context is open and the binding has ``llama_state_seq_*``, else raise."""
        self._check_open()
        self._lib.require_state_seq()

    @property
    def is_recurrent(self) -> bool | None:
        """True for a recurrent or hybrid model (its memory cannot be cut back to a position);
        ``None`` when the binding cannot say."""
        self._check_open()
        return self._lib.model_is_recurrent(self._lib.get_model(self._handle))

    def clear_all(self) -> None:
        """Empty the KV cache (``llama_memory_clear(mem, true)``)."""
        self._check_open()
        self._memory.clear(True)

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest position of ``seq_id`` in the KV cache, -1 when empty."""
        self._check_open()
        return self._memory.seq_pos_max(self._seq(seq_id))

    def seq_pos_min(self, seq_id: int) -> int | None:
        """``llama_memory_seq_pos_min``: the smallest position of ``seq_id`` held in every layer
        (window layers included), -1 when empty, ``None`` when the binding cannot say."""
        self._check_open()
        return self._memory.seq_pos_min(self._seq(seq_id))

    @property
    def graphs_reused(self) -> int | None:
        """Ubatches so far that reused llama.cpp's previous compute graph (``llama_perf_context``),
        ``None`` when the binding does not count them."""
        self._check_open()
        return self._lib.graphs_reused(self._handle)

    # -- compute -----------------------------------------------------------------
    def decode(self, batch: LlamaBatch) -> int:
        """``llama_decode`` of ``batch``'s rows; llama.cpp's code (0 = ok,
        :func:`llamabatch.errors.decode_meaning`). ValueError when the context or batch is closed,
        or the batch is empty, holds more than ``limits.n_batch`` tokens or allows ids >=
        ``limits.n_seq_max``."""
        self._check_open()
        n, limits = batch.n_tokens, self.limits
        if not 0 < n <= limits.n_batch:
            raise ValueError(f"batch has {n} tokens: valid is [1, {limits.n_batch}]")
        if batch.n_seq_max > limits.n_seq_max or batch.closed:
            raise ValueError(f"{batch!r} does not fit this context (n_seq_max={limits.n_seq_max})")
        self._outputs = frozenset()
        code = self._hook(n) if self._hook is not None else None
        if code is None:
            code = self._lib.decode(self._handle, batch.native)
            self._lib.synchronize(self._handle)  # computed when this returns, on any device
        if code == 0:
            self._outputs = frozenset(np.flatnonzero(batch.native.logits[:n]).tolist())
        return int(code)

    def check_output(self, i: int) -> None:
        """Raise ``IndexError`` unless row ``i`` requested logits in the last, successful decode
        (``llama_sampler_sample`` on another row asserts and kills the process)."""
        if i not in self._outputs:
            raise IndexError(
                f"batch row {i!r} has no logits from the last decode "
                f"(rows with logits: {sorted(self._outputs)})"
            )

    def logits(self, i: int, *, copy: bool = True) -> np.ndarray:
        """Row ``i``'s logits from the last decode (float32[n_vocab], ``llama_get_logits_ith``):
        a copy, or with ``copy=False`` a view valid until the next decode; IndexError as
        :meth:`check_output`."""
        self._check_open()
        self.check_output(i)
        row = self._lib.logits(self._handle, i, self.n_vocab, copy=copy)
        if row is None:
            raise IndexError(f"llama_get_logits_ith returned NULL for batch row {i}")
        return row

    def set_sampler(self, seq_id: int, chain: _ffi.SamplerHandle | None) -> bool:
        """Attach ``chain`` to ``seq_id`` (llama.cpp samples its rows on the model's device:
        :meth:`llamabatch._ffi.sampling.SamplerChains.attach`), or detach with ``None``; False
        when llama.cpp refused it. ValueError for an id out of range or a closed context."""
        self._check_open()
        return self._lib.samplers.attach(self._handle, self._seq(seq_id), chain)

    def set_abort_callback(self, fn: Callable[[], bool] | None) -> None:
        """Have llama.cpp poll ``fn()`` during compute; True aborts the decode (code 2).
        LibraryError when the binding lacks ``llama_set_abort_callback``."""
        self._check_open()
        self._abort_cb = self._lib.set_abort_callback(self._handle, fn)

    # -- lifetime ----------------------------------------------------------------
    def close(self) -> None:
        """Free the context (``llama_free``); idempotent. The model stays loaded."""
        self._finalizer()

    def __repr__(self) -> str:
        state = "closed" if self.closed else repr(self.limits)
        return f"BatchContext({state})"

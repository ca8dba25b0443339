"""The llama.cpp calls llamabatch makes, over typed handles (one :class:`Library`); each method
names the llama.h function it calls."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from .handles import ContextHandle, ModelHandle, SamplerHandle, VocabHandle, expect
from .memory import MemoryOps, bind_memory
from .resolve import Symbols, import_binding, resolve
from .sampling import SamplerChains
from .views import BatchBuffers

#: Ceiling used when ``llama_max_parallel_sequences`` is absent: ``LLAMA_MAX_SEQ`` of the
#: llama.cpp builds older than that function (it became 256 later).
FALLBACK_MAX_PARALLEL_SEQUENCES = 64

#: Roles a batch context needs (checked before one is created).
BATCH_ROLES = (
    "context_default_params",
    "init_context",
    "free_context",
    "n_ctx",
    "n_seq_max",
    "n_batch",
    "get_model",
    "decode",
    "batch_init",
    "batch_free",
    "get_logits_ith",
    "model_get_vocab",
    "vocab_n_tokens",
    "memory",
)


@functools.lru_cache(maxsize=1)
def load() -> Library:
    """The process-wide :class:`Library` (imports ``llama_cpp.llama_cpp`` once); LibraryError
    when llama-cpp-python is missing or its shared library does not load."""
    module, version = import_binding()
    return Library(module, resolve(module, version))


#: What copying or saving one sequence's cells needs (llama.h ``llama_state_seq_*``).
_STATE_SEQ_ROLES = ("state_seq_get_size", "state_seq_get_data", "state_seq_set_data")


class Library:
    """llama.cpp through the installed binding, with renamed symbols resolved: ``version`` (of
    llama-cpp-python), ``symbols`` (:class:`~.resolve.Symbols`), ``samplers``
    (:class:`SamplerChains`)."""

    def __init__(self, module: Any, symbols: Symbols) -> None:
        self._module = module
        self.version = symbols.version
        self.symbols = symbols
        self.samplers = SamplerChains(symbols, module)
        fn = symbols.fn
        self._decode = fn["decode"]
        self._logits_ith = fn["get_logits_ith"]
        self._is_eog = fn["vocab_is_eog"]

    def require_batching(self) -> None:
        """Raise ``LibraryError`` naming every missing symbol a batch context needs."""
        self.symbols.require(*BATCH_ROLES)

    # -- limits --------------------------------------------------------------------
    def max_parallel_sequences(self) -> int:
        """``llama_max_parallel_sequences()``, else :data:`FALLBACK_MAX_PARALLEL_SEQUENCES`."""
        if self.symbols.has("max_parallel_sequences"):
            return int(self.symbols.fn["max_parallel_sequences"]())
        return FALLBACK_MAX_PARALLEL_SEQUENCES

    # -- contexts ------------------------------------------------------------------
    def context_params(
        self, fields: dict[str, Any], like: Any = None, copy: tuple[str, ...] = ()
    ) -> Any:
        """``llama_context_default_params()`` with ``fields`` set by name, after the fields named in
        ``copy`` were copied from ``like``; fields the installed struct lacks are skipped (e.g.
        ``kv_unified``: the cache was unified before it existed)."""
        params = self.symbols.fn["context_default_params"]()
        have = {name for name, *_ in type(params)._fields_}
        if like is not None:
            like_have = {name for name, *_ in type(like)._fields_}
            for name in copy:
                if name in have and name in like_have:
                    setattr(params, name, getattr(like, name))
        for name, value in fields.items():
            if name in have:
                setattr(params, name, value)
        return params

    def init_context(self, model: ModelHandle, params: Any) -> ContextHandle | None:
        """``llama_init_from_model(model, params)``; ``None`` for NULL."""
        expect(model, ModelHandle)
        ptr = self.symbols.fn["init_context"](model.model, params)
        return ContextHandle(int(ptr)) if ptr else None

    def free_context(self, ctx: ContextHandle) -> None:
        """``llama_free(ctx)``."""
        expect(ctx, ContextHandle)
        self.symbols.fn["free_context"](ctx.ctx)

    def context_sizes(self, ctx: ContextHandle) -> dict[str, int]:
        """``llama_n_ctx``, ``llama_n_ctx_seq`` (else n_ctx // n_seq_max), ``llama_n_seq_max`` and
        ``llama_n_batch`` of ``ctx``."""
        expect(ctx, ContextHandle)
        fn = self.symbols.fn
        n_ctx, n_seq_max = int(fn["n_ctx"](ctx.ctx)), int(fn["n_seq_max"](ctx.ctx))
        n_ctx_seq = (
            int(fn["n_ctx_seq"](ctx.ctx))
            if self.symbols.has("n_ctx_seq")
            else n_ctx // max(n_seq_max, 1)
        )
        return {
            "n_ctx": n_ctx,
            "n_ctx_seq": n_ctx_seq,
            "n_seq_max": n_seq_max,
            "n_batch": int(fn["n_batch"](ctx.ctx)),
        }

    def get_model(self, ctx: ContextHandle) -> ModelHandle:
        """``llama_get_model(ctx)``."""
        expect(ctx, ContextHandle)
        return ModelHandle(int(self.symbols.fn["get_model"](ctx.ctx)))

    def memory(self, ctx: ContextHandle) -> MemoryOps | None:
        """The context's memory (KV cache) operations; ``None`` if it has none."""
        expect(ctx, ContextHandle)
        return bind_memory(self.symbols, ctx.ctx)

    def can_copy_seq(self) -> bool:
        """True when the binding has the ``llama_state_seq_*`` functions."""
        return all(self.symbols.has(r) for r in _STATE_SEQ_ROLES)

    def require_state_seq(self) -> None:
        """Raise ``LibraryError`` naming each missing ``llama_state_seq_*`` function."""
        self.symbols.require(*_STATE_SEQ_ROLES)

    def copy_seq(self, ctx: ContextHandle, src: int, dst: int) -> int:
        """Copy sequence ``src``'s cells (KV or recurrent state) onto ``dst`` (:meth:`save_seq`,
        then :meth:`load_seq`); the bytes copied, 0 when either failed (``dst`` is then unknown)."""
        state = self.save_seq(ctx, src)
        return 0 if state is None else self.load_seq(ctx, dst, state)

    def save_seq(self, ctx: ContextHandle, seq_id: int) -> Any:
        """Sequence ``seq_id``'s cells in a fresh host buffer (``llama_state_seq_get_size`` /
        ``llama_state_seq_get_data``): a ``c_uint8`` array of the bytes written, ``None`` when
        llama.cpp wrote nothing."""
        expect(ctx, ContextHandle)
        fn = self.symbols.fn
        size = int(fn["state_seq_get_size"](ctx.ctx, seq_id))
        if size <= 0:
            return None
        buf = (ctypes.c_uint8 * size)()
        n = int(fn["state_seq_get_data"](ctx.ctx, buf, size, seq_id))
        if n <= 0:
            return None
        return buf if n == size else (ctypes.c_uint8 * n).from_buffer_copy(buf)

    def load_seq(self, ctx: ContextHandle, seq_id: int, state: Any) -> int:
        """``llama_state_seq_set_data``: replace sequence ``seq_id``'s cells (emptied first) with a
        :meth:`save_seq` state of the same model and cache types; the bytes read, 0 when refused
        (``seq_id`` is then unknown)."""
        expect(ctx, ContextHandle)
        return int(self.symbols.fn["state_seq_set_data"](ctx.ctx, state, len(state), seq_id))

    def model_is_recurrent(self, model: ModelHandle) -> bool | None:
        """``llama_model_is_recurrent or llama_model_is_hybrid``: the memory cannot be cut back to a
        position. ``None`` when the binding has neither."""
        expect(model, ModelHandle)
        found = [
            bool(self.symbols.fn[r](model.model))
            for r in ("model_is_recurrent", "model_is_hybrid")
            if self.symbols.has(r)
        ]
        return any(found) if found else None

    def model_n_swa(self, model: ModelHandle) -> int:
        """``llama_model_n_swa``: the sliding window in positions; 0 when none or unknown."""
        expect(model, ModelHandle)
        if not self.symbols.has("model_n_swa"):
            return 0
        return max(0, int(self.symbols.fn["model_n_swa"](model.model)))

    def decode(self, ctx: ContextHandle, buffers: BatchBuffers) -> int:
        """``llama_decode(ctx, batch)``: 0 ok, 1 no KV slot, 2 aborted, -1 invalid, < -1 fatal."""
        return int(self._decode(ctx.ctx, buffers.struct))

    def synchronize(self, ctx: ContextHandle) -> None:
        """``llama_synchronize(ctx)``: wait for the last decode's computation (a GPU backend
        returns from ``llama_decode`` before it ends); a no-op without the symbol."""
        if self.symbols.has("synchronize"):
            self.symbols.fn["synchronize"](ctx.ctx)

    def logits(
        self, ctx: ContextHandle, i: int, n_vocab: int, *, copy: bool = True
    ) -> np.ndarray | None:
        """``llama_get_logits_ith(ctx, i)`` (float32[n_vocab]): a copy, or with ``copy=False`` a
        view valid until the next decode; ``None`` if NULL."""
        expect(ctx, ContextHandle)
        ptr = self._logits_ith(ctx.ctx, i)
        if not ptr:
            return None
        row = np.ctypeslib.as_array(ptr, shape=(n_vocab,))
        return row.copy() if copy else row

    def graphs_reused(self, ctx: ContextHandle) -> int | None:
        """Ubatches of ``ctx`` that reused the previous compute graph
        (``llama_perf_context(ctx).n_reused``); ``None`` when not counted."""
        expect(ctx, ContextHandle)
        if not self.symbols.has("perf_context"):
            return None
        data = self.symbols.fn["perf_context"](ctx.ctx)
        return int(data.n_reused) if hasattr(data, "n_reused") else None

    def set_abort_callback(self, ctx: ContextHandle, fn: Callable[[], bool] | None) -> Any:
        """``llama_set_abort_callback``: llama.cpp calls ``fn()`` during compute and aborts the
        decode (code 2) when it returns True; ``None`` removes it. Returns the C callback, which
        the caller keeps alive while it is set. LibraryError when the symbol is missing."""
        expect(ctx, ContextHandle)
        set_cb = self.symbols.fn["set_abort_callback"]
        if fn is None:
            callback = ctypes.cast(None, self._module.ggml_abort_callback)
        else:
            callback = self._module.ggml_abort_callback(lambda _data: bool(fn()))
        set_cb(ctx.ctx, callback, None)
        return callback

    # -- batches -------------------------------------------------------------------
    def batch_buffers(self, capacity: int) -> BatchBuffers:
        """``llama_batch_init(capacity, 0, 1)`` with numpy views."""
        fn = self.symbols.fn
        return BatchBuffers(fn["batch_init"], fn["batch_free"], capacity)

    # -- vocabulary ----------------------------------------------------------------
    def vocab(self, model: ModelHandle) -> VocabHandle:
        """``llama_model_get_vocab(model)``."""
        expect(model, ModelHandle)
        return VocabHandle(int(self.symbols.fn["model_get_vocab"](model.model)))

    def n_vocab(self, vocab: VocabHandle) -> int:
        """``llama_vocab_n_tokens``: valid token ids are [0, n_vocab)."""
        expect(vocab, VocabHandle)
        return int(self.symbols.fn["vocab_n_tokens"](vocab.vocab))

    def eog_ids(self, vocab: VocabHandle) -> frozenset[int]:
        """Every id with ``llama_vocab_is_eog(vocab, id)``."""
        n_vocab, is_eog, ptr = self.n_vocab(vocab), self._is_eog, vocab.vocab
        return frozenset(t for t in range(n_vocab) if is_eog(ptr, t))

    # -- samplers ------------------------------------------------------------------
    def sample(self, chain: SamplerHandle, ctx: ContextHandle, i: int) -> int:
        """``llama_sampler_sample(chain, ctx, i)``: sample and accept from row ``i``."""
        return self.samplers.sample(chain, ctx, i)

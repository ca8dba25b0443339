"""A ``llama_batch`` from ``llama_batch_init`` with numpy views over its arrays."""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np


class BatchBuffers:
    """The binding's ``llama_batch`` (``struct``, passed to ``llama_decode`` by value) plus
    writable numpy views: ``token``, ``pos``, ``seq_id`` (int32) and ``logits`` (int8, 1 =
    output logits), ``capacity`` rows. ``seq_id[i]`` points into one contiguous block (one
    slice assignment fills a run); the original pointers go back before ``llama_batch_free``.
    MemoryError when ``llama_batch_init`` returned NULL arrays."""

    __slots__ = (
        "struct",
        "capacity",
        "token",
        "pos",
        "seq_id",
        "logits",
        "_finalizer",
        "__weakref__",
    )

    def __init__(
        self, batch_init: Callable[..., Any], batch_free: Callable[..., Any], capacity: int
    ) -> None:
        struct = batch_init(capacity, 0, 1)
        if not (
            struct.token and struct.pos and struct.n_seq_id and struct.seq_id and struct.logits
        ):
            raise MemoryError(f"llama_batch_init({capacity}, 0, 1) returned NULL arrays")
        self.struct = struct
        self.capacity = capacity
        self.token = np.ctypeslib.as_array(struct.token, shape=(capacity,))
        self.pos = np.ctypeslib.as_array(struct.pos, shape=(capacity,))
        self.logits = np.ctypeslib.as_array(struct.logits, shape=(capacity,))
        np.ctypeslib.as_array(struct.n_seq_id, shape=(capacity,))[:] = 1
        self.token[:] = 0
        self.pos[:] = 0
        self.logits[:] = 0

        rows = np.ctypeslib.as_array(
            ctypes.cast(struct.seq_id, ctypes.POINTER(ctypes.c_size_t)), shape=(capacity,)
        )
        original = rows.copy()
        block = np.zeros(capacity, dtype=np.int32)
        rows[:] = block.ctypes.data + np.arange(capacity, dtype=np.uintp) * block.itemsize
        self.seq_id = block
        self._finalizer = weakref.finalize(self, _free, batch_free, struct, rows, original, block)

    def set_n_tokens(self, n_tokens: int) -> None:
        """Write ``llama_batch.n_tokens`` (rows [0, n_tokens) are submitted)."""
        self.struct.n_tokens = n_tokens

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (the views must not be used)."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Restore ``seq_id``'s pointers and ``llama_batch_free`` (idempotent)."""
        self._finalizer()


def _free(
    batch_free: Callable[..., Any],
    struct: Any,
    rows: np.ndarray,
    original: np.ndarray,
    block: np.ndarray,
) -> None:
    rows[:] = original  # the library frees its own per-row buffers, not ``block``
    batch_free(struct)
    del block  # kept alive until the C side no longer points into it

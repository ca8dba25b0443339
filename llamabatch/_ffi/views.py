"""A ``llama_batch`` from ``llama_batch_init`` with numpy views over its arrays.

``llama_batch_init(capacity, 0, 1)`` (llama.h) mallocs ``token``, ``pos``, ``n_seq_id``
and ``logits`` as flat arrays of ``capacity`` items, and ``seq_id`` as ``capacity + 1``
pointers, each to its own ``int32[1]`` buffer, followed by a NULL sentinel that
``llama_batch_free`` walks. To fill ``seq_id[i][0]`` for a whole run with one numpy
slice assignment, :class:`BatchBuffers` points ``seq_id[i]`` at row ``i`` of one
contiguous ``int32[capacity]`` array it owns, and puts the original pointers back
before ``llama_batch_free`` (so the library frees exactly what it allocated).
``n_seq_id`` is 1 for every row, set once: a token carries one sequence id.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np


class BatchBuffers:
    """The binding's ``llama_batch`` struct plus writable numpy views of its arrays.

    Attributes:
        struct: the binding's ``llama_batch`` (pass it to ``llama_decode`` by value;
            its ``n_tokens`` is set by :meth:`set_n_tokens`).
        capacity: rows allocated.
        token, pos, seq_id: ``int32[capacity]`` views (``seq_id`` is the owned block
            that ``struct.seq_id[i]`` points into).
        logits: ``int8[capacity]`` view (1 = output logits for that row).

    Raises:
        MemoryError: ``llama_batch_init`` returned NULL arrays.
    """

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
        """True once :meth:`close` ran (the arrays are freed; the views must not be used)."""
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

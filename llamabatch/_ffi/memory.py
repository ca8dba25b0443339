"""A context's memory (KV cache) operations, across the three names the API has had.

llama.h: ``llama_memory_clear(mem, data)``, ``llama_memory_seq_rm(mem, seq, p0, p1)``,
``llama_memory_seq_pos_max(mem, seq)``, ``llama_memory_seq_pos_min(mem, seq)`` on
``mem = llama_get_memory(ctx)``; before that
``llama_kv_self_*(ctx, ...)`` and ``llama_kv_cache_*(ctx, ...)`` (``clear`` without
``data``). Whole sequences are always removable; a partial removal may be refused on
recurrent models, so llamabatch removes whole sequences only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .resolve import Symbols


@dataclass(frozen=True, slots=True)
class MemoryOps:
    """Memory operations bound to one context.

    Attributes:
        api: the generation used (``"llama_memory"``, ``"llama_kv_self"``,
            ``"llama_kv_cache"``).
        target: the pointer passed first (a ``llama_memory_t``, or the context).
    """

    api: str
    target: int
    _clear: Callable[..., Any]
    _seq_rm: Callable[..., Any]
    _seq_pos_max: Callable[..., Any]
    _seq_pos_min: Callable[..., Any] | None = None

    def clear(self, data: bool = False) -> None:
        """Remove every sequence; ``data`` also zeroes the buffers (``llama_memory_clear``)."""
        if self.api == "llama_memory":
            self._clear(self.target, data)
        else:
            self._clear(self.target)

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of ``seq_id`` (-1 = open end); False if refused."""
        return bool(self._seq_rm(self.target, seq_id, p0, p1))

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest position of ``seq_id`` in memory, -1 when it is empty."""
        return int(self._seq_pos_max(self.target, seq_id))

    def seq_pos_min(self, seq_id: int) -> int | None:
        """Smallest position ``seq_id`` holds in every layer (for a sliding-window cache:
        in its window layers), -1 when it is empty; ``None`` when the binding lacks
        ``llama_memory_seq_pos_min`` for this API generation."""
        if self._seq_pos_min is None:
            return None
        return int(self._seq_pos_min(self.target, seq_id))


def bind_memory(symbols: Symbols, ctx: int) -> MemoryOps | None:
    """The :class:`MemoryOps` of context ``ctx``; ``None`` when it has no memory.

    Raises:
        LibraryError: no memory API generation is complete in the installed binding.
    """
    symbols.require("memory")
    api, get_memory, clear, seq_rm, pos_max = symbols.memory
    target = ctx if get_memory is None else get_memory(ctx)
    if not target:
        return None
    role = {"llama_memory": "memory_seq_pos_min", "llama_kv_self": "kv_self_seq_pos_min"}.get(api)
    pos_min = symbols.fn[role] if role is not None and symbols.has(role) else None
    return MemoryOps(api, int(target), clear, seq_rm, pos_max, pos_min)

"""A context's memory (KV cache) operations across the API's three generations (llama.h):
``llama_memory_*`` on ``llama_get_memory(ctx)``, then ``llama_kv_self_*(ctx, ...)`` and
``llama_kv_cache_*(ctx, ...)``, whose ``clear`` has no ``data``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .resolve import Symbols


@dataclass(frozen=True, slots=True)
class MemoryOps:
    """Memory operations bound to one context: ``api`` is the generation used, ``target`` the
    pointer passed first (a ``llama_memory_t``, or the context)."""

    api: str
    target: int
    _clear: Callable[..., Any]
    _seq_rm: Callable[..., Any]
    _seq_pos_max: Callable[..., Any]
    _seq_pos_min: Callable[..., Any] | None = None

    def clear(self, data: bool = False) -> None:
        """Remove every sequence; ``data`` also zeroes the buffers."""
        if self.api == "llama_memory":
            self._clear(self.target, data)
        else:
            self._clear(self.target)

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        """Remove positions [p0, p1) of ``seq_id`` (-1 = open end); False if refused (a partial
        removal on a recurrent model)."""
        return bool(self._seq_rm(self.target, seq_id, p0, p1))

    def seq_pos_max(self, seq_id: int) -> int:
        """Largest position of ``seq_id`` in memory, -1 when it is empty."""
        return int(self._seq_pos_max(self.target, seq_id))

    def seq_pos_min(self, seq_id: int) -> int | None:
        """Smallest position ``seq_id`` holds in every layer, -1 when empty; ``None`` when the
        binding lacks it for this generation."""
        if self._seq_pos_min is None:
            return None
        return int(self._seq_pos_min(self.target, seq_id))


def bind_memory(symbols: Symbols, ctx: int) -> MemoryOps | None:
    """The :class:`MemoryOps` of ``ctx``, ``None`` when it has no memory; LibraryError when no
    generation is complete in the binding."""
    symbols.require("memory")
    api, get_memory, clear, seq_rm, pos_max = symbols.memory
    target = ctx if get_memory is None else get_memory(ctx)
    if not target:
        return None
    role = {"llama_memory": "memory_seq_pos_min", "llama_kv_self": "kv_self_seq_pos_min"}.get(api)
    pos_min = symbols.fn[role] if role is not None and symbols.has(role) else None
    return MemoryOps(api, int(target), clear, seq_rm, pos_max, pos_min)

"""The KV cache size of a batch context, told before it is allocated
(``BatchGenerator.estimate_memory``; the formula is in :mod:`llamabatch.llamacpp.kv_size`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KvEstimate:
    """KV cache size of a batch context: ``bytes_per_token`` (K and V over all layers),
    ``n_ctx_seq`` (padded to 256, as allocated), ``bytes_per_slot``, ``slots``,
    ``total_bytes``; ``exact`` is False for sliding-window (upper bound), recurrent or hybrid
    models."""

    bytes_per_token: int
    n_ctx_seq: int
    bytes_per_slot: int
    slots: int
    total_bytes: int
    exact: bool

    @property
    def total_mib(self) -> float:
        """``total_bytes`` in MiB (2**20 bytes), as llama.cpp logs it."""
        return self.total_bytes / 2**20

"""``slots="auto"``: the most sequences whose KV cache fits the memory it goes to.

The rule (docs/gpu.md): the largest slot count ``s`` in ``[1, AUTO_MAX_SLOTS]``, no more
than the backend's ``max_slots`` nor ``n_batch``, with ``s * bytes_per_slot <=
AUTO_MEMORY_SHARE * free_bytes`` of :class:`~.backend.SlotMemory`; the other half stays
free for the compute buffers (which grow with ``n_batch``), the ``Llama``'s own context
and other programs. 1 (every item alone) when not even two fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ParameterError
from ..params import AUTO_SLOTS
from .backend import BackendInfo

__all__ = ["AUTO_MAX_SLOTS", "AUTO_MEMORY_SHARE", "SlotsChoice", "choose_slots"]

#: The most slots ``"auto"`` chooses: past 8 sequences the published decode gains of
#: llama-batched-bench flatten while every slot costs its KV cache (docs/performance.md).
AUTO_MAX_SLOTS = 8

#: The share of the free memory the KV cache of ``"auto"`` slots may take.
AUTO_MEMORY_SHARE = 0.5

_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class SlotsChoice:
    """What ``slots="auto"`` chose and why.

    Attributes:
        slots: the slot count chosen (>= 1).
        reason: one sentence for the user: the memory, its free bytes, one slot's KV
            cache and the bound that decided.
    """

    slots: int
    reason: str


def choose_slots(info: BackendInfo, n_ctx_seq: int, n_batch: int) -> SlotsChoice:
    """The ``"auto"`` slot count for sequences of ``n_ctx_seq`` tokens (module rule).

    Raises:
        ParameterError: the backend cannot say how much memory is free
            (``info.slot_memory`` is ``None``): give ``slots`` as a number.
    """
    if info.slot_memory is None:
        raise ParameterError(
            "slots",
            AUTO_SLOTS,
            f'1 to {info.max_slots}: this backend does not report its free memory, "auto" needs it',
        )
    room = info.slot_memory(n_ctx_seq)
    budget = int(room.free_bytes * AUTO_MEMORY_SHARE)
    fit = budget // room.bytes_per_slot if room.bytes_per_slot > 0 else AUTO_MAX_SLOTS
    bounds = {
        f"the bound of {AUTO_MAX_SLOTS}": AUTO_MAX_SLOTS,
        f"llama_max_parallel_sequences() = {info.max_slots}": info.max_slots,
        f"n_batch = {n_batch}": n_batch,
    }
    limit_name, limit = min(bounds.items(), key=lambda kv: kv[1])
    slots = max(1, min(fit, limit))
    if slots < 2:
        slots = 1
    per_slot = room.bytes_per_slot / _MIB
    estimate = "" if room.exact else " (an estimate)"
    why = limit_name if fit >= limit else f"{AUTO_MEMORY_SHARE:.0%} of the free memory"
    reason = (
        f'slots="auto" chose {slots}: {room.free_bytes / _MIB:,.0f} MiB free on {room.where}, '
        f"{per_slot:,.1f} MiB of KV cache per slot of {n_ctx_seq} tokens{estimate}; "
        f"limited by {why}"
    )
    if slots == 1:
        reason += "; every item is completed alone (lower n_ctx_seq to batch)"
    return SlotsChoice(slots, reason)

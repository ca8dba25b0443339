"""The fake backend's memory model: each slot's KV cache, token by token.

A slot's cache is the list of tokens at positions 0, 1, ... ``trim`` cuts it, ``copy``
copies another slot's, ``clear`` empties it, a decode appends to it. A recurrent memory
(``recurrent=True``) refuses a trim to a position inside the cache other than 0
(``llama_memory_seq_rm`` returns false on recurrent and hybrid models) and leaves the
cache unknown (``corrupt``) until it is emptied. A saved state is the cache's tokens as
bytes (and whether it was unknown), so that loading a bad state is caught at the next
decode. No checks here (:mod:`.rules`) and no faults (:mod:`.faults`).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from ..params import SamplingParams
from .records import Tokens


@dataclass(slots=True)
class SlotState:
    """What the fake knows of one slot of the batch context.

    Attributes:
        kv: tokens at positions 0, 1, ...
        started: ``start_seq`` since the last clear.
        corrupt: the cache is unknown (a refused trim, a failed copy or load).
        reply: the reply chosen at the first logits after ``start_seq``.
        n_sampled: tokens sampled since ``start_seq``.
        last: the last sampled token (to be decoded next).
        is_done: sampled an EOG token or its ``max_tokens``-th token.
        sampling: the sampling params of the item started in it.
    """

    kv: list[int] = field(default_factory=list)
    started: bool = False
    corrupt: bool = False
    reply: Tokens | None = None
    n_sampled: int = 0
    last: int = -1
    is_done: bool = False
    sampling: SamplingParams | None = None

    def restart(self, sampling: SamplingParams) -> None:
        """A fresh sampler state for a new item; the cache stays."""
        self.started, self.reply, self.n_sampled = True, None, 0
        self.last, self.is_done, self.sampling = -1, False, sampling


class FakeMemory:
    """The caches of every slot of the fake's batch context.

    Args:
        recurrent: refuse partial trims (see the module doc).
    """

    def __init__(self, recurrent: bool = False) -> None:
        self.recurrent = recurrent
        self.slots: list[SlotState] = []

    def allocate(self, n_seq_max: int) -> None:
        """``n_seq_max`` empty slots."""
        self.slots = [SlotState() for _ in range(n_seq_max)]

    def trim(self, seq_id: int, n_keep: int) -> bool:
        """Keep positions [0, n_keep) of ``seq_id``; False (and the cache unknown) when
        a recurrent memory refuses it."""
        slot = self.slots[seq_id]
        ok = not (self.recurrent and 0 < n_keep < len(slot.kv))
        if ok:
            del slot.kv[n_keep:]
            if n_keep == 0:
                slot.corrupt = False
        else:
            slot.corrupt = True
        return ok

    def copy(self, src: int, dst: int) -> None:
        """``dst``'s cache becomes a copy of ``src``'s."""
        a, b = self.slots[src], self.slots[dst]
        b.kv[:] = a.kv
        b.corrupt = a.corrupt

    def save(self, seq_id: int) -> bytes:
        """The state of ``seq_id``: a byte saying whether it is unknown, then its tokens
        (8 bytes each)."""
        slot = self.slots[seq_id]
        return bytes([slot.corrupt]) + array("q", slot.kv).tobytes()

    @staticmethod
    def is_state(state: object) -> bool:
        """True for something :meth:`save` may have returned."""
        return isinstance(state, bytes) and len(state) % 8 == 1

    def load(self, seq_id: int, state: bytes) -> None:
        """``seq_id``'s cache becomes ``state`` (of :meth:`save`)."""
        slot = self.slots[seq_id]
        slot.corrupt = bool(state[0])
        slot.kv[:] = array("q", state[1:])

    def clear(self, n_seqs: int) -> None:
        """Empty slots [0, n_seqs): they must be started again before a decode."""
        for i in range(n_seqs):
            self.slots[i] = SlotState()

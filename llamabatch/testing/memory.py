"""The fake backend's memory model: each slot's KV cache, token by token, recurrent or with a
sliding window; no checks (:mod:`.rules`) and no faults (:mod:`.faults`) here."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..params import SamplingParams
from .records import Tokens


@dataclass(slots=True)
class SlotState:
    """What the fake knows of one slot: ``kv`` (tokens at positions 0, 1, ...), ``corrupt``
    (the cache is unknown), the item started in it (``sampling``, the ``reply`` chosen at its
    first logits, tokens sampled, ``is_done``), ``win_min`` (the oldest position its window
    layers hold, -1: none) and ``hole`` (positions ``[a, b)`` its window lacked, or ``None``)."""

    kv: list[int] = field(default_factory=list)
    started: bool = False
    corrupt: bool = False
    reply: Tokens | None = None
    n_sampled: int = 0
    last: int = -1
    is_done: bool = False
    sampling: SamplingParams | None = None
    win_min: int = -1
    hole: tuple[int, int] | None = None

    def restart(self, sampling: SamplingParams) -> None:
        """A fresh sampler state for a new item; the cache stays."""
        self.started, self.reply, self.n_sampled = True, None, 0
        self.last, self.is_done, self.sampling = -1, False, sampling

    def seen(self) -> Tokens:
        """The prompt its first logits see: its cache, less any hole."""
        if self.hole is None:
            return tuple(self.kv)
        a, b = self.hole
        return tuple(self.kv[:a] + self.kv[b:])


class FakeMemory:
    """The caches of every slot of the fake's batch context. ``recurrent``: a trim inside the
    cache (not to 0) is refused, as ``llama_memory_seq_rm`` does, and leaves it unknown;
    ``n_swa``: the window layers hold only the last ``n_swa`` positions."""

    def __init__(self, recurrent: bool = False, n_swa: int = 0) -> None:
        self.recurrent = recurrent
        self.n_swa = n_swa
        self.slots: list[SlotState] = []

    def allocate(self, n_seq_max: int) -> None:
        """``n_seq_max`` empty slots."""
        self.slots = [SlotState() for _ in range(n_seq_max)]

    def trim(self, seq_id: int, n_keep: int) -> bool:
        """Keep positions [0, n_keep) of ``seq_id``; False (and the cache unknown) when a recurrent
        memory refuses it."""
        slot = self.slots[seq_id]
        ok = not (self.recurrent and 0 < n_keep < len(slot.kv))
        if ok:
            del slot.kv[n_keep:]
            if n_keep == 0:
                slot.corrupt = False
            if slot.win_min >= n_keep:
                slot.win_min = -1  # the window layers held only removed positions
            if slot.hole is not None and slot.hole[0] >= n_keep:
                slot.hole = None  # what was computed over the hole is gone
        else:
            slot.corrupt = True
        return ok

    def copy(self, src: int, dst: int) -> None:
        """``dst``'s cache becomes a copy of ``src``'s."""
        a, b = self.slots[src], self.slots[dst]
        b.kv[:] = a.kv
        b.corrupt = a.corrupt
        b.win_min, b.hole = a.win_min, a.hole

    def pos_min(self, seq_id: int) -> int:
        """The oldest position slot ``seq_id`` holds in every layer, -1 when it holds none."""
        slot = self.slots[seq_id]
        if not slot.kv:
            return -1
        return slot.win_min if self.n_swa > 0 else 0

    def append(self, seq_id: int, pos: int, tokens: Sequence[int]) -> None:
        """Tokens decoded into ``seq_id`` at ``pos``: note a hole in the window they see, then let
        the window layers drop what no later position sees."""
        slot = self.slots[seq_id]
        slot.kv.extend(tokens)
        if self.n_swa <= 0:
            return
        need = max(0, pos - self.n_swa + 1)  # the first position ``pos`` attends to
        held = slot.win_min if slot.win_min >= 0 else pos
        if pos > 0 and held > need and slot.hole is None:
            slot.hole = (need, held)
        if slot.win_min < 0:
            slot.win_min = pos
        slot.win_min = max(slot.win_min, len(slot.kv) - self.n_swa + 1, 0)

    def save(self, seq_id: int) -> bytes:
        """The state of ``seq_id`` as bytes: whether it is unknown, then ``win_min`` and its tokens
        (8 bytes each), so that loading a bad state is caught at the next decode."""
        slot = self.slots[seq_id]
        return bytes([slot.corrupt]) + array("q", [slot.win_min, *slot.kv]).tobytes()

    @staticmethod
    def is_state(state: object) -> bool:
        """True for something :meth:`save` may have returned."""
        return isinstance(state, bytes) and len(state) % 8 == 1 and len(state) > 1

    def load(self, seq_id: int, state: bytes) -> None:
        """``seq_id``'s cache becomes ``state`` (of :meth:`save`)."""
        slot = self.slots[seq_id]
        slot.corrupt = bool(state[0])
        win_min, *kv = array("q", state[1:])
        slot.kv[:], slot.win_min, slot.hole = kv, win_min, None

    def clear(self, n_seqs: int) -> None:
        """Empty slots [0, n_seqs): they must be started again before a decode."""
        for i in range(n_seqs):
            self.slots[i] = SlotState()

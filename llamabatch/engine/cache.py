"""The prompt cache as data: which tokens each slot's cache holds (:class:`SlotTable`:
the best free slot for a prompt, a slot worth copying) and sequence states kept in host
memory (:class:`HostCache`, llama-server's ``--cache-ram``). docs/engine.md tells how
they are used."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .request import CopyPlan

#: ``holds(slot, n)``: True when ``slot``'s cache can be cut back to its first ``n`` tokens
#: and decoded on (``Backend.apply(CutFloor)``).
Holds = Callable[["Slot", int], bool]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reusable(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """Prompt tokens a cache holding ``cached`` saves: the common prefix, never the
    prompt's last token (decoded again for the reply's first logits)."""
    return min(common_prefix(cached, prompt), len(prompt) - 1)


@dataclass(slots=True)
class Slot:
    """One sequence of the batch context.

    Attributes:
        seq_id: its llama.cpp sequence id.
        cached: the tokens at positions 0, 1, ... of its cache, exactly.
        busy: an item is running in it.
    """

    seq_id: int
    cached: list[int] = field(default_factory=list)
    busy: bool = False


class SlotTable:
    """The ``n_slots`` slots of one batch context and what each one's cache holds."""

    def __init__(self, n_slots: int) -> None:
        self.slots = [Slot(i) for i in range(n_slots)]

    def __len__(self) -> int:
        return len(self.slots)

    def free(self) -> list[Slot]:
        """The slots with no item running, by seq id."""
        return [s for s in self.slots if not s.busy]

    def forget_all(self) -> None:
        """Every cache was emptied (after a failure): forget what they held."""
        for slot in self.slots:
            slot.cached.clear()
            slot.busy = False

    def best_free(
        self, prompt: Sequence[int], holds: Holds | None = None
    ) -> tuple[Slot, int] | None:
        """The free slot whose cache saves ``prompt`` the most tokens (ties: the lowest
        seq id; a cache ``holds`` refuses to cut saves nothing), and how many; ``None``
        when every slot is busy."""
        best: tuple[Slot, int] | None = None
        for slot in self.free():
            n = reusable(slot.cached, prompt)
            if 0 < n < len(slot.cached) and holds is not None and not holds(slot, n):
                n = 0
            if best is None or n > best[1]:
                best = (slot, n)
        return best

    def copy_source(
        self,
        prompt: Sequence[int],
        dst: Slot,
        n_own: int,
        planned: Mapping[int, Sequence[int]],
        min_gain: int,
        partial_trim: bool,
        holds: Holds | None = None,
    ) -> CopyPlan | None:
        """The slot other than ``dst`` (whose own cache saves ``n_own``) sharing the
        longest prefix with ``prompt``, at least ``min_gain`` more (ties: the lowest seq
        id), or ``None``.

        Args:
            planned: seq id -> the tokens a busy slot will hold once prefilled.
            partial_trim: the memory can be cut back; without, a source must hold, or
                come to hold, exactly the shared prefix.
            holds: an idle source it refuses to cut back to the prefix does not qualify.
        """
        best: CopyPlan | None = None
        for slot in self.slots:
            if slot is dst:
                continue
            tokens = planned.get(slot.seq_id, slot.cached)
            n = reusable(tokens, prompt)
            if n - n_own < min_gain or n == 0:
                continue
            if not partial_trim and len(slot.cached) > n:
                continue  # already past the shared prefix: cannot cut back
            idle = not slot.busy and slot.seq_id not in planned
            if idle and holds is not None and n < len(slot.cached) and not holds(slot, n):
                continue  # its window moved past the shared prefix
            if best is None or n > best.n_tokens:
                best = CopyPlan(slot.seq_id, n)
        return best


@dataclass(frozen=True, slots=True)
class SavedState:
    """One saved sequence state.

    Attributes:
        tokens: the tokens at positions 0, 1, ... of the saved cache, exactly.
        state: what ``Backend.apply(Save)`` returned.
        n_bytes: its size (counted against the limit).
        floor: its ``CutFloor`` when saved: it is cut back only to a length >= floor.
    """

    tokens: tuple[int, ...]
    state: object
    n_bytes: int
    floor: int = 0

    def serves(self, n: int) -> bool:
        """True when this state, loaded and cut back to its first ``n`` tokens, can be
        decoded on."""
        return n <= 0 or n >= len(self.tokens) or n >= self.floor


class HostCache:
    """Saved sequence states, least recently used first out.

    Args:
        limit_bytes: most bytes kept (>= 0; 0 keeps nothing); a larger state is not kept.
    """

    def __init__(self, limit_bytes: int) -> None:
        if not isinstance(limit_bytes, int) or limit_bytes < 0:
            raise ValueError(
                f"limit_bytes={limit_bytes!r} is out of range: valid is an integer >= 0"
            )
        self.limit_bytes = limit_bytes
        self._states: OrderedDict[tuple[int, ...], SavedState] = OrderedDict()
        self.n_bytes = 0

    def __len__(self) -> int:
        return len(self._states)

    @property
    def enabled(self) -> bool:
        return self.limit_bytes > 0

    def covers(self, tokens: Sequence[int]) -> bool:
        """True when a kept state holds ``tokens`` as (a prefix of) its own and can be cut
        back to them: saving ``tokens`` would add nothing."""
        n = len(tokens)
        return any(
            len(s.tokens) >= n and common_prefix(s.tokens, tokens) == n and s.serves(n)
            for s in self._states.values()
        )

    def add(self, tokens: Sequence[int], state: object, n_bytes: int, floor: int = 0) -> bool:
        """Keep ``state`` (a cache holding exactly ``tokens``); drop the states it serves
        (whose tokens are a prefix of ``tokens``), then the least recently used until it
        fits.

        Returns:
            False when nothing was kept (too large, empty, or already covered).
        """
        key = tuple(tokens)
        if not key or n_bytes > self.limit_bytes or self.covers(key):
            return False
        new = SavedState(key, state, n_bytes, floor)
        served = [k for k in self._states if common_prefix(k, key) == len(k) and new.serves(len(k))]
        for old in served:
            self._drop(old)
        while self._states and self.n_bytes + n_bytes > self.limit_bytes:
            self._drop(next(iter(self._states)))
        self._states[key] = new
        self.n_bytes += n_bytes
        return True

    def best(self, prompt: Sequence[int], partial_trim: bool) -> tuple[SavedState, int] | None:
        """The kept state that saves ``prompt`` the most tokens, and how many (never the
        prompt's last token); marked as used.

        Args:
            partial_trim: the memory can be cut back; without (recurrent / hybrid) only a
                state whose every token is a prefix of ``prompt`` qualifies.
        """
        best: tuple[SavedState, int] | None = None
        limit = len(prompt) - 1
        for saved in reversed(self._states.values()):
            n = min(common_prefix(saved.tokens, prompt), limit)
            if n <= 0 or (not partial_trim and n != len(saved.tokens)) or not saved.serves(n):
                continue
            if best is None or n > best[1]:
                best = (saved, n)
        if best is not None:
            self._states.move_to_end(best[0].tokens)
        return best

    def clear(self) -> None:
        """Forget every state."""
        self._states.clear()
        self.n_bytes = 0

    def _drop(self, key: tuple[int, ...]) -> None:
        self.n_bytes -= self._states.pop(key).n_bytes

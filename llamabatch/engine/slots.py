"""The prompt cache's bookkeeping: which tokens each slot's KV cache holds.

Pure Python. A slot is one sequence of the batch context; it keeps its cache after its
item ends, so the next item placed there only prefills what differs (llama-server's
``cache_prompt``; ``Llama`` does the same with its one sequence). The engine tells the
table every change it makes to a cache (decoded tokens, trims, copies, clears); the
table answers two questions: which free slot shares the most with a prompt, and which
other slot holds (or will soon hold) a longer shared prefix worth copying.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

#: ``holds(slot, n)``: True when ``slot``'s cache can be cut back to its first ``n`` tokens
#: and decoded on (a sliding-window model may have lost their window:
#: :func:`llamabatch.engine.window.window_holds`).
Holds = Callable[["Slot", int], bool]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reusable(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """Prompt tokens a cache holding ``cached`` saves: the common prefix, but never the
    prompt's last token (it must be decoded again to get the logits of the reply's
    first token)."""
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


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """Copy slot ``src``'s cache into the new item's slot once ``src`` holds ``n_tokens``
    prompt tokens shared with the item, then keep those ``n_tokens``."""

    src: int
    n_tokens: int


class SlotTable:
    """The slots of one batch context and what each one's cache holds.

    Args:
        n_slots: sequences of the batch context (``n_seq_max``).
    """

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
        """The free slot whose cache saves ``prompt`` the most tokens, and how many
        (ties: the lowest seq id); ``None`` when every slot is busy.

        Args:
            holds: when given, a cache that cannot be cut back to the shared prefix
                (``holds(slot, n)`` False) saves nothing.
        """
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
        exact: bool,
        holds: Holds | None = None,
    ) -> CopyPlan | None:
        """A slot other than ``dst`` worth copying for ``prompt``, or ``None``.

        Args:
            prompt: the new item's tokens.
            dst: the slot the item goes to; its own cache saves ``n_own`` tokens.
            planned: seq id -> the tokens a busy slot will hold once its prompt is
                prefilled (a slot absent from it holds its ``cached`` tokens).
            min_gain: copy only when it saves at least this many more tokens.
            exact: the memory cannot be cut back (recurrent / hybrid models): only a
                source that holds, or will hold at some point, exactly the shared
                prefix and nothing beyond it qualifies.
            holds: when given, an idle source whose cache cannot be cut back to the
                shared prefix (``holds(slot, n)`` False) does not qualify (a busy one is
                checked when the copy is made).

        Returns:
            the source with the longest shared prefix (ties: the lowest seq id).
        """
        best: CopyPlan | None = None
        for slot in self.slots:
            if slot is dst:
                continue
            tokens = planned.get(slot.seq_id, slot.cached)
            n = reusable(tokens, prompt)
            if n - n_own < min_gain or n == 0:
                continue
            if exact and len(slot.cached) > n:
                continue  # already past the shared prefix: cannot cut back
            idle = not slot.busy and slot.seq_id not in planned
            if idle and holds is not None and n < len(slot.cached) and not holds(slot, n):
                continue  # its window moved past the shared prefix
            if best is None or n > best.n_tokens:
                best = CopyPlan(slot.seq_id, n)
        return best

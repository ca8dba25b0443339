"""The prompt cache as data: which tokens each slot's cache holds and which request runs
in it (:class:`SlotTable`: the best free slot for a prompt, a slot worth copying, the
:class:`Placement` of each running request) and sequence states kept in host memory
(:class:`HostCache`, llama-server's ``--cache-ram``). docs/engine.md tells how they are
used."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING

from .backend import SeqState

if TYPE_CHECKING:
    from .request import Request, Run

#: ``holds(slot, n)``: True when ``slot``'s cache can be cut back to its first ``n`` tokens
#: and decoded on (``Backend.cut_floor``, ``BackendInfo.partial_trim``).
Holds = Callable[["Slot", int], bool]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences.

    Two lists or two tuples are compared a slice at a time (doubling, then halving), so
    the cost is C comparisons of the shared prefix plus O(log n) Python steps."""
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    if type(a) is not type(b) or not isinstance(a, (list, tuple)):
        a, b = tuple(islice(a, n)), tuple(islice(b, n))
    lo, step = 1, 8  # a[:lo] == b[:lo]
    while True:
        hi = min(lo + step, n)
        if a[lo:hi] != b[lo:hi]:
            break
        if hi == n:
            return n
        lo, step = hi, 2 * step
    while hi - lo > 1:  # a[:lo] == b[:lo], a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


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
    """

    seq_id: int
    cached: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CopyPlan:
    """Copy slot ``src``'s cache once it holds ``n_tokens`` shared tokens, keep those."""

    src: int
    n_tokens: int


@dataclass(slots=True, eq=False)
class Placement:
    """A request running in a slot, and the engine's plans for that slot's cache.

    Attributes:
        req: the request; slot: its slot; run: what it wants of the slot now.
        fed: prompt tokens the cache has held (reused, copied or prefilled).
        copy: the copy of another slot's prefix it waits for (nothing of its run is decoded
            meanwhile), or ``None``.
        breaks: prompt lengths where a prefill call must stop (so another slot can copy
            exactly there).
        checkpoint: a saved state ``(state, tokens)`` to come back to, or ``None``.
    """

    req: Request
    slot: Slot
    run: Run
    fed: int = 0
    copy: CopyPlan | None = None
    breaks: set[int] = field(default_factory=set)
    checkpoint: tuple[SeqState, list[int]] | None = None


class SlotTable:
    """The ``n_slots`` slots of one batch context, what each one's cache holds and which
    request runs in it.

    Attributes:
        placed: seq id -> the placement running there, in placement order (a request is in
            a slot exactly while its placement is here).
    """

    def __init__(self, n_slots: int) -> None:
        self.slots = [Slot(i) for i in range(n_slots)]
        self.placed: dict[int, Placement] = {}

    def __len__(self) -> int:
        return len(self.slots)

    def free(self) -> list[Slot]:
        """The slots with no request running, by seq id."""
        return [s for s in self.slots if s.seq_id not in self.placed]

    def place(self, req: Request, slot: Slot, run: Run) -> Placement:
        """``req`` runs in the free ``slot`` from now on, its first ``run``."""
        p = self.placed[slot.seq_id] = Placement(req, slot, run)
        return p

    def forget_all(self) -> None:
        """Every cache was emptied (after a failure): forget what they held."""
        for slot in self.slots:
            slot.cached.clear()
        self.placed.clear()

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
        holds: Holds | None = None,
    ) -> CopyPlan | None:
        """The slot other than ``dst`` (whose own cache saves ``n_own``) sharing the
        longest prefix with ``prompt``, at least ``min_gain`` more (ties: the lowest seq
        id), or ``None``.

        Args:
            planned: seq id -> the tokens a busy slot will hold once prefilled.
            holds: a source already past the shared prefix qualifies only where it can be
                cut back to it.
        """
        best: CopyPlan | None = None
        for slot in self.slots:
            if slot is dst:
                continue
            tokens = planned.get(slot.seq_id, slot.cached)
            n = reusable(tokens, prompt)
            if n - n_own < min_gain or n == 0:
                continue
            if n < len(slot.cached) and holds is not None and not holds(slot, n):
                continue
            if best is None or n > best.n_tokens:
                best = CopyPlan(slot.seq_id, n)
        return best


@dataclass(frozen=True, slots=True)
class SavedState:
    """One saved sequence state.

    Attributes:
        tokens: the tokens at positions 0, 1, ... of the saved cache, exactly.
        state: what ``Backend.save_seq`` returned (its ``nbytes`` count against the limit).
        floor: where its slot could be cut back to when saved (``Backend.cut_floor``; the
            whole length on a memory that takes no partial trim): it is cut back only to a
            length >= floor.
    """

    tokens: tuple[int, ...]
    state: SeqState
    floor: int = 0

    def serves(self, n: int) -> bool:
        """True when this state, loaded and cut back to its first ``n`` tokens, can be
        decoded on."""
        return n <= 0 or n >= len(self.tokens) or n >= self.floor


class HostCache:
    """Saved sequence states, least recently used first out.

    The states' tokens are also kept sorted, so the ones sharing a prefix with a prompt
    are found by bisection (``O(log n)`` comparisons, not a scan of every state): the
    tokens with prefix ``p`` form one run of the sorted list, and the longest common
    prefix with a prompt is found beside the prompt's place in it.

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
        self._sorted: list[tuple[int, ...]] = []  # the keys of _states, sorted
        self._used: dict[tuple[int, ...], int] = {}  # key -> when last added or used
        self._clock = 0
        self.n_bytes = 0

    def __len__(self) -> int:
        return len(self._states)

    @property
    def enabled(self) -> bool:
        return self.limit_bytes > 0

    def _run(self, prefix: tuple[int, ...]) -> tuple[int, int]:
        """The slice of the sorted keys that start with ``prefix`` (non-empty)."""
        keys = self._sorted
        lo = bisect_left(keys, prefix)
        return lo, bisect_left(keys, prefix[:-1] + (prefix[-1] + 1,), lo)

    def covers(self, tokens: Sequence[int]) -> bool:
        """True when a kept state holds ``tokens`` as (a prefix of) its own and can be cut
        back to them: saving ``tokens`` would add nothing."""
        key = tuple(tokens)
        if not key:
            return bool(self._states)
        lo, hi = self._run(key)
        n, states = len(key), self._states
        return any(states[k].serves(n) for k in self._sorted[lo:hi])

    def add(self, tokens: Sequence[int], state: SeqState, floor: int = 0) -> bool:
        """Keep ``state`` (a cache holding exactly ``tokens``); drop the states it serves
        (whose tokens are a prefix of ``tokens``), then the least recently used until it
        fits.

        Returns:
            False when nothing was kept (too large, empty, or already covered).
        """
        key, n_bytes = tuple(tokens), state.nbytes
        if not key or n_bytes > self.limit_bytes or self.covers(key):
            return False
        new = SavedState(key, state, floor)
        for old in self._prefixes(key):
            if new.serves(len(old)):
                self._drop(old)
        while self._states and self.n_bytes + n_bytes > self.limit_bytes:
            self._drop(next(iter(self._states)))
        self._states[key] = new
        insort(self._sorted, key)
        self._touch(key)
        self.n_bytes += n_bytes
        return True

    def _prefixes(self, key: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The kept keys that are prefixes of ``key`` (``key`` itself included)."""
        keys, found, bound = self._sorted, [], key
        while bound:
            j = bisect_right(keys, bound)
            if j == 0:
                break
            k = keys[j - 1]  # the largest key <= bound: no prefix of bound is longer than
            c = common_prefix(k, bound)  # what k shares with it
            if c == len(k):
                found.append(k)
                bound = k[:-1]
            else:
                bound = bound[:c]
        return found

    def best(self, prompt: Sequence[int]) -> tuple[SavedState, int] | None:
        """The kept state that saves ``prompt`` the most tokens once cut back (never the
        prompt's last token; ties: the most recently used), and how many; marked as used."""
        goal = tuple(prompt[: len(prompt) - 1])  # what a state may save
        keys, states, used = self._sorted, self._states, self._used
        if not goal or not keys:
            return None
        i = bisect_left(keys, goal)
        lo = hi = i  # keys[lo:hi] were looked at: every key sharing more than n
        n = max(self._shared(lo - 1, goal), self._shared(hi, goal))
        while n > 0:  # each round: the keys sharing exactly n tokens with goal
            new_lo, new_hi = self._run(goal[:n])
            fresh = keys[new_lo:lo] + keys[hi:new_hi]
            ok = [k for k in fresh if states[k].serves(n)]
            if ok:
                key = max(ok, key=used.__getitem__)
                states.move_to_end(key)
                self._touch(key)
                return states[key], n
            lo, hi = new_lo, new_hi
            n = max(self._shared(lo - 1, goal), self._shared(hi, goal))
        return None

    def _shared(self, i: int, goal: tuple[int, ...]) -> int:
        """Tokens the ``i``-th sorted key shares with ``goal`` (0 outside the list)."""
        keys = self._sorted
        return common_prefix(keys[i], goal) if 0 <= i < len(keys) else 0

    def _touch(self, key: tuple[int, ...]) -> None:
        self._clock += 1
        self._used[key] = self._clock

    def clear(self) -> None:
        """Forget every state."""
        self._states.clear()
        self._sorted.clear()
        self._used.clear()
        self.n_bytes = 0

    def _drop(self, key: tuple[int, ...]) -> None:
        self.n_bytes -= self._states.pop(key).state.nbytes
        del self._used[key]
        del self._sorted[bisect_left(self._sorted, key)]

"""Prompt states kept in host memory, for prefixes no slot holds any more.

Pure Python. When an item is placed in a slot whose cache shares less than half of what
it holds, the slot's cache is about to be mostly thrown away; the engine first saves the
sequence's state (``llama_state_seq_get_data``) here with the tokens it holds. A later
item whose prompt shares a longer prefix with a saved state than with any free slot gets
that state loaded into its slot (``llama_state_seq_set_data``) and prefills only the rest.

This is what llama-server's host-memory prompt cache does (``--cache-ram``, default
8192 MiB, llama.cpp PR 16391: a slot is saved when a new task keeps less than half of it,
``f_keep < 0.5``): a backlog that alternates between a few prompt templates (several
taggers sharing one model, or a job that interleaves item kinds) keeps each template's
shared instructions without prefilling them again. Loading a state costs about what
copying one between slots costs, a small fraction of prefilling it again (measured in
docs/engine.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .slots import common_prefix


@dataclass(frozen=True, slots=True)
class SavedState:
    """One saved sequence state.

    Attributes:
        tokens: the tokens at positions 0, 1, ... of the saved cache, exactly.
        state: what the backend's ``save_seq`` returned (bytes for llama.cpp).
        n_bytes: size of ``state`` in bytes (counted against the limit).
    """

    tokens: tuple[int, ...]
    state: object
    n_bytes: int


class HostCache:
    """Saved sequence states, least recently used first out.

    Args:
        limit_bytes: most bytes of states kept (>= 0; 0 keeps nothing). A state larger
            than the limit is not kept.
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
        """True when a kept state already holds ``tokens`` as (a prefix of) its own, so
        saving ``tokens`` would add nothing."""
        n = len(tokens)
        return any(
            len(s.tokens) >= n and common_prefix(s.tokens, tokens) == n
            for s in self._states.values()
        )

    def add(self, tokens: Sequence[int], state: object, n_bytes: int) -> bool:
        """Keep ``state`` (the cache holding exactly ``tokens``); drop the states whose
        tokens are a prefix of ``tokens`` (this one serves every prompt they served),
        then the least recently used ones until it fits.

        Returns:
            False when nothing was kept (too large, empty, or already covered).
        """
        key = tuple(tokens)
        if not key or n_bytes > self.limit_bytes or self.covers(key):
            return False
        for old in [k for k in self._states if common_prefix(k, key) == len(k)]:
            self._drop(old)
        while self._states and self.n_bytes + n_bytes > self.limit_bytes:
            self._drop(next(iter(self._states)))
        self._states[key] = SavedState(key, state, n_bytes)
        self.n_bytes += n_bytes
        return True

    def best(self, prompt: Sequence[int], exact: bool) -> tuple[SavedState, int] | None:
        """The kept state that saves ``prompt`` the most tokens, and how many (never the
        prompt's last token, which must be decoded for the reply's first logits).

        Args:
            exact: the memory cannot be cut back to a position (recurrent / hybrid
                models): only a state whose every token is a prefix of ``prompt``
                qualifies.

        Returns:
            ``None`` when no state shares a token with ``prompt``; otherwise the best
            one (ties: the most recently used) is marked as used.
        """
        best: tuple[SavedState, int] | None = None
        limit = len(prompt) - 1
        for saved in reversed(self._states.values()):
            n = min(common_prefix(saved.tokens, prompt), limit)
            if n <= 0 or (exact and n != len(saved.tokens)):
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

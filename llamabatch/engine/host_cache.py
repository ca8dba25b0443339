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
shared instructions without prefilling them again. A state of a sliding-window model
(``n_swa`` > 0, ``swa_full=False``) holds only the last window of its window layers: it
serves a shorter prefix than its own only where that window still holds what the
prefix's next position attends to (:func:`~llamabatch.engine.window.window_holds`, from
the ``pos_min`` saved with it). Loading a state costs about what
copying one between slots costs: ~2 ms for the 9.2 MB state of a 400-token SmolLM2-135M
sequence, against ~1.2 s to prefill it on a 2-core CPU (docs/engine.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .slots import common_prefix
from .window import window_holds


@dataclass(frozen=True, slots=True)
class SavedState:
    """One saved sequence state.

    Attributes:
        tokens: the tokens at positions 0, 1, ... of the saved cache, exactly.
        state: what the backend's ``save_seq`` returned (bytes for llama.cpp).
        n_bytes: size of ``state`` in bytes (counted against the limit).
        pos_min: the oldest position the saved sequence held in every layer
            (``llama_memory_seq_pos_min`` when it was saved; ``None`` when unknown).
    """

    tokens: tuple[int, ...]
    state: object
    n_bytes: int
    pos_min: int | None = 0

    def serves(self, n: int, n_swa: int) -> bool:
        """True when this state, loaded and cut back to its first ``n`` tokens, can be
        decoded on (its window layers still hold what position ``n`` attends to)."""
        return window_holds(n, len(self.tokens), self.pos_min, n_swa)


class HostCache:
    """Saved sequence states, least recently used first out.

    Args:
        limit_bytes: most bytes of states kept (>= 0; 0 keeps nothing). A state larger
            than the limit is not kept.
        n_swa: the model's sliding window in positions (``llama_model_n_swa``), 0 when
            its cache keeps every position (no window, or ``swa_full``).
    """

    def __init__(self, limit_bytes: int, n_swa: int = 0) -> None:
        if not isinstance(limit_bytes, int) or limit_bytes < 0:
            raise ValueError(
                f"limit_bytes={limit_bytes!r} is out of range: valid is an integer >= 0"
            )
        self.limit_bytes = limit_bytes
        self.n_swa = n_swa
        self._states: OrderedDict[tuple[int, ...], SavedState] = OrderedDict()
        self.n_bytes = 0

    def __len__(self) -> int:
        return len(self._states)

    @property
    def enabled(self) -> bool:
        return self.limit_bytes > 0

    def covers(self, tokens: Sequence[int]) -> bool:
        """True when a kept state already holds ``tokens`` as (a prefix of) its own and
        can be cut back to them, so saving ``tokens`` would add nothing."""
        n = len(tokens)
        return any(
            len(s.tokens) >= n and common_prefix(s.tokens, tokens) == n and s.serves(n, self.n_swa)
            for s in self._states.values()
        )

    def add(
        self, tokens: Sequence[int], state: object, n_bytes: int, pos_min: int | None = 0
    ) -> bool:
        """Keep ``state`` (the cache holding exactly ``tokens``, ``pos_min`` its oldest
        position held in every layer); drop the states whose tokens are a prefix of
        ``tokens`` that this one serves (every prompt they served), then the least
        recently used ones until it fits.

        Returns:
            False when nothing was kept (too large, empty, or already covered).
        """
        key = tuple(tokens)
        if not key or n_bytes > self.limit_bytes or self.covers(key):
            return False
        new = SavedState(key, state, n_bytes, pos_min)
        for old in [
            k
            for k in self._states
            if common_prefix(k, key) == len(k) and new.serves(len(k), self.n_swa)
        ]:
            self._drop(old)
        while self._states and self.n_bytes + n_bytes > self.limit_bytes:
            self._drop(next(iter(self._states)))
        self._states[key] = new
        self.n_bytes += n_bytes
        return True

    def best(self, prompt: Sequence[int], exact: bool) -> tuple[SavedState, int] | None:
        """The kept state that saves ``prompt`` the most tokens, and how many (never the
        prompt's last token, which must be decoded for the reply's first logits).

        Args:
            exact: the memory cannot be cut back to a position (recurrent / hybrid
                models): only a state whose every token is a prefix of ``prompt``
                qualifies. A state whose window no longer holds the shared prefix's end
                (:meth:`SavedState.serves`) never does.

        Returns:
            ``None`` when no state shares a token with ``prompt``; otherwise the best
            one (ties: the most recently used) is marked as used.
        """
        best: tuple[SavedState, int] | None = None
        limit = len(prompt) - 1
        for saved in reversed(self._states.values()):
            n = min(common_prefix(saved.tokens, prompt), limit)
            if n <= 0 or (exact and n != len(saved.tokens)) or not saved.serves(n, self.n_swa):
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

"""The caller's ``Llama`` for items completed alone: its own context as rows to sample
from (:class:`LlamaRows`), and what completing items on it changes (its KV cache, the
settings its next output reads), put back (:class:`LlamaGuard`; docs/reliability.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _ffi
from ..engine.cache import common_prefix
from ..errors import BackendError


class LlamaGuard:
    """Saves what of a ``Llama`` shapes its later output: an exact copy of its cache
    (:func:`llamabatch._ffi.snapshot_llm`; where none can be taken, the cache is cut back to the
    caller's own tokens instead) and its settings (:data:`~llamabatch._ffi.LLM_SETTINGS`), and
    puts back only what llamabatch changed: the caller's own changes made between llamabatch's
    uses (another thread's ``create_completion`` advancing the seed, a ``set_seed``) stand.

    Use: ``guard = LlamaGuard(llm)`` before touching it, ``guard.restore()`` after (in a
    ``finally``; a second call does nothing). Items alone in between: :meth:`begin` before each
    but the first, :meth:`restore_settings` after each; when :meth:`is_current` is False the
    caller used the ``Llama`` since, and a new guard is due instead (this one's copy is stale).
    Each use runs under ``llm_lock(llm)``, so what changed during it is llamabatch's doing."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self._found: dict[str, Any] | None = _ffi.llm_settings(llm)  # at the use's start
        self._cached = _ffi.llm_cached_tokens(llm)
        self._left: list[int] | None = None  # the cache as the last use left it
        self._snapshot = _ffi.snapshot_llm(llm)
        self._restored = False

    def begin(self) -> None:
        """Start another use (an item alone): its settings as found now."""
        self._found = _ffi.llm_settings(self._llm)

    def is_current(self) -> bool:
        """True unless the ``Llama``'s cache differs from what the last use left: the caller
        used it since, so its state now is the caller's own."""
        return self._left is None or _ffi.llm_cached_tokens(self._llm) == self._left

    def restore_settings(self) -> None:
        """End a use: put back the settings it changed, leaving the cache for the next item
        alone to reuse; :meth:`restore` must still follow."""
        found, self._found = self._found, None
        if self._restored or found is None or not _ffi.is_loaded(self._llm):
            return
        _put_back(self._llm, found)
        self._left = _ffi.llm_cached_tokens(self._llm)

    def restore(self) -> None:
        """Put back the caller's cache and the settings of a use not yet ended; the ``Llama``
        decodes its last token again before it samples (its logits are ours), as llama-cpp-python
        does after ``load_state``."""
        if self._restored:
            return
        self._restored = True
        llm = self._llm
        if not _ffi.is_loaded(llm):  # Llama.close() in between: nothing left to restore
            return
        found, self._found = self._found, None
        snapshot, self._snapshot = self._snapshot, None
        if snapshot is not None:
            _ffi.restore_llm(llm, snapshot)  # sets _requires_eval: the logits are ours
            evaluated = True
        else:
            now = _ffi.llm_cached_tokens(llm)
            evaluated = now != self._cached
            if evaluated:
                _ffi.cut_llm_cache(llm, common_prefix(self._cached, now))
        if found is not None:
            _put_back(llm, found, logits_are_callers=not evaluated)


def _put_back(llm: Any, found: dict[str, Any], *, logits_are_callers: bool = False) -> None:
    """Set back each of ``found`` (:func:`~llamabatch._ffi.llm_settings`) that is no longer the
    same object; ``_requires_eval`` becomes True (the logits in the context are llamabatch's)
    unless ``logits_are_callers``, then its found value."""
    now = _ffi.llm_settings(llm)
    changed = {k: v for k, v in found.items() if k != "_requires_eval" and now.get(k) is not v}
    if "_requires_eval" in found:
        changed["_requires_eval"] = found["_requires_eval"] if logits_are_callers else True
    _ffi.set_llm_settings(llm, changed)


class LlamaRows:
    """The ``Llama``'s own context as the rows a :class:`~.sampler.SeqSampler` samples from:
    row ``-1``, the last token of its last decode (``Llama.eval`` asks logits for it).

    Raises:
        IndexError: another row (``check_output``).
        BackendError: llama.cpp has no logits there, or the ``Llama`` was closed.
    """

    def __init__(self, llm: Any, n_vocab: int) -> None:
        self._llm, self._n_vocab = llm, n_vocab

    @property
    def handle(self) -> _ffi.ContextHandle:
        """The ``Llama``'s context (read anew: it is freed by ``Llama.close()``)."""
        ctx = _ffi.context_of(self._llm) if _ffi.is_loaded(self._llm) else None
        if ctx is None:
            raise BackendError("the Llama was closed (Llama.close()); its context is freed")
        return ctx

    def check_output(self, i: int) -> None:
        """Row ``i`` is the last one (``-1``), the only one with logits."""
        if i != -1:
            raise IndexError(f"row {i} of the Llama's context has no logits: only -1 has")

    def logits(self, i: int, *, copy: bool = True) -> np.ndarray:
        """The last row's logits (float32[n_vocab]), a copy or a view until the next decode."""
        self.check_output(i)
        row = _ffi.load().logits(self.handle, -1, self._n_vocab, copy=copy)
        if row is None:
            raise BackendError("llama_get_logits_ith returned NULL for the Llama's last row")
        return row

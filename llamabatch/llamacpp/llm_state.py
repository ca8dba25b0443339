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
    """Saves what of a ``Llama`` shapes its later output: its settings and an exact copy of its
    cache (:func:`llamabatch._ffi.snapshot_llm`; where none can be taken, the cache is cut
    back to the caller's own tokens instead).

    Use: ``guard = LlamaGuard(llm)`` before touching it, ``guard.restore()`` after (in a
    ``finally``; a second call does nothing); :meth:`restore_settings` between items alone."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self._settings = _ffi.llm_settings(llm)
        self._cached = _ffi.llm_cached_tokens(llm)
        self._snapshot = _ffi.snapshot_llm(llm)
        self._restored = False

    def restore_settings(self) -> None:
        """Put back the settings only, leaving the cache for the next item alone to reuse;
        :meth:`restore` must still follow."""
        if self._restored or not _ffi.is_loaded(self._llm):
            return
        settings = dict(self._settings)
        if settings.pop("_requires_eval", None) is not None:
            settings["_requires_eval"] = True  # the logits are not the caller's
        _ffi.set_llm_settings(self._llm, settings)

    def restore(self) -> None:
        """Put back the settings and the caller's cache; the ``Llama`` decodes its last token again
        before it samples (its logits are ours), as llama-cpp-python does after ``load_state``."""
        if self._restored:
            return
        self._restored = True
        llm = self._llm
        if not _ffi.is_loaded(llm):  # Llama.close() in between: nothing left to restore
            return
        snapshot, self._snapshot = self._snapshot, None
        if snapshot is not None:
            _ffi.restore_llm(llm, snapshot)
            self._settings.pop("_requires_eval", None)  # the logits are ours: re-evaluate
        else:
            now = _ffi.llm_cached_tokens(llm)
            if now != self._cached:
                _ffi.cut_llm_cache(llm, common_prefix(self._cached, now))
                self._settings.pop("_requires_eval", None)
        _ffi.set_llm_settings(llm, self._settings)


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

"""Leave the caller's ``Llama`` as it was: what completing an item alone changes (seed,
sampler, mirostat mu, penalty window, KV cache), put back (docs/reliability.md)."""

from __future__ import annotations

from typing import Any

from .. import _ffi
from ..engine.cache import common_prefix
from .window import window_holds


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


def forget_stale_window(llm: Any, tokens: list[int], n_swa: int) -> bool:
    """Empty the ``Llama``'s cache when ``Llama.generate(tokens)`` would reuse a cached prefix
    whose window its sliding-window layers no longer hold (:func:`~.window.window_holds`);
    True when emptied. ``n_swa``: the window (:func:`llamabatch._ffi.window_of`; 0: no check)."""
    if n_swa <= 0:
        return False
    n_cached = len(_ffi.llm_cached_tokens(llm))
    kept = _ffi.llm_prefix_kept(llm, tokens)
    if window_holds(kept, n_cached, _ffi.llm_seq_pos_min(llm), n_swa):
        return False
    _ffi.cut_llm_cache(llm, 0)
    return True

"""Leave the caller's ``Llama`` as it was: what completing an item alone changes, put back.

Completing an item alone runs ``Llama.set_seed`` and ``Llama.generate`` on the caller's
``Llama``. That replaces what decides its *next* output: the seed
``create_completion`` derives each call's seed from (``random.Random(self._seed)``),
the sampler chain ``Llama.sample`` reuses, mirostat's mu and the penalty window
(``last_n_tokens_size``); and it fills the ``Llama``'s KV cache with our prompt.

:class:`LlamaGuard` saves the settings and an exact copy of the cache before the first
item alone (``llama_state_seq_get_data`` of the ``Llama``'s sequence 0, with
``n_tokens``/``input_ids``: :func:`llamabatch._ffi.snapshot_llm`) and puts both back
after the last (``llama_state_seq_set_data``). Cutting the cache back to the prefix the
caller's tokens share with ours is not enough: the caller's next call would decode the
rest of its prompt in another split than an untouched ``Llama`` does, and llama.cpp's
logits depend on the split (docs/replies.md). The copy is taken once per run of items
alone (one sequence state: ~2 ms for 9 MB on a CPU, docs/engine.md), not per item.
Where no copy can be taken (a binding without ``llama_state_seq_*``), the cache is cut
back to the longest prefix that still holds the caller's own tokens, as before.

The context's logits after a restore are those of our last decode, so a ``Llama`` whose
logits were live (``_requires_eval`` False) is marked to decode its last token again
before it samples, as llama-cpp-python does after ``load_state``.
"""

from __future__ import annotations

from typing import Any

from .. import _ffi
from .window import window_holds


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class LlamaGuard:
    """Saves what of a ``Llama`` shapes its later output; :meth:`restore` puts it back.

    Args:
        llm: the caller's ``llama_cpp.Llama``.

    Use: ``guard = LlamaGuard(llm)`` before touching it, ``guard.restore()`` after (in a
    ``finally``); restoring twice does nothing more. Between items completed alone in one
    run, :meth:`restore_settings` puts back all but the KV cache.
    """

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self._settings = _ffi.llm_settings(llm)
        self._cached = _ffi.llm_cached_tokens(llm)
        self._snapshot = _ffi.snapshot_llm(llm)
        self._restored = False

    def restore_settings(self) -> None:
        """Put back the settings only (seed, sampler, penalty window), leaving the KV
        cache with what was decoded since (the next item alone may reuse its prefix);
        :meth:`restore` must still follow before the caller uses the ``Llama``."""
        if self._restored or not _ffi.is_loaded(self._llm):
            return
        settings = dict(self._settings)
        if settings.pop("_requires_eval", None) is not None:
            settings["_requires_eval"] = True  # the logits are not the caller's
        _ffi.set_llm_settings(self._llm, settings)

    def restore(self) -> None:
        """Put back the settings and the caller's cache, exactly when the snapshot could
        be taken (else cut back to what is still the caller's)."""
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
    """Empty the ``Llama``'s cache when ``Llama.generate(tokens)`` would reuse a cached
    prefix whose window its sliding-window layers no longer hold.

    ``Llama.generate`` keeps the longest cached prefix it shares with ``tokens``
    (:func:`llamabatch._ffi.llm_prefix_kept`) without asking the window; with
    ``swa_full=False`` a cache that went on past that prefix lost it there, and the reply
    would come out wrong without an error. The rule is the batch path's
    (:func:`llamabatch.llamacpp.window.window_holds`, llama-server's ``pos_min`` test).

    Args:
        llm: the ``llama_cpp.Llama`` about to generate.
        tokens: the prompt it will be given.
        n_swa: its window (:func:`llamabatch._ffi.window_of`; 0: nothing to check).

    Returns:
        True when the cache was emptied (the whole prompt is then prefilled).
    """
    if n_swa <= 0:
        return False
    n_cached = len(_ffi.llm_cached_tokens(llm))
    kept = _ffi.llm_prefix_kept(llm, tokens)
    if window_holds(kept, n_cached, _ffi.llm_seq_pos_min(llm), n_swa):
        return False
    _ffi.cut_llm_cache(llm, 0)
    return True

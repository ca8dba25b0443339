"""Leave the caller's ``Llama`` as it was: what completing an item alone changes, put back.

Completing an item alone runs ``Llama.set_seed`` and ``Llama.generate`` on the caller's
``Llama``. That replaces what decides its *next* output: the seed
``create_completion`` derives each call's seed from (``random.Random(self._seed)``),
the sampler chain ``Llama.sample`` reuses, mirostat's mu and the penalty window
(``last_n_tokens_size``); and it fills the ``Llama``'s KV cache with our prompt.

:class:`LlamaGuard` saves the settings before and restores them after. The cache is
not copied back (that would cost a state copy of every cached token per item): it is
cut back to the longest prefix that still holds the caller's own cached tokens
(``n_tokens``/``input_ids`` then describe exactly what the KV cache holds), so the
caller's next call re-evaluates the rest of its prompt and samples from the same
logits an untouched ``Llama`` would have.
"""

from __future__ import annotations

from typing import Any

from .. import _ffi


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
        """Put back the settings and cut the KV cache to what is still the caller's."""
        if self._restored:
            return
        self._restored = True
        llm = self._llm
        if not _ffi.is_loaded(llm):  # Llama.close() in between: nothing left to restore
            return
        now = _ffi.llm_cached_tokens(llm)
        if now != self._cached:
            _ffi.cut_llm_cache(llm, common_prefix(self._cached, now))
            self._settings.pop("_requires_eval", None)  # the logits are ours: re-evaluate
        _ffi.set_llm_settings(llm, self._settings)

"""AloneGrammar: the grammar of an item completed alone, kept out of ``Llama``'s chain.

``Llama.generate(grammar=LlamaGrammar)`` puts a grammar stage in its sampler chain, and
``llama_sampler_sample`` then applies the chain *and accepts* the chosen token into the
grammar in one C call. When the grammar allows no token at some step (a dead end: a NUL
in a literal, an empty character class), every candidate is ``-inf``, the chain still
picks one, and the accept aborts the process (llama-grammar.cpp,
``llama_grammar_accept_impl``: ``GGML_ABORT`` for an end-of-generation token the grammar
cannot end with; ``llama_grammar_accept_token`` throws through the C API, i.e.
``std::terminate``, when no grammar stack survives).

So the grammar stage is given to ``Llama.generate`` as a *logits processor* instead (the
first stage of its chain, over the whole vocabulary in id order, as the grammar stage
would see it; masking with ``-inf`` commutes with the penalties, so the replies are the
ones of ``grammar=``): the processor applies the grammar (``llama_sampler_apply``, which
never aborts), notes a dead end instead of masking everything, and the token is
accepted into the grammar by :meth:`AloneGrammar.accept` only after checking that the
grammar allows it. A Python exception never escapes the processor (it runs inside a C
callback): it is kept and raised by :meth:`accept`.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .. import _ffi
from .._util.closing import Closing
from ..errors import GrammarDeadEnd, GrammarError


class AloneGrammar(Closing):
    """One item's grammar stage for ``Llama.generate(logits_processor=[it])``.

    Args:
        llm: the ``Llama`` (its model's vocabulary).
        text: GBNF text with a ``root`` rule.

    Raises:
        GrammarError: llama.cpp refused the grammar (``llama_sampler_init_grammar``
            returned NULL).
        LibraryError: a sampler symbol is missing.
    """

    def __init__(self, llm: Any, text: str) -> None:
        lib = _ffi.load()
        self._chains = chains = lib.samplers
        vocab = lib.vocab(_ffi.model_of(llm))
        self._grammar = chains.new_grammar(vocab, text)
        self._finalizer = weakref.finalize(self, chains.free, self._grammar)
        self._cand = chains.candidates(lib.n_vocab(vocab))
        self.n_accepted = 0
        self._dead = False
        self._error: BaseException | None = None

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return not self._finalizer.alive

    def __call__(self, input_ids: Any, scores: np.ndarray) -> np.ndarray:
        """The logits processor: ``scores`` (float32[n_vocab], by token id) with what
        the grammar forbids set to ``-inf``; unchanged at a dead end (noted)."""
        try:
            self._dead = False
            if self.closed:
                raise ValueError("the AloneGrammar is closed")
            cand = self._cand
            cand.fill(scores)
            cand.apply(self._grammar.chain)  # sets logits to -inf, never reorders
            masked = cand.rows["logit"]
            if not np.isfinite(masked).any():
                self._dead = True
                return scores
            return masked.copy()
        except BaseException as exc:  # noqa: BLE001 - inside a C callback: keep, raise later
            self._error = exc
            return scores

    def accept(self, token: int) -> None:
        """Accept ``token`` (just sampled) into the grammar.

        Raises:
            GrammarDeadEnd: the grammar allowed no token at this step (nothing accepted).
            GrammarError: the chain picked a token the grammar forbids (not accepted).
            BaseException: what the processor raised inside the C callback
                (e.g. ``KeyboardInterrupt``).
        """
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc
        if self._dead:
            raise GrammarDeadEnd(
                "the grammar allows no token of the vocabulary here (a dead end: e.g. a "
                "NUL character in a literal, or an empty character class)",
                self.n_accepted,
            )
        if not self._cand.allows(self._grammar.chain, token):
            raise GrammarError(f"the sampler picked token {token}, which the grammar forbids")
        self._chains.accept(self._grammar, token)  # allowed: llama.cpp will not abort
        self.n_accepted += 1

    def close(self) -> None:
        """Free the grammar stage (idempotent)."""
        self._finalizer()

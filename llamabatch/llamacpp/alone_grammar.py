"""AloneGrammar: the grammar of an item completed alone, as a logits processor of
``Llama.generate`` instead of a stage of its chain, so that a dead end is caught before
anything is accepted (llama.cpp aborts there; docs/reliability-rules.md, "Grammar dead ends")."""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .. import _ffi
from .._util.closing import Closing
from ..errors import GrammarDeadEnd, GrammarError


class AloneGrammar(Closing):
    """One item's grammar (GBNF ``text``) for ``Llama.generate(logits_processor=[it])``: it masks
    what the grammar forbids (``llama_sampler_apply``; first in the chain, so the replies are
    those of ``grammar=``), and :meth:`accept` checks each token before accepting it.

    Raises:
        GrammarError: llama.cpp refused the grammar (``llama_sampler_init_grammar`` gave NULL).
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
        """The logits processor: ``scores`` (float32[n_vocab]) with what the grammar forbids set to
        ``-inf``; unchanged at a dead end (noted). Never raises: an exception is kept for
        :meth:`accept` (this runs inside a C callback)."""
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
            BaseException: what the processor raised inside the C callback (e.g. Ctrl-C).
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

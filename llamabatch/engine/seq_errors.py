"""Errors of one sequence inside a batched step: its own, never the batch's.

A grammar that allows no token at some step (a dead end: a NUL in a choice, an empty
character class) must end its item before any token is accepted into it: llama.cpp's
``llama_grammar_accept_impl`` aborts the process (``GGML_ABORT``) on an end-of-generation
token the grammar cannot end with, and ``llama_grammar_accept_token`` throws a C++
exception through the C API (``std::terminate``) when no grammar stack survives the
token (llama-grammar.cpp, llama.cpp as vendored in llama-cpp-python 0.3.36).
A backend detects the dead end first (after the grammar stage every candidate is
``-inf``) and raises :class:`GrammarDeadEnd` instead of accepting anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import GrammarError


class GrammarDeadEnd(GrammarError):
    """The grammar of one sequence allows no token of the vocabulary here; nothing was
    accepted into it (its item ends with this error, the others go on).

    Attributes:
        n_accepted: reply tokens the grammar had accepted before the dead end.
    """

    def __init__(self, message: str, n_accepted: int = 0) -> None:
        super().__init__(message)
        self.n_accepted = n_accepted


class SampleErrors(Exception):
    """``Backend.decode`` decoded the batch but could not sample some sequences.

    The decode itself succeeded (every span's tokens are in the cache); the sequences
    named in ``errors`` got no token (their grammars reached a dead end) and must not be
    decoded again; the others were sampled as usual.

    Attributes:
        sampled: one entry per span with logits, in span order: the sampled token id,
            or ``None`` for a sequence in ``errors``.
        errors: seq id -> the error of that sequence (a :class:`GrammarDeadEnd`).
    """

    def __init__(self, sampled: Sequence[int | None], errors: Mapping[int, GrammarError]) -> None:
        super().__init__("; ".join(f"seq {sid}: {exc}" for sid, exc in sorted(errors.items())))
        self.sampled = list(sampled)
        self.errors = dict(errors)

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

# defined with every other exception in llamabatch.errors; their home for the engine
from ..errors import GrammarDeadEnd, SampleErrors

__all__ = ["GrammarDeadEnd", "SampleErrors"]

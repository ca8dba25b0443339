"""Typed opaque handles over llama.cpp pointers.

Each handle wraps one pointer under its own field name (``model``, ``ctx``, ``vocab``,
``chain``), so a model handle passed where a context is due fails loudly instead of
handing llama.cpp the wrong pointer: the :class:`~llamabatch._ffi.library.Library`
methods raise ``TypeError`` (:func:`expect`), and the hot-path ones (decode, sample)
read the field by name, so a wrong handle raises ``AttributeError`` at no extra cost. A handle never frees anything: ownership stays with the
class that created the pointer (``BatchContext``, ``SeqSampler``, the ``Llama``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ModelHandle:
    """A ``llama_model *`` (owned by a ``llama_cpp.Llama``; llamabatch never frees it).

    Attributes:
        model: the pointer's address (int, never 0).
    """

    model: int


@dataclass(frozen=True, slots=True)
class ContextHandle:
    """A ``llama_context *`` (owned by ``BatchContext`` or a ``llama_cpp.Llama``).

    Attributes:
        ctx: the pointer's address (int, never 0).
    """

    ctx: int


@dataclass(frozen=True, slots=True)
class VocabHandle:
    """A ``const llama_vocab *`` (lives as long as its model).

    Attributes:
        vocab: the pointer's address (int, never 0).
    """

    vocab: int


@dataclass(frozen=True, slots=True)
class SamplerHandle:
    """A ``llama_sampler *`` that is a chain (``llama_sampler_chain_init``).

    Attributes:
        chain: the binding's ``POINTER(llama_sampler)`` object (non-NULL).
    """

    chain: Any


def expect(handle: object, kind: type) -> None:
    """Raise ``TypeError`` unless ``handle`` is a ``kind`` (e.g. a model for a context)."""
    if type(handle) is not kind:
        raise TypeError(f"expected a {kind.__name__}, got {type(handle).__name__}")

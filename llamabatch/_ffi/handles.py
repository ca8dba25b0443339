"""Typed opaque handles over llama.cpp pointers.

Each handle wraps one pointer under its own field name (``model``, ``ctx``, ``vocab``,
``chain``), so a model handle passed where a context is due fails loudly instead of
handing llama.cpp the wrong pointer: the :class:`~llamabatch._ffi.library.Library`
methods raise ``TypeError`` (:func:`expect`), and the hot-path ones (decode, sample)
read the field by name, so a wrong handle raises ``AttributeError`` at no extra cost.
A handle never frees anything: ownership stays with the class that created the pointer
(``BatchContext``, ``SeqSampler``, the ``Llama``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # typing_extensions is a dependency of llama-cpp-python
    from typing_extensions import dataclass_transform


@dataclass_transform(frozen_default=True)
class Handle:
    """A pointer under the one field its subclass declares: each subclass becomes a
    frozen dataclass of that field, equal only to a handle of its own type."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(frozen=True)(cls)


class ModelHandle(Handle):
    """A ``llama_model *`` (owned by a ``llama_cpp.Llama``; llamabatch never frees it);
    ``model`` is its address (int, never 0)."""

    model: int


class ContextHandle(Handle):
    """A ``llama_context *`` (owned by ``BatchContext`` or a ``llama_cpp.Llama``); ``ctx``
    is its address (int, never 0)."""

    ctx: int


class VocabHandle(Handle):
    """A ``const llama_vocab *`` (lives as long as its model); ``vocab`` is its address
    (int, never 0)."""

    vocab: int


class SamplerHandle(Handle):
    """A ``llama_sampler *`` that is a chain (``llama_sampler_chain_init``); ``chain`` is
    the binding's ``POINTER(llama_sampler)`` object (non-NULL)."""

    chain: Any


def expect(handle: object, kind: type) -> None:
    """Raise ``TypeError`` unless ``handle`` is a ``kind`` (e.g. a model for a context)."""
    if type(handle) is not kind:
        raise TypeError(f"expected a {kind.__name__}, got {type(handle).__name__}")

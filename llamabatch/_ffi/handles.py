"""Typed opaque handles over llama.cpp pointers: a handle of the wrong kind fails loudly
(:func:`expect`, or ``AttributeError`` on the field) instead of reaching llama.cpp. A
handle frees nothing; its pointer is owned by whoever created it."""

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
    """A pointer under the one field its subclass declares (a frozen dataclass, equal only to a
    handle of its own type)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(frozen=True)(cls)


class ModelHandle(Handle):
    """A ``llama_model *`` (a ``llama_cpp.Llama``'s); ``model`` is its address."""

    model: int


class ContextHandle(Handle):
    """A ``llama_context *``; ``ctx`` is its address."""

    ctx: int


class VocabHandle(Handle):
    """A ``const llama_vocab *`` (lives as long as its model); ``vocab`` is its address."""

    vocab: int


class SamplerHandle(Handle):
    """A ``llama_sampler *`` chain; ``chain`` is the binding's ``POINTER(llama_sampler)``."""

    chain: Any


def expect(handle: object, kind: type) -> None:
    """Raise ``TypeError`` unless ``handle`` is a ``kind``."""
    if type(handle) is not kind:
        raise TypeError(f"expected a {kind.__name__}, got {type(handle).__name__}")

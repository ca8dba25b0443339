"""The bytes of KV cache a batch context allocates, known before it is created: the formula
of llama.cpp's ``llama_kv_cache`` constructor (docs/reliability.md gives it)."""

from __future__ import annotations

import os
from typing import Any

from .. import _ffi
from .._ffi.model_facts import KvFacts, kv_facts, kv_facts_of_file, kv_types_of, type_size
from ..kv_estimate import KvEstimate

#: llama.cpp pads n_ctx_seq of a non-unified cache to a multiple of this
#: (``GGML_PAD(cparams.n_ctx_seq, 256)`` in llama-context.cpp).
N_CTX_SEQ_PAD = 256

#: ``GGML_TYPE_F16``: llama.cpp's default type_k / type_v.
GGML_TYPE_F16 = 1


def pad_n_ctx_seq(n_ctx_seq: int) -> int:
    """``n_ctx_seq`` rounded up to a multiple of 256, as llama.cpp allocates it."""
    return -(-n_ctx_seq // N_CTX_SEQ_PAD) * N_CTX_SEQ_PAD


def _row_size(ggml_type: int, n: int) -> int:
    block_bytes, block = type_size(ggml_type)
    return block_bytes * n // block


def kv_bytes_per_token(
    facts: KvFacts, type_k: int = GGML_TYPE_F16, type_v: int = GGML_TYPE_F16
) -> int:
    """Bytes of K and V per token over all layers (the module's formula)."""
    n_k = facts.n_embd_head_k * facts.n_head_kv
    n_v = facts.n_embd_head_v * facts.n_head_kv
    return facts.n_layer * (_row_size(type_k, n_k) + _row_size(type_v, n_v))


def estimate(
    llm_or_model_path: Any,
    *,
    slots: int,
    n_ctx_seq: int,
    type_k: int | None = None,
    type_v: int | None = None,
) -> KvEstimate:
    """The :class:`KvEstimate` of a batch context of ``slots`` x ``n_ctx_seq`` tokens (each >= 1).

    Args:
        llm_or_model_path: a loaded ``llama_cpp.Llama`` (its KV types are used) or a GGUF
            path (opened without its weights; F16 K and V unless given).
        type_k, type_v: ``enum ggml_type`` of the cache, overriding the ``Llama``'s.

    Raises:
        ValueError: ``slots`` or ``n_ctx_seq`` < 1, an unknown KV type, or a path that
            llama.cpp cannot open.
        LibraryError: llama-cpp-python lacks a ``llama_model_*`` function needed.
    """
    for name, value in (("slots", slots), ("n_ctx_seq", n_ctx_seq)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} is out of range: valid is an integer >= 1")
    if isinstance(llm_or_model_path, (str, os.PathLike)):
        facts = kv_facts_of_file(llm_or_model_path)
        types = (GGML_TYPE_F16, GGML_TYPE_F16)
    else:
        facts = kv_facts(_ffi.model_of(llm_or_model_path))
        types = kv_types_of(llm_or_model_path)
    per_token = kv_bytes_per_token(
        facts, types[0] if type_k is None else type_k, types[1] if type_v is None else type_v
    )
    padded = pad_n_ctx_seq(n_ctx_seq)
    exact = not (facts.n_swa or facts.is_recurrent or facts.is_hybrid)
    return KvEstimate(
        per_token, padded, per_token * padded, slots, per_token * padded * slots, exact
    )

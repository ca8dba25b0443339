"""Facts about a model's KV cache, read through llama.h (``llama_model_*``) and GGUF metadata,
for :mod:`llamabatch.llamacpp.kv_size`."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

from ..errors import LibraryError
from .handles import ModelHandle
from .resolve import import_binding

#: Bytes per block and values per block of the ggml types a KV cache can have
#: (``type_traits`` in ggml/src/ggml.c: e.g. Q8_0 = 34 bytes per 32 values).
#: Keys are ``enum ggml_type`` values from ggml.h.
GGML_TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (4, 1),  # F32
    1: (2, 1),  # F16
    2: (18, 32),  # Q4_0
    3: (20, 32),  # Q4_1
    6: (22, 32),  # Q5_0
    7: (24, 32),  # Q5_1
    8: (34, 32),  # Q8_0
    20: (18, 32),  # IQ4_NL
    30: (2, 1),  # BF16
}


@dataclass(frozen=True, slots=True)
class KvFacts:
    """What the KV cache size of a model depends on: ``n_layer``, ``n_head_kv`` (per layer),
    values per head in K and V (``{arch}.attention.key_length`` / ``value_length``, else
    n_embd / n_head), ``n_swa`` (0: none; the estimate is then an upper bound), and whether
    it keeps recurrent state (not estimated)."""

    arch: str
    n_layer: int
    n_head_kv: int
    n_embd_head_k: int
    n_embd_head_v: int
    n_swa: int
    is_recurrent: bool
    is_hybrid: bool


def _fn(module: Any, name: str) -> Any:
    fn = getattr(module, name, None)
    if fn is None:
        raise LibraryError(f"llama-cpp-python lacks {name}; cannot read the model's KV facts")
    return fn


def _meta(module: Any, model: int, key: str) -> str | None:
    fn = _fn(module, "llama_model_meta_val_str")
    buf = ctypes.create_string_buffer(256)
    n = fn(ctypes.c_void_p(model), key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else None


def _flag(module: Any, name: str, model: int) -> bool:
    fn = getattr(module, name, None)
    return bool(fn(ctypes.c_void_p(model))) if fn is not None else False


def _meta_int(module: Any, model: int, key: str) -> int | None:
    value = _meta(module, model, key)
    return int(value) if value is not None and value.strip().isdigit() else None


def kv_facts(model: ModelHandle, *, weights_loaded: bool = True) -> KvFacts:
    """The :class:`KvFacts` of a model: from ``llama_model_n_layer`` / ``n_head_kv`` / ``n_embd``
    / ``n_head`` / ``n_swa`` when its weights are loaded, else from its GGUF metadata strings
    only (a ``vocab_only`` model has no hyperparameters: those calls would ``GGML_ABORT``).
    LibraryError when llama-cpp-python lacks a function, ValueError when the metadata lacks
    the sizes."""
    module, _ = import_binding()
    ptr = model.model
    m = ctypes.c_void_p(ptr)
    arch = _meta(module, ptr, "general.architecture") or ""
    if weights_loaded:
        n_layer = int(_fn(module, "llama_model_n_layer")(m))
        n_embd = int(_fn(module, "llama_model_n_embd")(m))
        n_head = int(_fn(module, "llama_model_n_head")(m))
        n_head_kv = int(_fn(module, "llama_model_n_head_kv")(m))
        swa = getattr(module, "llama_model_n_swa", None)
        n_swa = int(swa(m)) if swa is not None else 0
    else:
        n_layer = _meta_int(module, ptr, f"{arch}.block_count")
        n_embd = _meta_int(module, ptr, f"{arch}.embedding_length")
        n_head = _meta_int(module, ptr, f"{arch}.attention.head_count")
        if not (n_layer and n_embd and n_head):
            raise ValueError(
                f"the GGUF metadata of this {arch or 'unknown'} model lacks "
                "block_count, embedding_length or attention.head_count"
            )
        # an array of per-layer counts is not readable as a string: fall back to n_head
        n_head_kv = _meta_int(module, ptr, f"{arch}.attention.head_count_kv") or n_head
        n_swa = _meta_int(module, ptr, f"{arch}.attention.sliding_window") or 0
    per_head = n_embd // n_head if n_head else 0
    key = _meta_int(module, ptr, f"{arch}.attention.key_length")
    value = _meta_int(module, ptr, f"{arch}.attention.value_length")
    return KvFacts(
        arch=arch,
        n_layer=n_layer,
        n_head_kv=n_head_kv,
        n_embd_head_k=key or per_head,
        n_embd_head_v=value or per_head,
        n_swa=n_swa,
        is_recurrent=_flag(module, "llama_model_is_recurrent", ptr),
        is_hybrid=_flag(module, "llama_model_is_hybrid", ptr),
    )


def kv_facts_of_file(path: str | os.PathLike[str]) -> KvFacts:
    """:func:`kv_facts` of a GGUF file opened ``vocab_only`` (no weights read), freed again.
    Raises as :func:`kv_facts`, and ValueError when llama.cpp cannot open ``path``."""
    module, _ = import_binding()
    params = _fn(module, "llama_model_default_params")()
    params.vocab_only = True
    model = _fn(module, "llama_model_load_from_file")(os.fsencode(path), params)
    if not model:
        raise ValueError(f"model_path={str(path)!r}: llama.cpp could not open it as a GGUF model")
    try:
        return kv_facts(ModelHandle(int(model)), weights_loaded=False)
    finally:
        _fn(module, "llama_model_free")(model)


def type_size(ggml_type: int) -> tuple[int, int]:
    """(bytes per block, values per block) of a KV cache type; ValueError for a type not in
    :data:`GGML_TYPE_SIZES`."""
    try:
        return GGML_TYPE_SIZES[int(ggml_type)]
    except KeyError:
        raise ValueError(
            f"type_k/type_v={ggml_type!r}: KV cache type unknown to the "
            f"estimate; known ggml types: {sorted(GGML_TYPE_SIZES)}"
        ) from None


def kv_types_of(llm: Any) -> tuple[int, int]:
    """(type_k, type_v) of the ``Llama``'s context params (the batch context copies them)."""
    params = getattr(llm, "context_params", None)
    return int(getattr(params, "type_k", 1)), int(getattr(params, "type_v", 1))

"""The only part of llamabatch that touches ctypes and ``llama_cpp.llama_cpp``.

Nothing is loaded at import: :func:`load` imports the binding on first use and resolves
the symbols llamabatch needs, renamed ones included; a missing essential one is a
``LibraryError`` naming it and the installed version."""

from .candidates import Candidates
from .handles import ContextHandle, ModelHandle, SamplerHandle, VocabHandle
from .library import FALLBACK_MAX_PARALLEL_SEQUENCES, Library, load
from .llm import (
    SHARED_CONTEXT_FIELDS,
    LlmSnapshot,
    compute_key,
    context_of,
    context_params_of,
    cut_llm_cache,
    free_memory,
    is_loaded,
    llm_cached_tokens,
    llm_prefix_kept,
    llm_seq_pos_min,
    llm_settings,
    model_of,
    on_model_close,
    output_device,
    restore_llm,
    set_llm_settings,
    snapshot_llm,
    threads_of,
    window_of,
)
from .memory import MemoryOps
from .views import BatchBuffers

__all__ = [
    "FALLBACK_MAX_PARALLEL_SEQUENCES",
    "SHARED_CONTEXT_FIELDS",
    "BatchBuffers",
    "Candidates",
    "ContextHandle",
    "Library",
    "MemoryOps",
    "ModelHandle",
    "SamplerHandle",
    "VocabHandle",
    "context_of",
    "compute_key",
    "context_params_of",
    "cut_llm_cache",
    "is_loaded",
    "llm_cached_tokens",
    "llm_prefix_kept",
    "llm_seq_pos_min",
    "llm_settings",
    "load",
    "model_of",
    "LlmSnapshot",
    "on_model_close",
    "free_memory",
    "output_device",
    "restore_llm",
    "snapshot_llm",
    "set_llm_settings",
    "threads_of",
    "window_of",
]

"""What llamabatch reads from a loaded ``llama_cpp.Llama`` (llama-cpp-python 0.3.x internals,
in one place): ``Llama._model.model`` is the ``llama_model *`` (falsy after
``Llama.close()``); ``Llama._model._exit_stack`` is what ``Llama.close()`` unwinds to free it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import BatchUnavailable, LibraryError
from .handles import ContextHandle, ModelHandle
from .library import load

#: ``llama_context_params`` fields copied from the ``Llama``'s own context so that both
#: contexts compute the same way (RoPE, attention kernel, KV types, offloading).
SHARED_CONTEXT_FIELDS = (
    "rope_scaling_type",
    "rope_freq_base",
    "rope_freq_scale",
    "yarn_ext_factor",
    "yarn_attn_factor",
    "yarn_beta_fast",
    "yarn_beta_slow",
    "yarn_orig_ctx",
    "flash_attn_type",
    "flash_attn",
    "type_k",
    "type_v",
    "offload_kqv",
    "op_offload",
    "swa_full",
)


def model_of(llm: Any) -> ModelHandle:
    """The ``llama_model *`` a ``llama_cpp.Llama`` loaded. LibraryError when this
    llama-cpp-python keeps it elsewhere, BatchUnavailable when the ``Llama`` was closed."""
    holder = getattr(llm, "_model", None)
    if holder is None or not hasattr(holder, "model"):
        raise LibraryError(
            f"cannot find the model pointer of {type(llm).__name__} "
            "(expected Llama._model.model, llama-cpp-python 0.3.x)"
        )
    if not holder.model:
        raise BatchUnavailable("the Llama's model is not loaded (was Llama.close() called?)")
    return ModelHandle(int(holder.model))


def context_of(llm: Any) -> ContextHandle | None:
    """The ``Llama``'s own ``llama_context *`` (``Llama.ctx``), or ``None`` (closed, or kept
    elsewhere)."""
    ctx = getattr(llm, "ctx", None)
    if not ctx:
        return None
    address = ctx if isinstance(ctx, int) else getattr(ctx, "value", None)
    if address is None:
        import ctypes

        address = ctypes.cast(ctx, ctypes.c_void_p).value
    return ContextHandle(int(address)) if address else None


def is_loaded(llm: Any) -> bool:
    """True while the ``Llama``'s model is loaded (False after ``Llama.close()``)."""
    holder = getattr(llm, "_model", None)
    return bool(getattr(holder, "model", None))


def on_model_close(llm: Any, fn: Callable[[], object]) -> bool:
    """Have ``fn()`` called before the ``Llama``'s model is freed (``Llama.close()`` or garbage
    collection): a callback on its exit stack, which runs last-registered first. False when
    this llama-cpp-python has no such hook."""
    stack = getattr(getattr(llm, "_model", None), "_exit_stack", None)
    callback = getattr(stack, "callback", None)
    if not callable(callback):
        return False
    callback(fn)
    return True


def threads_of(llm: Any) -> tuple[int, int]:
    """(n_threads, n_threads_batch) the ``Llama`` computes with (>= 1 each)."""
    params = getattr(llm, "context_params", None)
    n_threads = getattr(params, "n_threads", None) or getattr(llm, "n_threads", None) or 1
    n_batch = (
        getattr(params, "n_threads_batch", None)
        or getattr(llm, "n_threads_batch", None)
        or n_threads
    )
    return max(int(n_threads), 1), max(int(n_batch), 1)


def output_device(llm: Any) -> str | None:
    """The GPU device(s) the ``Llama``'s output layer (its logits) runs on, by ggml name
    (``"Vulkan0"``; several joined by ``"+"``), or ``None`` for the host: llama.cpp sees a GPU
    device and the model offloads layers (``n_gpu_layers`` != 0; the output layer is the
    first one offloaded, ``llama_model::load_tensors``)."""
    params = getattr(llm, "model_params", None)
    if not getattr(params, "n_gpu_layers", 0):
        return None
    from .sysinfo import devices  # reads ggml's device list

    gpus = [d.name for d in devices() if d.is_gpu]
    return "+".join(gpus) if gpus else None


def free_memory(llm: Any) -> tuple[str, int | None]:
    """Where the ``Llama``'s batch contexts keep their KV cache and the bytes free there:
    the sum over its GPU devices (``ggml_backend_dev_memory``), or ``"host"`` and the
    memory available to programs (psutil); ``None`` bytes when a device does not say."""
    device = output_device(llm)
    from .sysinfo import devices, host_available_memory

    if device is None:
        return "host", host_available_memory()
    free = [d.memory_free for d in devices() if d.is_gpu]
    return device, None if None in free else sum(f for f in free if f is not None)


def compute_key(llm: Any) -> tuple[object, ...] | None:
    """What decides how a batch context on the ``Llama``'s model computes, besides its size:
    the model file (path, size, modification time), where its layers run (``n_gpu_layers``,
    ``split_mode``, ``main_gpu``), the output device, the context fields a batch context
    copies (:data:`SHARED_CONTEXT_FIELDS`: flash attention, KV types, ...) and the threads.
    ``None`` when the ``Llama`` has no model file to name."""
    path = getattr(llm, "model_path", None)
    if not isinstance(path, str) or not os.path.isfile(path):
        return None
    st = os.stat(path)
    model = getattr(llm, "model_params", None)
    ctx = context_params_of(llm)
    return (
        os.path.realpath(path),
        st.st_size,
        st.st_mtime_ns,
        *(repr(getattr(model, f, None)) for f in ("n_gpu_layers", "split_mode", "main_gpu")),
        output_device(llm),
        *(repr(getattr(ctx, f, None)) for f in SHARED_CONTEXT_FIELDS),
        threads_of(llm),
    )


def context_params_of(llm: Any) -> Any:
    """The ``Llama``'s ``llama_context_params`` (or ``None``)."""
    return getattr(llm, "context_params", None)


#: ``Llama`` attributes (llama-cpp-python 0.3.x) that shape its next output and that a
#: call of ``Llama.generate`` / ``set_seed`` replaces: the seed that
#: ``create_completion`` derives its next seed from, the sampler chain ``Llama.sample``
#: reuses, mirostat's running mu, the penalty window and ``_requires_eval`` (whether the
#: logits in the context belong to the cached tokens).
LLM_SETTINGS = ("_seed", "_sampler", "_mirostat_mu", "last_n_tokens_size", "_requires_eval")


def llm_settings(llm: Any) -> dict[str, Any]:
    """The :data:`LLM_SETTINGS` a ``Llama`` has now (those it lacks are left out)."""
    return {name: getattr(llm, name) for name in LLM_SETTINGS if hasattr(llm, name)}


def set_llm_settings(llm: Any, settings: dict[str, Any]) -> None:
    """Put back what :func:`llm_settings` returned."""
    for name, value in settings.items():
        setattr(llm, name, value)


def llm_cached_tokens(llm: Any) -> list[int]:
    """A copy of the token ids the ``Llama``'s KV cache holds (``input_ids[:n_tokens]``)."""
    return [int(t) for t in llm.input_ids[: llm.n_tokens]]


def llm_prefix_kept(llm: Any, tokens: list[int]) -> int:
    """How many cached tokens ``Llama.generate(tokens, reset=True)`` keeps: the common prefix of
    the cache and ``tokens``, less one when it covers all of ``tokens`` (decoded again for fresh
    logits) unless the whole prompt is cached with live logits (``_requires_eval`` False)."""
    cached = llm_cached_tokens(llm)
    n = 0
    for a, b in zip(cached, tokens):
        if a != b:
            break
        n += 1
    if n == len(tokens):
        if len(cached) == n and not getattr(llm, "_requires_eval", True):
            return n
        return max(n - 1, 0)
    return n


def cut_llm_cache(llm: Any, n_keep: int) -> None:
    """Keep the ``Llama``'s first ``n_keep`` cached tokens (``llama_memory_seq_rm(mem, 0, n_keep,
    -1)``, as ``Llama.generate`` does); ``Llama.reset()`` empties the cache when ``n_keep`` is
    0 or the memory refuses (recurrent models)."""
    if n_keep > 0 and llm._ctx.kv_cache_seq_rm(-1, n_keep, -1):
        llm.n_tokens = n_keep
    else:
        llm.reset()
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
    llm._requires_eval = True


def window_of(llm: Any) -> int:
    """The sliding window (positions) of the ``Llama``'s model (``llama_model_n_swa``), 0 when
    it has none or with ``swa_full=True``; a batch context copies ``swa_full`` (same value)."""
    params = context_params_of(llm)
    if params is not None and bool(getattr(params, "swa_full", False)):
        return 0
    return load().model_n_swa(model_of(llm))


def llm_seq_pos_min(llm: Any) -> int | None:
    """``llama_memory_seq_pos_min`` of sequence 0 of the ``Llama``'s context (-1 when empty),
    ``None`` when unknown."""
    ctx = context_of(llm)
    memory = None if ctx is None else load().memory(ctx)
    return None if memory is None else memory.seq_pos_min(0)


@dataclass(frozen=True, slots=True)
class LlmSnapshot:
    """An exact copy of a ``Llama``'s cache: the cells of its sequence 0 (``None`` when empty),
    their token ids and, with ``logits_all=True``, their rows of ``scores``."""

    state: Any
    tokens: tuple[int, ...]
    scores: Any = None


def snapshot_llm(llm: Any) -> LlmSnapshot | None:
    """A :class:`LlmSnapshot` of the ``Llama`` now; ``None`` when none can be taken (no context,
    no ``llama_state_seq_*``, llama.cpp saved nothing of a non-empty cache)."""
    lib = load()
    ctx = context_of(llm)
    if ctx is None or not lib.can_copy_seq():
        return None
    tokens = tuple(llm_cached_tokens(llm))
    state = None
    if tokens:
        state = lib.save_seq(ctx, 0)
        if state is None:
            return None
    scores = None
    if getattr(llm, "_logits_all", False) and tokens:
        scores = llm.scores[: len(tokens)].copy()
    return LlmSnapshot(state, tokens, scores)


def restore_llm(llm: Any, snap: LlmSnapshot) -> bool:
    """Put a :func:`snapshot_llm` copy back (``llama_state_seq_set_data``, ``n_tokens``,
    ``input_ids``, ``scores``) and set ``_requires_eval``: the logits are not the snapshot's.
    False when llama.cpp refused the state (the cache is then emptied)."""
    ctx = context_of(llm)
    if ctx is None:
        return False
    n = len(snap.tokens)
    if snap.state is None:
        cut_llm_cache(llm, 0)
        return True
    if load().load_seq(ctx, 0, snap.state) == 0:
        cut_llm_cache(llm, 0)
        return False
    llm.input_ids[:n] = snap.tokens
    llm.n_tokens = n
    if snap.scores is not None:
        llm.scores[:n] = snap.scores
    llm._requires_eval = True
    return True

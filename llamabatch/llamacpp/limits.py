"""The values llamabatch hands to llama.cpp, checked against the asserts they could hit.

A ``GGML_ASSERT`` in llama.cpp aborts the whole process (SIGABRT), so every value that
reaches context creation or ``llama_decode`` is checked here first. Each check names
the assert it guards (file and function of llama.cpp as vendored in llama-cpp-python
0.3.36); ``docs/asserts.md`` lists all of them with the place that guards each.

Pure functions: they take the values and the facts read from the library (the
``llama_max_parallel_sequences()`` ceiling, the ``Llama``'s threads) and raise ``ValueError``
naming the parameter and the valid range. No ctypes here.
"""

from __future__ import annotations

from ..errors import ParameterError

#: ``llama_context_params.n_ctx`` is a ``uint32_t``; llama.cpp pads it up to a multiple
#: of 256 (``GGML_PAD(cparams.n_ctx, 256)`` in ``llama_context::llama_context``), so the
#: largest total that does not wrap around is the largest multiple of 256 below 2**32.
MAX_N_CTX = 2**32 - 256

#: ``GGML_MAX_N_THREADS`` (ggml/include/ggml.h): ggml's CPU threadpool keeps per-thread
#: arrays of this size (``cpumask``); ``ggml_graph_compute`` asserts ``n_threads > 0``.
MAX_N_THREADS = 512


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(name: str, value: object, valid: str) -> None:
    raise ParameterError(name, value, valid)


def check_context(
    slots: int,
    n_ctx_seq: int,
    n_batch: int,
    n_ubatch: int | None = None,
    *,
    max_slots: int,
    n_threads: int = 1,
    n_threads_batch: int = 1,
) -> None:
    """Check the parameters of a non-unified batch context before ``llama_init_from_model``.

    Args:
        slots: ``n_seq_max``, sequences of the context.
        n_ctx_seq: tokens of KV cache per sequence requested (``n_ctx = n_ctx_seq * slots``).
        n_batch: most tokens per ``llama_decode``.
        n_ubatch: most tokens per compute step (default: ``n_batch``).
        max_slots: ``llama_max_parallel_sequences()`` (``LLAMA_MAX_SEQ``, 256 here).
        n_threads, n_threads_batch: CPU threads of the context.

    Raises:
        ValueError: naming the first bad parameter and its valid range:

        - ``slots`` in [1, max_slots]: ``n_seq_max must be <= LLAMA_MAX_SEQ``
          (llama-context.cpp, a thrown error) and the seq-id asserts of llama-kv-cache.cpp.
        - ``slots <= n_batch``: ``llama_context::output_reserve`` asserts
          ``GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)`` where
          ``n_outputs_max = max(n_outputs, n_seq_max)`` and ``cparams.n_outputs_max`` is
          ``cparams.n_batch`` (``llama_context_params.n_outputs_max == 0``); it is called
          with ``n_seq_max`` while the context is created. ``cparams.n_batch`` is
          ``min(n_ctx, n_batch)`` for causal attention and ``n_ctx >= n_seq_max``
          always here, so the rule is exactly ``n_seq_max <= n_batch``.
        - ``n_ubatch`` in [1, n_batch]: llama.cpp clamps it to ``n_batch``; we plan
          with the value it uses, so a larger one is refused.
        - ``n_ctx_seq * slots <= MAX_N_CTX``: ``n_ctx`` is a ``uint32_t``.
        - threads in [1, MAX_N_THREADS]: ``ggml_graph_compute`` asserts
          ``cplan->n_threads > 0``; ggml sizes per-thread arrays by ``GGML_MAX_N_THREADS``.
    """
    if not _int(max_slots) or max_slots < 1:
        raise ValueError(f"max_slots={max_slots!r}: expected llama_max_parallel_sequences()")
    if not _int(slots) or not 1 <= slots <= max_slots:
        _fail("slots", slots, f"an integer in [1, {max_slots}] (llama_max_parallel_sequences())")
    if not _int(n_batch) or n_batch < 1:
        _fail("n_batch", n_batch, "an integer >= 1 (tokens per llama_decode)")
    if slots > n_batch:
        raise ValueError(
            f"slots={slots} with n_batch={n_batch} is out of range: llama.cpp needs "
            f"slots <= n_batch (one output row per sequence in a decode): valid is "
            f"n_batch >= {slots}, or slots <= {n_batch}"
        )
    if n_ubatch is not None and (not _int(n_ubatch) or not 1 <= n_ubatch <= n_batch):
        _fail("n_ubatch", n_ubatch, f"an integer in [1, n_batch={n_batch}]")
    if not _int(n_ctx_seq) or n_ctx_seq < 1:
        _fail("n_ctx_seq", n_ctx_seq, "an integer >= 1 (tokens per sequence)")
    if n_ctx_seq * slots > MAX_N_CTX:
        _fail(
            "n_ctx_seq",
            n_ctx_seq,
            f"an integer in [1, {MAX_N_CTX // slots}] with "
            f"slots={slots} (n_ctx = n_ctx_seq * slots is a "
            "32-bit count)",
        )
    for name, value in (("n_threads", n_threads), ("n_threads_batch", n_threads_batch)):
        if not _int(value) or not 1 <= value <= MAX_N_THREADS:
            _fail(name, value, f"an integer in [1, {MAX_N_THREADS}] (GGML_MAX_N_THREADS)")

"""The values llamabatch hands to llama.cpp, checked against the asserts they could hit (a
``GGML_ASSERT`` aborts the process). docs/asserts.md lists each assert and its guard.
Pure functions, no ctypes."""

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
    """Check the parameters of a non-unified batch context before ``llama_init_from_model``:
    ``slots`` (``n_seq_max``), ``n_ctx_seq`` (KV cache tokens per sequence requested),
    ``n_batch`` (tokens per ``llama_decode``), ``n_ubatch`` (default ``n_batch``), the
    context's CPU threads; ``max_slots`` is ``llama_max_parallel_sequences()``.

    Raises:
        ValueError: naming the first bad parameter and its valid range: ``slots`` in
            [1, max_slots]; ``slots <= n_batch`` (``llama_context::output_reserve``);
            ``n_ubatch`` in [1, n_batch]; ``n_ctx_seq * slots <= MAX_N_CTX``; threads in
            [1, MAX_N_THREADS].
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

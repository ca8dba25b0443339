"""Sliding-window attention: which cached prefixes a window model can still reuse.

Pure Python. A model with sliding-window layers (gemma 2/3, mistral-style SWA, llama 4's
chunked attention) attends, in those layers, only to the last ``n_swa`` positions: the
token at position ``p`` sees the positions ``p0`` with ``p - p0 < n_swa``
(llama.cpp ``llama_hparams::is_masked_swa``). With ``swa_full=False`` llama.cpp gives those
layers a cache of about ``n_swa`` cells per sequence and overwrites a cell once no *later*
position can see it (``llama_kv_cache::find_slot``: a cell is reused when it is masked for
``seq_pos_max + 1``). So a sequence that went on past a prefix no longer holds the window
of that prefix's end: cut back to the prefix (``llama_memory_seq_rm``) and decoded on, the
window layers would attend to a hole, and the reply comes out fluent and wrong, with no
error. ``llama_memory_seq_pos_min(mem, seq_id)`` tells the oldest position the sequence
still holds in every layer (for the iSWA cache: in the window layers).

The rule (llama-server's): a cached prefix of ``n_keep`` tokens is reused only where the
window layers still hold what the next position attends to. llama.cpp's server
(``tools/server/server-context.cpp``, ``pos_min_thold``; the version vendored in
llama-cpp-python 0.3.36) computes ``pos_min_thold = max(0, n_past - n_swa)`` (``n_swa`` 0
with ``swa_full``) and, when ``llama_memory_seq_pos_min`` is at or past it, restores a
checkpoint or prefills the whole prompt again ("forcing full prompt re-processing due to
lack of cache data"). llamabatch keeps no checkpoints, so it prefills again, and accepts
a prefix when ``pos_min <= max(0, n_keep - n_swa)``: every position the next token sees
(``> n_keep - n_swa``) is then held, with one position to spare, and a window that never
slid (``pos_min`` 0) serves any prefix. A prompt that continues the *whole* cache needs no
check: llama.cpp keeps exactly what the next position sees.
"""

from __future__ import annotations


def window_holds(n_keep: int, n_cached: int, pos_min: int | None, n_swa: int) -> bool:
    """True when a sequence whose cache holds ``n_cached`` tokens can be cut back to its
    first ``n_keep`` and decoded on from position ``n_keep`` with the right attention.

    Args:
        n_keep: tokens kept (0 <= n_keep <= n_cached).
        n_cached: tokens the sequence's cache holds (positions 0 .. n_cached - 1).
        pos_min: ``llama_memory_seq_pos_min`` of the sequence (-1 when it holds nothing;
            ``None`` when unknown: then only ``n_keep == n_cached`` or ``n_keep == 0``
            is safe).
        n_swa: the window in positions (``llama_model_n_swa``), 0 when the model has no
            sliding-window layers or its cache keeps every position (``swa_full``).

    Returns:
        False when the window layers lost positions the token at ``n_keep`` attends to.
    """
    if n_swa <= 0 or n_keep <= 0 or n_keep >= n_cached:
        return True
    if pos_min is None or pos_min < 0:
        return False
    return pos_min <= max(0, n_keep - n_swa)


def cut_floor(pos_min: int | None, n_swa: int) -> int:
    """The smallest ``n_keep`` > 0 a sequence can be cut back to (``CutFloor``): 0 when
    any cut works (no window, or a window that never slid), ``pos_min + n_swa`` when it
    slid, and a length past any cache when ``pos_min`` is unknown or -1 (only a cut to 0
    or to the whole cache is safe then); the rule of :func:`window_holds`."""
    if n_swa <= 0 or pos_min == 0:
        return 0
    if pos_min is None or pos_min < 0:
        return 1 << 62
    return pos_min + n_swa

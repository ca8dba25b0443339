"""Sliding-window attention: which cached prefixes a window model can still reuse. Pure Python.

llama-server's rule (``pos_min_thold`` in ``tools/server/server-context.cpp``); why and
how: docs/engine.md, "Sliding-window models"."""

from __future__ import annotations


def window_holds(n_keep: int, n_cached: int, pos_min: int | None, n_swa: int) -> bool:
    """True when a cache of ``n_cached`` tokens cut back to its first ``n_keep`` (0 <= n_keep <=
    n_cached) still holds every position the token at ``n_keep`` attends to: always without a
    window (``n_swa`` 0: none, or ``swa_full``), for a cut to 0 and for no cut; else when
    ``pos_min`` (``llama_memory_seq_pos_min``; -1 empty, ``None`` unknown: False) is at most
    ``max(0, n_keep - n_swa)``."""
    if n_swa <= 0 or n_keep <= 0 or n_keep >= n_cached:
        return True
    if pos_min is None or pos_min < 0:
        return False
    return pos_min <= max(0, n_keep - n_swa)


def cut_floor(pos_min: int | None, n_swa: int) -> int:
    """The smallest ``n_keep`` > 0 a sequence can be cut back to (``Backend.cut_floor``): 0
    when any cut works (no window, or one that never slid), ``pos_min + n_swa`` once it slid,
    and a length past any cache when ``pos_min`` is -1 or unknown."""
    if n_swa <= 0 or pos_min == 0:
        return 0
    if pos_min is None or pos_min < 0:
        return 1 << 62
    return pos_min + n_swa

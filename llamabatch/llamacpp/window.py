"""Sliding-window attention: which cached prefixes a window model can still reuse. Pure Python.

llama-server's rule (``pos_min_thold`` in ``tools/server/server-context.cpp``); why and
how: docs/engine.md, "Sliding-window models"."""

from __future__ import annotations


def cut_floor(pos_min: int | None, n_swa: int) -> int:
    """The smallest ``n_keep`` > 0 a sequence can be cut back to (``Backend.cut_floor``) and
    still hold every position the token at ``n_keep`` attends to (those > ``n_keep - n_swa``):
    0 when any cut works (``n_swa`` 0: no window, or ``swa_full``; a window that never slid),
    ``pos_min + n_swa`` once it slid (``pos_min``: ``llama_memory_seq_pos_min``), and a length
    past any cache when ``pos_min`` is -1 (empty) or ``None`` (unknown). A cut to 0 or to the
    whole cache always works."""
    if n_swa <= 0 or pos_min == 0:
        return 0
    if pos_min is None or pos_min < 0:
        return 1 << 62
    return pos_min + n_swa

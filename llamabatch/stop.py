"""The stop rule: one pure function, checked in a fixed order (EOG, then length).

Imitates vLLM v1's ``check_stop`` (``vllm/v1/core/sched/utils.py``): the status of a
sequence is decided only here, the same way in a batch and alone.
"""

from __future__ import annotations

from typing import Literal

StopReason = Literal["stop", "length"]


def check_stop(token: int, n_generated: int, max_tokens: int,
               eog_ids: frozenset[int]) -> StopReason | None:
    """Decide whether a sequence stops after sampling ``token``.

    Args:
        token: the token id just sampled.
        n_generated: tokens already kept before ``token`` (>= 0).
        max_tokens: most tokens to keep (>= 1).
        eog_ids: end-of-generation token ids (``llama_vocab_is_eog``).

    Returns:
        ``"stop"`` if ``token`` ends generation (it is then not kept), ``"length"`` if
        ``token`` is kept and is the ``max_tokens``-th, else ``None`` (kept, go on).
    """
    if token in eog_ids:
        return "stop"
    if n_generated + 1 >= max_tokens:
        return "length"
    return None

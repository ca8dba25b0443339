"""One process-wide lock per loaded ``llama_cpp.Llama``.

A :class:`~llamabatch.BatchGenerator` uses two llama.cpp contexts on one model: its own
batch context, and the ``Llama``'s own context (items completed one at a time go through
``Llama.generate``). A ``Llama`` is not thread-safe: two threads generating with it at
once corrupt its context (its token history, KV cache and logits are shared state). So
every use of llama.cpp by a generator holds :func:`llm_lock` of its ``Llama``, and a
program that also calls the ``Llama`` itself from other threads holds the same lock::

    lock = llamabatch.llm_lock(llm)
    with lock:
        reply = llm.create_completion(prompt, max_tokens=64)

The lock is reentrant (``threading.RLock``), created on first use and dropped with the
``Llama`` (kept in a ``weakref.WeakKeyDictionary``, so it never keeps a model alive).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

_locks: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def llm_lock(llm: Any) -> Any:
    """The ``threading.RLock`` that serializes every use of ``llm`` (a ``llama_cpp.Llama``).

    The same object is returned for the same ``llm`` in every thread, for as long as the
    ``llm`` exists.

    Raises:
        TypeError: ``llm`` cannot be weakly referenced (not a ``llama_cpp.Llama``).
    """
    with _guard:
        try:
            lock = _locks.get(llm)
            if lock is None:
                lock = _locks[llm] = threading.RLock()
        except TypeError:
            raise TypeError(f"llm_lock needs a llama_cpp.Llama, got {type(llm).__name__}") from None
        return lock

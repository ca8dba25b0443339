"""One process-wide lock per loaded ``llama_cpp.Llama``, and whether this thread holds one."""

from __future__ import annotations

import threading
import weakref
from typing import Any

_locks: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def llm_lock(llm: Any) -> Any:
    """The ``threading.RLock`` that serializes every use of ``llm`` (a ``llama_cpp.Llama``).

    A ``Llama`` is not thread-safe, and a :class:`~llamabatch.BatchGenerator` uses it (and a
    second context on its model) from whichever thread runs it: every generator on ``llm``
    holds this lock around each use of llama.cpp, and a program that also calls ``llm`` from
    other threads holds it too::

        with llamabatch.llm_lock(llm):
            reply = llm.create_completion(prompt, max_tokens=64)

    The same lock is returned for the same ``llm`` in every thread; it is created on first use
    and dropped with the ``Llama`` (a weak reference: it never keeps a model alive).

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


def held_here(lock: Any) -> bool:
    """True when this thread holds ``lock``: a ``threading.RLock`` (as :func:`llm_lock`'s)
    tells through ``_is_owned``, what ``threading.Condition`` asks it; False for a lock
    that cannot tell (a plain ``threading.Lock``)."""
    is_owned = getattr(lock, "_is_owned", None)
    return bool(is_owned()) if callable(is_owned) else False

"""The same job over a pool of OpenAI-compatible servers (llama-server, llama-cpp-python's
server, vLLM): :class:`RemoteGenerator` has :class:`~llamabatch.BatchGenerator`'s
``iter_groups`` / ``complete_many`` / ``stats`` / ``close`` and yields
:class:`RemoteCompletion` objects (``path == "remote"``).

Needs httpx (``pip install 'llamabatch[remote]'``); the names below are imported on first
use, so ``import llamabatch.remote`` (and the CLI) works without it. Its errors
(``PoolUnavailable``, ``ServerFault``, ``ItemRejected``, ``BadItem``) are in
:mod:`llamabatch.errors`.
"""

from __future__ import annotations

import importlib

_NAMES = {
    "RemoteCompletion": "completion",
    "RemoteGenerator": "generator",
    "RemoteStats": "completion",
    "Server": "pool",
    "ServerPool": "pool",
    "normalize_url": "pool",
    "build_request": "llamabatch.shapes.requests",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> object:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = module if "." in module else f"{__name__}.{module}"
    return getattr(importlib.import_module(where), name)

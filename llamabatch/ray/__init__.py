"""llamabatch on Ray Data: the slot engine as a ``map_batches`` callable class, one model
per actor (:class:`BatchCompleter`), and :func:`processor`, a ``Dataset -> Dataset``
function shaped like Ray Data LLM's processors (:class:`ProcessorConfig`). The command
line's ``llamabatch complete --ray`` runs on them (:mod:`llamabatch.ray.job`).

Needs Ray Data (``pip install 'llamabatch[ray]'``) to run a dataset; the callable class
itself needs only NumPy. The names are imported on first use.
"""

from __future__ import annotations

import importlib

_NAMES = {
    "BatchCompleter": "completer",
    "ProcessorConfig": "processors",
    "processor": "processors",
    "RayJob": "job",
    "RayJobError": "job",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> object:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

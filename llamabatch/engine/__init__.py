"""The slot engine, pure Python (no native library, ``tests/engine/test_engine_is_pure.py``),
and what a custom backend implements: :class:`Backend` (its capabilities as data,
:class:`BackendInfo`; its vocabulary, :class:`Vocab`; a saved cache,
:class:`SeqState`) and one step as plain data both ways (:class:`Span` in,
:class:`StepResult` of :class:`SeqOutput` out). :class:`llamabatch.testing.FakeBackend`
is a complete example. Inside: :mod:`.scheduler` (queue, fits-or-alone, failures),
:mod:`.slot_engine` (one step at a time), :mod:`.cache` (slots, prefixes, host memory),
:mod:`.request` (one item in flight, the stop rule), :mod:`.features` (n samples, label
scores).
"""

from . import backend, step
from .backend import *  # noqa: F403 (backend.__all__)
from .step import *  # noqa: F403 (step.__all__)

__all__ = [*backend.__all__, *step.__all__]

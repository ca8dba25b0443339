"""The slot engine, pure Python (no native library, ``tests/engine/test_engine_is_pure.py``),
and what a custom backend implements: :class:`Backend` (its capabilities as data,
:class:`BackendInfo`; its vocabulary, :class:`Vocab`), the operations on sequences
(:data:`SeqOp`) and one step as plain data both ways (:class:`Span` in,
:class:`StepResult` of :class:`SeqOutput` out). :class:`llamabatch.testing.FakeBackend`
is a complete example. Inside: :mod:`.scheduler` (queue, fits-or-alone, failures),
:mod:`.slot_engine` (one step at a time), :mod:`.cache` (slots, prefixes, host memory),
:mod:`.request` (one item in flight, the stop rule), :mod:`.features` (n samples, label
scores).
"""

from .backend import (
    Backend,
    BackendInfo,
    BatchLimits,
    Clear,
    Copy,
    CutFloor,
    Load,
    Release,
    Save,
    SeqOp,
    Start,
    Trim,
    Vocab,
)
from .step import SeqOutput, Span, StepResult, Targets, TokenLogprobs

__all__ = [
    "Backend",
    "BackendInfo",
    "BatchLimits",
    "Clear",
    "Copy",
    "CutFloor",
    "Load",
    "Release",
    "Save",
    "SeqOp",
    "SeqOutput",
    "Span",
    "Start",
    "StepResult",
    "Targets",
    "TokenLogprobs",
    "Trim",
    "Vocab",
]

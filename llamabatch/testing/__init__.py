"""Test helpers for programs that use llamabatch: a fake backend, hypothesis strategies,
checks of a run and a state machine.

:class:`FakeBackend` implements the :class:`~llamabatch.engine.backend.Backend` protocol with no
library loaded, so ``BatchGenerator(backend=FakeBackend(...))`` runs the whole scheduler
in a plain unit test. Each prompt gets a deterministic reply (a function of the prompt's
token ids, or a mapping), the same in a batch and alone, computed from what the slot's
cache really holds; faults can be injected (the batch context cannot be created, the
k-th batched decode fails with a llama.cpp return code or an exception, a cache copy
fails, an item fails even alone, a recurrent memory refuses partial trims); every call
is logged, and by default every decode plan is checked against llama.cpp's rules (a
broken rule raises :class:`FakeBackendViolation`).

The strategies (:func:`prompts`, :func:`fault_plans`, :func:`fake_backends`) need
hypothesis, imported only when they are called. Importing this package loads neither
llama-cpp-python nor hypothesis.

The default vocabulary: ids 0-255 are the bytes of UTF-8 text (``tokenize`` gives one
token per byte, the empty string none), ids from 256 up are special tokens written
``<|id|>``; 256 (:data:`EOG_ID`) is the default end-of-generation token.

Modules: ``fake`` (the backend's calls), and what it is made of, one concern each:
``memory`` (the caches, token by token), ``rules`` (llama.cpp's rules and
:class:`FakeBackendViolation`), ``faults`` (fault injection and fault plans), ``oracle``
(the reference completion of a prompt, by the engine's own stop rule), ``records`` (the
call log), ``replies`` (the vocabulary and reply functions); ``strategies``
(hypothesis), ``checks`` (runs of a generator on a fake and their checks), ``machine``
(the hypothesis state machine of a generator's life; import it explicitly, it imports
hypothesis).
"""

from .fake import FakeBackend, FakeBackendViolation
from .faults import BACKEND_EXCEPTIONS, DECODE_FAULT_CODES, FailWhen, FaultPlan
from .records import (
    AloneCall,
    Call,
    ClearCall,
    CloseCall,
    CopyCall,
    DecodeCall,
    Expected,
    LoadSeqCall,
    OpenBatchCall,
    SeqLog,
    SpanRecord,
    StartSeqCall,
    TrimCall,
    read_seqs,
)
from .replies import EOG_ID, HashReply, Reply, ReplySpec
from .strategies import fake_backends, fault_plans, prefixed_prompts, prompts

__all__ = [
    "BACKEND_EXCEPTIONS",
    "DECODE_FAULT_CODES",
    "EOG_ID",
    "AloneCall",
    "Call",
    "ClearCall",
    "CloseCall",
    "CopyCall",
    "DecodeCall",
    "Expected",
    "FailWhen",
    "FakeBackend",
    "FakeBackendViolation",
    "FaultPlan",
    "LoadSeqCall",
    "HashReply",
    "OpenBatchCall",
    "Reply",
    "ReplySpec",
    "SeqLog",
    "SpanRecord",
    "StartSeqCall",
    "TrimCall",
    "fake_backends",
    "fault_plans",
    "prefixed_prompts",
    "prompts",
    "read_seqs",
]

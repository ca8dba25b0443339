"""Test helpers for programs that use llamabatch (docs/testing.md): :class:`FakeBackend` (the
whole scheduler with no library: deterministic replies, injected faults, every call logged
and checked against llama.cpp's rules), hypothesis strategies, checks of a run and a state
machine (:mod:`.machine`, imported explicitly). Importing it loads neither
llama-cpp-python nor hypothesis."""

from . import records
from .fake import FakeBackend, FakeBackendViolation
from .faults import BACKEND_EXCEPTIONS, DECODE_FAULT_CODES, FailWhen, FaultPlan
from .records import *  # noqa: F403 (records.__all__)
from .replies import EOG_ID, HashReply, ReplySpec
from .strategies import fake_backends, fault_plans, prefixed_prompts, prompts

__all__ = [
    *records.__all__,
    "BACKEND_EXCEPTIONS",
    "DECODE_FAULT_CODES",
    "EOG_ID",
    "FailWhen",
    "FakeBackend",
    "FakeBackendViolation",
    "FaultPlan",
    "HashReply",
    "ReplySpec",
    "fake_backends",
    "fault_plans",
    "prefixed_prompts",
    "prompts",
]

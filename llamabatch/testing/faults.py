"""Faults the fake backend injects (its ``fail_*``, ``max_kv_tokens``, ``refuse_grammar`` and
``dead_end_at`` arguments), as values hypothesis can print."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, fields
from typing import Any

from ..errors import DecodeError
from .records import Tokens

#: ``llama_decode`` return codes a fault plan can inject (llama.h): 1 no KV slot,
#: 2 aborted, -1 invalid batch, -3 fatal.
DECODE_FAULT_CODES = (1, 2, -1, -3)
#: Exceptions other than ``DecodeError`` a backend call may raise: out of memory, a
#: library error, an OS error from the shared library.
BACKEND_EXCEPTIONS = (
    MemoryError("fake: out of memory"),
    RuntimeError("fake: ggml error"),
    OSError("fake: libllama"),
)

#: ``fail_alone``: prompts (token tuples), or a predicate on them.
FailAlone = Collection[Tokens] | Callable[[Tokens], bool]


@dataclass(frozen=True, slots=True)
class FailWhen:
    """A ``fail_alone`` predicate: true when ``sum(prompt) % mod == rem``."""

    mod: int
    rem: int

    def __call__(self, prompt: Tokens) -> bool:
        return sum(prompt) % self.mod == self.rem


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Faults to inject into a :class:`FakeBackend` (``FakeBackend(**plan.kwargs())``)."""

    fail_open: bool = False
    fail_decode_at: int | tuple[int, ...] | None = None
    fail_code: int = -1
    fail_alone: Callable[[Tokens], bool] | None = None
    fail_exc: BaseException | None = None
    fail_copy_at: int | None = None
    fail_state_at: int | None = None
    max_kv_tokens: int | None = None
    refuse_grammar: bool = False
    dead_end_at: int | None = None

    def kwargs(self) -> dict[str, Any]:
        """The plan as ``FakeBackend`` keyword arguments (its fields are their names)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def fails_alone(rule: FailAlone | None, prompt: Tokens) -> bool:
    """True when the ``fail_alone`` rule matches ``prompt``."""
    if rule is None:
        return False
    return rule(prompt) if callable(rule) else prompt in rule


def keeps_tokens(code: int) -> bool:
    """True when a failed ``llama_decode`` with ``code`` (2 aborted, < -1 fatal; llama.h) leaves
    its processed ubatches in memory."""
    return code == 2 or code < -1


def decode_error(code: int, n_call: int) -> DecodeError:
    """The error of the injected failure of decode call ``n_call``."""
    return DecodeError(
        f"fake: llama_decode returned {code} (fault at decode call {n_call})",
        code,
    )

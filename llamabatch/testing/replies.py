"""Replies and faults for the fake backend, as values hypothesis can print.

Also the default vocabulary: ids 0-255 are the bytes of UTF-8 text, ids from 256 up are
special tokens written ``<|id|>``; :data:`EOG_ID` (256) ends generation by default.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from .records import Tokens

#: The default end-of-generation token id of the fake vocabulary.
EOG_ID = 256
#: ``llama_decode`` return codes a fault plan can inject (llama.h): 1 no KV slot,
#: 2 aborted, -1 invalid batch, -3 fatal.
DECODE_FAULT_CODES = (1, 2, -1, -3)
#: Exceptions other than ``DecodeError`` a backend call may raise (issue 9): out of
#: memory, a library error, an OS error from the shared library.
BACKEND_EXCEPTIONS = (
    MemoryError("fake: out of memory"),
    RuntimeError("fake: ggml error"),
    OSError("fake: libllama"),
)

#: ``reply``: a function of the prompt's token ids, or a mapping from a prompt (its text
#: or its token ids) to its reply (text or token ids); a missing prompt replies nothing.
Reply = Union[  # noqa: UP007 (a runtime alias: ``X | Y`` of a Callable needs Python 3.10's types)
    Callable[[Tokens], Sequence[int] | str], Mapping[str | Tokens, Sequence[int] | str]
]


def byte_tokens(text: str) -> list[int]:
    """The default tokenizer: one token per UTF-8 byte; ``""`` gives ``[]``."""
    return list(text.encode("utf-8"))


def byte_text(tokens: Sequence[int]) -> str:
    """The default detokenizer: bytes for ids < 256 and ``<|id|>`` for the others,
    decoded at once (UTF-8, invalid bytes replaced)."""
    out = bytearray()
    for t in tokens:
        if 0 <= t < 256:
            out.append(t)
        else:
            out += f"<|{t}|>".encode()
    return out.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class HashReply:
    """A reply function: pseudo-random tokens seeded by ``seed`` and the prompt.

    The reply has 0 to ``max_len`` ids in [0, n_vocab); with probability ``eog_rate`` one
    of ``eog_ids`` is put in the middle (the scheduler must stop there).
    """

    seed: int
    max_len: int
    n_vocab: int
    eog_ids: Tokens = ()
    eog_rate: float = 0.0

    def __call__(self, prompt: Tokens) -> list[int]:
        rng = random.Random(hash((self.seed, len(prompt)) + tuple(prompt)))
        reply = [rng.randrange(self.n_vocab) for _ in range(rng.randint(0, self.max_len))]
        if reply and self.eog_ids and rng.random() < self.eog_rate:
            reply[rng.randrange(len(reply))] = rng.choice(self.eog_ids)
        return reply


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
        """The plan as ``FakeBackend`` keyword arguments."""
        return {
            "fail_open": self.fail_open,
            "fail_decode_at": self.fail_decode_at,
            "fail_code": self.fail_code,
            "fail_alone": self.fail_alone,
            "fail_exc": self.fail_exc,
            "fail_copy_at": self.fail_copy_at,
            "fail_state_at": self.fail_state_at,
            "max_kv_tokens": self.max_kv_tokens,
            "refuse_grammar": self.refuse_grammar,
            "dead_end_at": self.dead_end_at,
        }

"""Replies and the default vocabulary of the fake backend, as values hypothesis can print."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Union

from .records import Tokens

#: The default end-of-generation token id of the fake vocabulary.
EOG_ID = 256
#: ``reply``: a function of the prompt's token ids, or a mapping from a prompt (its text
#: or its token ids) to its reply (text or token ids); a missing prompt replies nothing.
ReplySpec = Union[  # noqa: UP007 (a runtime alias: ``X | Y`` of a Callable needs Python 3.10's types)
    Callable[[Tokens], Sequence[int] | str], Mapping[str | Tokens, Sequence[int] | str]
]


def byte_tokens(text: str) -> list[int]:
    """The default tokenizer: one token per UTF-8 byte; ``""`` gives ``[]``."""
    return list(text.encode("utf-8"))


def byte_text(tokens: Sequence[int]) -> str:
    """The default detokenizer: bytes for ids < 256 and ``<|id|>`` for the others, decoded at
    once (UTF-8, invalid bytes replaced)."""
    out = bytearray()
    for t in tokens:
        if 0 <= t < 256:
            out.append(t)
        else:
            out += f"<|{t}|>".encode()
    return out.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class HashReply:
    """A reply function: 0 to ``max_len`` pseudo-random ids in [0, n_vocab) seeded by ``seed``
    and the prompt; with probability ``eog_rate`` one of ``eog_ids`` in the middle."""

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

"""Sampling and batching parameters: frozen dataclasses validated on construction.

Defaults and names follow llama-cpp-python's ``Llama.create_completion`` (0.3.x):
temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, typical_p 1.0, repeat_penalty 1.0,
frequency_penalty 0, presence_penalty 0, and ``Llama(last_n_tokens_size=64)``.
Every invalid value raises ``ValueError`` naming the parameter and the valid range,
before any model work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: ``LLAMA_DEFAULT_SEED`` in llama.h: the dist sampler then draws a random seed.
LLAMA_DEFAULT_SEED = 0xFFFFFFFF

#: Items per page, at most (see :func:`default_page_size`).
MAX_PAGE_SIZE = 16


def _check(ok: bool, name: str, value: object, valid: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is out of range: valid is {valid}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How each sequence picks its next token.

    The chain is llama-cpp-python's (``Llama._init_sampler``): penalties(last_n
    ``penalty_last_n``) → top_k → typical_p → top_p → min_p → temperature → dist(seed);
    ``temperature == 0`` picks greedily. The same chain is used in a batch and alone.
    ``max_tokens`` (optional) caps this item's reply instead of the generator's
    ``max_tokens``.

    Raises:
        ValueError: a parameter outside its range (named in the message).
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    penalty_last_n: int = 64
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        _check(_is_real(self.temperature) and self.temperature >= 0,
               "temperature", self.temperature, "a finite number >= 0 (0 = greedy)")
        _check(_is_int(self.top_k) and self.top_k >= 0,
               "top_k", self.top_k, "an integer >= 0 (0 = off)")
        _check(_is_real(self.top_p) and 0 < self.top_p <= 1, "top_p", self.top_p, "(0, 1]")
        _check(_is_real(self.min_p) and 0 <= self.min_p <= 1, "min_p", self.min_p, "[0, 1]")
        _check(_is_real(self.typical_p) and 0 < self.typical_p <= 1,
               "typical_p", self.typical_p, "(0, 1]")
        _check(_is_real(self.repeat_penalty) and self.repeat_penalty > 0,
               "repeat_penalty", self.repeat_penalty, "a finite number > 0 (1 = off)")
        _check(_is_real(self.frequency_penalty), "frequency_penalty",
               self.frequency_penalty, "a finite number (0 = off)")
        _check(_is_real(self.presence_penalty), "presence_penalty",
               self.presence_penalty, "a finite number (0 = off)")
        _check(self.seed is None or (_is_int(self.seed) and 0 <= self.seed <= 0xFFFFFFFF),
               "seed", self.seed, "None or an integer in [0, 2**32 - 1]")
        _check(_is_int(self.penalty_last_n) and self.penalty_last_n >= 0,
               "penalty_last_n", self.penalty_last_n, "an integer >= 0")
        _check(self.max_tokens is None or (_is_int(self.max_tokens) and self.max_tokens >= 1),
               "max_tokens", self.max_tokens,
               "None (the generator's max_tokens) or an integer >= 1")

    @property
    def is_greedy(self) -> bool:
        """True when the chain is a plain argmax (temperature 0)."""
        return self.temperature == 0

    @property
    def effective_seed(self) -> int:
        """The seed given to the dist sampler: ``seed`` or ``LLAMA_DEFAULT_SEED``."""
        return LLAMA_DEFAULT_SEED if self.seed is None else self.seed


def default_page_size(slots: int) -> int:
    """The largest multiple of ``slots`` that is <= 16 (16 for 1, 2, 4, 8; 15 for 3, 5).

    A page that is a multiple of ``slots`` splits into full groups, so no group of one
    (which must be completed alone) is left at the end of each page.
    """
    return max(slots, MAX_PAGE_SIZE - MAX_PAGE_SIZE % slots)


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """The shape of the batch context and of the work.

    Attributes:
        slots: sequences decoded together (llama.cpp ``n_seq_max``), >= 1.
        n_ctx_seq: tokens of KV cache per sequence requested (prompt + reply); llama.cpp
            pads it up to a multiple of 256 for a non-unified cache, and the scheduler
            plans with what was allocated.
        n_batch: most tokens in one ``llama_decode`` (also ``n_ubatch``), >= 1.
        max_tokens: most generated tokens per item, >= 1.
        page_size: items read from the input at a time; ``None`` picks
            :func:`default_page_size`; must be a multiple of ``slots``.

    Raises:
        ValueError: a value outside its range (named in the message).
    """

    slots: int = 4
    n_ctx_seq: int = 4096
    n_batch: int = 512
    max_tokens: int = 200
    page_size: int | None = None

    def __post_init__(self) -> None:
        _check(_is_int(self.slots) and self.slots >= 1, "slots", self.slots,
               "an integer >= 1 (at most llama_max_parallel_sequences())")
        _check(_is_int(self.n_ctx_seq) and self.n_ctx_seq >= 1, "n_ctx_seq",
               self.n_ctx_seq, "an integer >= 1 (tokens per sequence)")
        _check(_is_int(self.n_batch) and self.n_batch >= 1, "n_batch", self.n_batch,
               "an integer >= 1 (tokens per llama_decode)")
        _check(_is_int(self.max_tokens) and self.max_tokens >= 1, "max_tokens",
               self.max_tokens, "an integer >= 1")
        if self.page_size is None:
            object.__setattr__(self, "page_size", default_page_size(self.slots))
        _check(_is_int(self.page_size) and self.page_size >= 1
               and self.page_size % self.slots == 0, "page_size", self.page_size,
               f"a positive multiple of slots={self.slots}")

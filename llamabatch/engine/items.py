"""Turning one user prompt into token ids, or into the error that is its result.

A prompt is a ``str`` (tokenized like ``Llama.create_completion``: special tokens parsed),
``bytes`` (or ``bytearray``, or a ``memoryview`` of bytes: format ``B`` or ``c``) holding
UTF-8 text, or a sequence of token ids in [0, n_vocab) (a list, an array, a ``memoryview``
of integers of another format). Anything else, or a prompt with no tokens, becomes an
error in its own place; it never raises.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BackendError
from ..params import SamplingParams
from .backend import Backend

#: ``memoryview.format`` values read as the bytes of UTF-8 text (unsigned bytes, chars).
BYTE_FORMATS = frozenset({"B", "c"})


@dataclass(slots=True)
class Item:
    """One input item on its way through the scheduler.

    Attributes:
        index: position in the input.
        tokens: prompt token ids (with ``error`` set: empty, or the tokens of a prompt
            too long for the context).
        error: why the prompt cannot be completed, or ``None``.
        sampling: the item's sampler chain and optional ``max_tokens``.
        text: the prompt's text when it was given as text (label scoring tokenizes
            prompt + label), else ``None``.
        sample: which of the ``SamplingParams.n`` replies of its prompt this item
            draws (0 for the first, and for an item with ``n == 1``).
    """

    index: int
    tokens: list[int]
    error: str | None = None
    sampling: SamplingParams = SamplingParams()
    text: str | None = None
    sample: int = 0

    @property
    def n_prompt_tokens(self) -> int:
        return len(self.tokens)


def _token_ids(prompt: Any, n_vocab: int) -> list[int]:
    tokens = []
    for k, value in enumerate(prompt):
        try:
            tok = operator.index(value)
        except TypeError:
            raise ValueError(
                f"token {k} is {type(value).__name__} {value!r}; "
                f"token ids are integers in [0, {n_vocab})"
            ) from None
        if not 0 <= tok < n_vocab:
            raise ValueError(f"token {k} is {tok}; token ids are in [0, {n_vocab})")
        tokens.append(tok)
    return tokens


def prepare(
    index: int, prompt: object, backend: Backend, sampling: SamplingParams = SamplingParams()
) -> Item:
    """Tokenize or check ``prompt``; every failure is returned in the item, never raised."""
    item = _prepare(index, prompt, backend)
    item.sampling = sampling
    return item


def _prepare(index: int, prompt: object, backend: Backend) -> Item:
    try:
        if isinstance(prompt, memoryview) and prompt.format in BYTE_FORMATS:
            prompt = prompt.tobytes()  # bytes of text, not token ids
        if isinstance(prompt, (bytes, bytearray)):
            prompt = bytes(prompt).decode("utf-8")
        if isinstance(prompt, str):
            tokens = backend.tokenize(prompt)
        elif isinstance(prompt, Sequence) or hasattr(prompt, "__array__"):
            tokens = _token_ids(prompt, backend.n_vocab)
        else:
            return Item(
                index,
                [],
                f"prompt is {type(prompt).__name__}; expected str, "
                "UTF-8 bytes or a list of token ids",
            )
    except UnicodeDecodeError as exc:
        return Item(index, [], f"prompt is not valid UTF-8: {exc}")
    except (ValueError, TypeError, BackendError) as exc:  # TypeError: e.g. a 0-d array
        return Item(index, [], f"prompt cannot be tokenized: {exc}")
    if not tokens:
        return Item(index, [], "prompt is empty (0 tokens)")
    if len(tokens) >= backend.n_ctx:  # its tokens kept: n_prompt_tokens tells its length
        return Item(
            index,
            tokens,
            f"prompt has {len(tokens)} tokens; the model context "
            f"(n_ctx={backend.n_ctx}) holds at most "
            f"{backend.n_ctx - 1} prompt tokens",
        )
    return Item(index, tokens, text=prompt if isinstance(prompt, str) else None)

"""The fake backend's oracle: what the scheduler should make of each prompt, judged by the
engine's own stop rule (:func:`llamabatch.engine.request.check_stop`), so that the
reference and the engine cannot disagree on where a reply ends. It reads only the fake's
model (:class:`FakeModel`), never its calls."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

from ..engine.backend import Vocab
from ..engine.request import Request, check_stop
from ..errors import BackendError
from ..params import SamplingParams
from .records import Expected, Tokens
from .replies import ReplySpec


class FakeModel(Vocab, Protocol):
    """What the oracle reads of a fake backend (a :class:`~.fake.FakeBackend` is one): its
    vocabulary, its replies and its context.

    Attributes:
        reply: the configured replies (:data:`~.replies.ReplySpec`).
        filler: the token after the reply when there is no EOG id.
        n_ctx: tokens of the one-at-a-time context (prompt + reply alone).
    """

    reply: ReplySpec
    filler: int
    n_ctx: int


def _as_tokens(fake: FakeModel, value: str | Sequence[int]) -> Tokens:
    return tuple(fake.tokenize(value) if isinstance(value, str) else value)


def configured_reply(fake: FakeModel, prompt: Sequence[int]) -> Tokens:
    """The configured reply to the token ids ``prompt``, before the stop rule."""
    key = tuple(prompt)
    reply = fake.reply
    if isinstance(reply, Mapping):
        value = reply.get(key)
        if value is None:
            value = next(
                (v for k, v in reply.items() if isinstance(k, str) and _as_tokens(fake, k) == key),
                (),
            )
        return _as_tokens(fake, value)
    return _as_tokens(fake, reply(key))


def token_at(fake: FakeModel, reply: Tokens, i: int) -> int:
    """The ``i``-th token of the stream: the reply, then ``min(eog_ids)`` forever (``filler``
    when there is no EOG id)."""
    if i < len(reply):
        return reply[i]
    return min(fake.eog_ids) if fake.eog_ids else fake.filler


def prompt_tokens(fake: FakeModel, prompt: object) -> Tokens:
    """The token ids the scheduler should make of ``prompt`` (str, UTF-8 bytes, ids).

    Raises:
        ValueError: the item is an error: not str/bytes/token ids, invalid UTF-8,
            untokenizable, empty, an id outside [0, n_vocab), or ``n_prompt >= n_ctx``.
    """
    if isinstance(prompt, memoryview) and prompt.format in ("B", "c"):
        prompt = prompt.tobytes()  # the bytes of text, as the scheduler reads them
    if isinstance(prompt, (bytes, bytearray)):
        prompt = bytes(prompt).decode("utf-8")  # UnicodeDecodeError is a ValueError
    if isinstance(prompt, str):
        try:
            tokens = fake.tokenize(prompt)
        except BackendError as exc:
            raise ValueError(str(exc)) from None
    elif isinstance(prompt, Sequence) or hasattr(prompt, "__array__"):
        try:
            tokens = [operator.index(t) for t in cast(Iterable[Any], prompt)]
        except TypeError:
            raise ValueError(f"not token ids: {prompt!r}") from None
    else:
        raise ValueError(f"not a prompt: {type(prompt).__name__}")
    if not tokens or any(not 0 <= t < fake.n_vocab for t in tokens):
        raise ValueError("empty prompt or a token id outside the vocabulary")
    if len(tokens) >= fake.n_ctx:
        raise ValueError(f"{len(tokens)} prompt tokens do not fit n_ctx={fake.n_ctx}")
    return tuple(tokens)


def expected(
    fake: FakeModel, prompt: object, max_tokens: int, sampling: SamplingParams | None = None
) -> Expected:
    """What the scheduler should return for ``prompt`` completed alone: the stop rule on the reply
    stream, at most ``min(max_tokens, n_ctx - n_prompt)`` tokens, ``sampling``'s stop strings
    and ids. ``fail_alone`` is not considered. ValueError as :func:`prompt_tokens`."""
    tokens = prompt_tokens(fake, prompt)
    req = Request(0, list(tokens), sampling if sampling is not None else SamplingParams())
    req.max_tokens = min(max_tokens, fake.n_ctx - len(tokens))
    req.bind(fake.detokenize, fake.eog_ids)
    reply = configured_reply(fake, tokens)
    i = 0
    while check_stop(req, token_at(fake, reply, i)) is None:
        i += 1
    return Expected(tuple(req.token_ids), req.finish_reason or "length", req.reply_text)

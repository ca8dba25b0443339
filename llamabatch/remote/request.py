"""What one item becomes on the wire: a :class:`ServerRequest`, the JSON body of an
OpenAI-compatible request.

An item is a prompt string (or UTF-8 bytes, or a list of token ids) for
``/v1/completions``, a list of chat messages for ``/v1/chat/completions``, or a mapping
with ``"prompt"`` or ``"messages"`` and per-item fields. The item is resolved by
:func:`llamabatch.items.resolve_item`, the same function the local engine and Ray use
(its fields are :class:`~llamabatch.SamplingParams`' plus ``response_format``; an item's
constraint replaces the generator's); this module only maps the resulting
:class:`~llamabatch.SamplingParams` to a server's fields.

The sampling fields are :func:`llamabatch.sampling_map.request_fields`; a constraint is
sent as the GBNF ``grammar`` the local engine uses
(:func:`llamabatch.llamacpp.constraints.grammar_of`), the field both llama-server and
llama-cpp-python's server accept on both endpoints. A field no request carries
(``stop_token_ids``, ``logprobs`` ...) set to anything but its default is the item's
error, naming the field: it is never dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BadItem
from ..items import resolve_item
from ..llamacpp.constraints import grammar_of
from ..params import SamplingParams
from ..sampling_map import request_fields

COMPLETIONS = "/v1/completions"
CHAT_COMPLETIONS = "/v1/chat/completions"

_DEFAULT = SamplingParams()


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """One item's request to a server, ready to send: the endpoint path, the JSON body
    (without ``model``) and the item's resolved sampling params (what its reply is checked
    against)."""

    endpoint: str
    body: dict[str, Any]
    sampling: SamplingParams = _DEFAULT


def _prompt(value: object) -> tuple[str, str, object]:
    """(endpoint, body key, JSON value) of a prompt or a list of messages."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadItem(f"prompt is not valid UTF-8: {exc}") from None
    if isinstance(value, str):
        return COMPLETIONS, "prompt", value
    if isinstance(value, Sequence) and value and all(isinstance(m, Mapping) for m in value):
        return CHAT_COMPLETIONS, "messages", [dict(m) for m in value]
    if (
        isinstance(value, Sequence)
        and value
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    ):
        return COMPLETIONS, "prompt", list(value)  # llama-server reads token ids
    raise BadItem(
        f"prompt is {type(value).__name__}: expected a str, UTF-8 bytes, a "
        "non-empty list of token ids or a non-empty list of chat messages"
    )


def build_request(item: object, sampling: SamplingParams, max_tokens: int) -> ServerRequest:
    """The request of one item, with the generator's ``sampling`` and ``max_tokens``
    under the item's own fields (:func:`llamabatch.items.resolve_item`).

    Raises:
        BadItem: the item is not a prompt, messages or a mapping of known fields, a
            field is bad, or a field set cannot be sent to a server (each named).
    """
    try:
        resolved = resolve_item(item, sampling)
    except ValueError as exc:
        raise BadItem(str(exc)) from None
    return sampling_request(
        resolved.messages if resolved.messages is not None else resolved.prompt,
        resolved.sampling,
        max_tokens,
    )


def sampling_request(prompt: object, sampling: SamplingParams, max_tokens: int) -> ServerRequest:
    """The request of a prompt (or list of messages) with its resolved ``sampling``;
    ``sampling.max_tokens`` wins over ``max_tokens``.

    Raises:
        BadItem: a bad prompt, a json_schema the converter refuses, or a field set that
            a server request cannot carry (named).
    """
    try:
        fields = request_fields(sampling, max_tokens, grammar_of(sampling))
    except ValueError as exc:  # GrammarError too
        raise BadItem(str(exc)) from None
    endpoint, key, value = _prompt(prompt)
    return ServerRequest(endpoint, {key: value, "stream": False, **fields}, sampling)

"""What one item becomes on the wire: the JSON body of an OpenAI-compatible request.

An item is a prompt string (or UTF-8 bytes, or a list of token ids) for
``/v1/completions``, a list of chat messages for ``/v1/chat/completions``, or a mapping
with ``"prompt"`` or ``"messages"`` and per-item fields. The item is resolved by
:func:`llamabatch.items.resolve_item`, the same function the local engine and Ray use
(its fields are :class:`~llamabatch.SamplingParams`' plus ``response_format``; an item's
constraint replaces the generator's); this module only maps the resulting
:class:`~llamabatch.SamplingParams` to a server's fields.

Constraints are sent as a GBNF ``grammar``, the field both llama-server and
llama-cpp-python's server accept on both endpoints: ``choices`` become a one-rule grammar
(:func:`choices_grammar`), ``json_schema`` (and ``response_format``, resolved to it) is
compiled with llama-cpp-python's own ``llama_cpp.llama_grammar.json_schema_to_gbnf``.
A sampling field that has no server field here (:data:`SERVER_FIELDS`), such as
``stop_token_ids`` or ``logprobs``, set to anything but its default makes the item's
error, naming the field: it is never dropped silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BadItem, GrammarError
from ..items import resolve_item
from ..llamacpp import constraints
from ..params import SamplingParams

COMPLETIONS = "/v1/completions"
CHAT_COMPLETIONS = "/v1/chat/completions"

#: Sampling fields sent as they are, under llama-cpp-python's names (both servers read
#: them; llama-server also reads typical_p, llama-cpp-python ignores it).
_SAMPLING_FIELDS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
    "seed",
)
#: The SamplingParams fields a server request carries (the others cannot be sent).
SERVER_FIELDS = frozenset(
    _SAMPLING_FIELDS + ("max_tokens", "stop", "penalty_last_n", "grammar", "json_schema", "choices")
)
_DEFAULT = SamplingParams()
#: Fields that act only when an item's labels are scored (``SamplingParams.scores_labels``).
_SCORING_FIELDS = ("score_choices", "choice_leading_space")


@dataclass(frozen=True, slots=True)
class Request:
    """One ready request: the endpoint path, the JSON body (without ``model``) and the
    item's resolved sampling params (what its reply is checked against)."""

    endpoint: str
    body: dict[str, Any]
    sampling: SamplingParams = _DEFAULT


def choices_grammar(choices: Sequence[str]) -> str:
    """A GBNF grammar whose only sentences are the ``choices``: the local engine's
    :func:`llamabatch.llamacpp.constraints.choices_grammar`, checked as an item's field.

    Raises:
        BadItem: ``choices`` is empty or holds something other than non-empty strings.
    """
    if isinstance(choices, str) or not isinstance(choices, Sequence) or not choices:
        raise BadItem(f"choices={choices!r} is invalid: valid is a non-empty list of strings")
    for choice in choices:
        if not isinstance(choice, str) or not choice:
            raise BadItem(f"choices holds {choice!r}: every choice must be a non-empty string")
    return constraints.choices_grammar(choices).rstrip("\n")


def schema_grammar(schema: object) -> str:
    """The GBNF grammar of a JSON schema (a dict or its JSON text): the local engine's
    :func:`llamabatch.llamacpp.constraints.schema_grammar` (llama-cpp-python's
    ``json_schema_to_gbnf``, as ``Llama`` does for ``response_format``).

    Raises:
        BadItem: the schema is not JSON, or the converter refuses it.
    """
    try:
        return constraints.schema_grammar(schema)
    except GrammarError as exc:
        raise BadItem(f"json_schema cannot be compiled to a grammar: {exc}") from None


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


def unsupported_fields(sampling: SamplingParams) -> list[str]:
    """The fields of ``sampling`` set to other than their default that a server request
    cannot carry (not in :data:`SERVER_FIELDS`), in the dataclass's order; the label
    scoring fields only when they act (``SamplingParams.scores_labels``: without
    ``choices``, ``score_choices`` does nothing)."""
    inert = () if sampling.scores_labels else _SCORING_FIELDS
    return [
        f.name
        for f in dataclasses.fields(sampling)
        if f.name not in SERVER_FIELDS
        and f.name not in inert
        and getattr(sampling, f.name) != getattr(_DEFAULT, f.name)
    ]


def build_request(item: object, sampling: SamplingParams, max_tokens: int) -> Request:
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


def sampling_request(prompt: object, sampling: SamplingParams, max_tokens: int) -> Request:
    """The request of a prompt (or list of messages) with its resolved ``sampling``;
    ``sampling.max_tokens`` wins over ``max_tokens``.

    Raises:
        BadItem: a bad prompt, a json_schema the converter refuses, or a field set that
            a server request cannot carry (named: see :func:`unsupported_fields`).
    """
    unsent = unsupported_fields(sampling)
    if unsent:
        raise BadItem(
            f"{', '.join(unsent)} cannot be sent to a server of the pool (no request field "
            "carries it); leave it unset for --server, or run locally or with --ray"
        )
    endpoint, key, value = _prompt(prompt)
    body: dict[str, Any] = {key: value, "stream": False}
    for name in _SAMPLING_FIELDS:
        if getattr(sampling, name) is not None:
            body[name] = getattr(sampling, name)
    body["max_tokens"] = sampling.max_tokens or max_tokens
    body["repeat_last_n"] = sampling.penalty_last_n  # llama-server's name
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.grammar is not None:
        body["grammar"] = sampling.grammar
    elif sampling.json_schema is not None:
        body["grammar"] = schema_grammar(sampling.json_schema)
    elif sampling.choices is not None:
        body["grammar"] = choices_grammar(sampling.choices)
    return Request(endpoint, body, sampling)

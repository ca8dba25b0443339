"""What one item becomes on the wire: the JSON body of an OpenAI-compatible request.

An item is a prompt string (or UTF-8 bytes, or a list of token ids) for
``/v1/completions``, a list of chat messages for ``/v1/chat/completions``, or a mapping
with ``"prompt"`` or ``"messages"`` and per-item fields of the same names as
:class:`~llamabatch.SamplingParams` and the JSONL input (``max_tokens``, ``temperature``,
``top_p``, ``top_k``, ``min_p``, ``seed``, ``stop``, ``grammar``, ``json_schema``,
``choices``, ``response_format``, ...), which override the generator's.

Constraints are sent as a GBNF ``grammar``, the field both llama-server and
llama-cpp-python's server accept on both endpoints: ``choices`` become a one-rule grammar
(:func:`choices_grammar`), ``json_schema`` is compiled with llama-cpp-python's own
``llama_cpp.llama_grammar.json_schema_to_gbnf``. ``response_format`` is passed through
as given (llama-server reads it on both endpoints, llama-cpp-python's server on chat).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BadItem, GrammarError
from ..llamacpp import constraints
from ..params import SamplingParams

COMPLETIONS = "/v1/completions"
CHAT_COMPLETIONS = "/v1/chat/completions"

#: Sampling fields sent as they are, under llama-cpp-python's names (both servers read
#: them; llama-server also reads typical_p and repeat_last_n, llama-cpp-python ignores them).
_SAMPLING_FIELDS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
)
#: Fields an item mapping may carry besides the prompt.
ITEM_FIELDS = frozenset(
    _SAMPLING_FIELDS
    + (
        "seed",
        "max_tokens",
        "stop",
        "grammar",
        "json_schema",
        "choices",
        "response_format",
        "penalty_last_n",
    )
)


@dataclass(frozen=True, slots=True)
class Request:
    """One ready request: the endpoint path and the JSON body (without ``model``)."""

    endpoint: str
    body: dict[str, Any]


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


def _fields(sampling: SamplingParams, max_tokens: int) -> dict[str, Any]:
    fields: dict[str, Any] = {name: getattr(sampling, name, None) for name in _SAMPLING_FIELDS}
    fields["max_tokens"] = getattr(sampling, "max_tokens", None) or max_tokens
    fields["penalty_last_n"] = getattr(sampling, "penalty_last_n", None)
    for name in ("seed", "stop", "grammar", "json_schema", "choices", "response_format"):
        fields[name] = getattr(sampling, name, None)  # the newer sampling fields, when present
    return fields


def build_request(item: object, sampling: SamplingParams, max_tokens: int) -> Request:
    """The request of one item, with the generator's ``sampling`` and ``max_tokens``
    under the item's own fields.

    Raises:
        BadItem: the item is not a prompt, messages or a mapping of known fields (named).
    """
    fields = _fields(sampling, max_tokens)
    if isinstance(item, Mapping):
        keys = [k for k in ("prompt", "messages") if item.get(k) is not None]
        if len(keys) != 1:
            raise BadItem('an item mapping needs exactly one of "prompt" or "messages"')
        unknown = sorted(set(item) - ITEM_FIELDS - {"prompt", "messages"})
        if unknown:
            raise BadItem(
                f"unknown item field(s) {', '.join(map(repr, unknown))}: valid are "
                f"prompt, messages, {', '.join(sorted(ITEM_FIELDS))}"
            )
        fields.update({k: v for k, v in item.items() if k in ITEM_FIELDS})
        item = item[keys[0]]
        if keys[0] == "messages" and (
            isinstance(item, (str, bytes))
            or not item
            or not isinstance(item, Sequence)
            or not all(isinstance(m, Mapping) for m in item)
        ):
            raise BadItem('messages must be a list of {"role", "content"} objects')
    endpoint, key, prompt = _prompt(item)
    body: dict[str, Any] = {key: prompt, "stream": False}
    for name in _SAMPLING_FIELDS + ("max_tokens", "seed"):
        if fields[name] is not None:
            body[name] = fields[name]
    if fields["penalty_last_n"] is not None:
        body["repeat_last_n"] = fields["penalty_last_n"]  # llama-server's name
    stop = fields["stop"]
    if stop:
        body["stop"] = [stop] if isinstance(stop, str) else list(stop)
    constraints = [n for n in ("grammar", "json_schema", "choices") if fields[n] is not None]
    if len(constraints) > 1:
        raise BadItem(
            f"{' and '.join(constraints)} are given: at most one of grammar, "
            "json_schema and choices"
        )
    if fields["grammar"] is not None:
        body["grammar"] = str(fields["grammar"])
    elif fields["json_schema"] is not None:
        body["grammar"] = schema_grammar(fields["json_schema"])
    elif fields["choices"] is not None:
        body["grammar"] = choices_grammar(fields["choices"])
    if fields["response_format"] is not None:
        body["response_format"] = fields["response_format"]
    return Request(endpoint, body)

"""Per-item sampling fields of ``llamabatch complete``: what a JSONL line (or the body of
an OpenAI batch request) may set for its own reply, checked before any model work.

The names are :class:`~llamabatch.SamplingParams`'s (llama-cpp-python's and OpenAI's):
``max_tokens, temperature, top_p, top_k, min_p, seed, stop, grammar, json_schema,
choices, response_format, n, score_choices``. A line's fields replace the command's flags
for that item; a line that sets one of ``grammar`` / ``json_schema`` / ``choices`` /
``response_format`` replaces the command's constraint (``--grammar`` / ``--json-schema`` /
``--choices``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ...llamacpp.constraints import response_format_fields
from ...params import SamplingParams

#: Fields a line may carry besides its prompt (``prompt`` / ``messages``) and ``id``.
LINE_FIELDS = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "grammar",
    "json_schema",
    "choices",
    "response_format",
    "repeat_penalty",
    "frequency_penalty",
    "presence_penalty",
    "n",
    "score_choices",
)

CONSTRAINTS = ("grammar", "json_schema", "choices")


def sampling_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`~llamabatch.SamplingParams` fields of one line (only those it sets;
    ``response_format`` becomes ``json_schema``; a JSON ``null`` means "not set").

    Raises:
        ValueError: a field of the wrong type or out of range (named), or two
            constraints at once.
    """
    fields = {k: obj[k] for k in LINE_FIELDS if k in obj and obj[k] is not None}
    if "response_format" in fields:
        if any(k in fields for k in CONSTRAINTS):
            raise ValueError(
                "response_format and "
                f"{[k for k in CONSTRAINTS if k in fields][0]} are both set; "
                "give one"
            )
        fields.update(response_format_fields(fields.pop("response_format")))
    for name in (
        "temperature",
        "top_p",
        "min_p",
        "repeat_penalty",
        "frequency_penalty",
        "presence_penalty",
    ):
        if isinstance(fields.get(name), int) and not isinstance(fields[name], bool):
            fields[name] = float(fields[name])
    SamplingParams(**fields)  # checks each value, named in the message
    return fields


def with_fields(base: SamplingParams, fields: Mapping[str, Any]) -> SamplingParams:
    """``base`` with a line's fields; a line's constraint replaces ``base``'s."""
    if not fields:
        return base
    changes = dict(fields)
    if any(k in changes for k in CONSTRAINTS):
        for k in CONSTRAINTS:
            changes.setdefault(k, None)
    return dataclasses.replace(base, **changes)

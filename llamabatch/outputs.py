"""What an item's result is written as, the same for every path (a local job, a pool of
servers, Ray Data): a flat record of JSON values.

The record has :data:`OUTPUT_FIELDS` (``text``, ``finish_reason``, ``error``,
``n_prompt_tokens``, ``n_tokens``, ``path``), always, then every other field of
:class:`~llamabatch.Completion` that holds a value (``logprobs`` when asked for, and any
output field added to :class:`~llamabatch.Completion` later, e.g. label scores or
samples) under its own name, as JSON values (tuples become lists, dataclasses objects).
This module is the one place that decides it, and reads it back (:func:`from_json`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .completion import Completion, Sample

#: The fields every record has, in this order.
OUTPUT_FIELDS = ("text", "finish_reason", "error", "n_prompt_tokens", "n_tokens", "path")

#: Completion fields that are not written (the position in the input, the raw token ids).
_NOT_WRITTEN = frozenset({"index", "token_ids"})


def extra_output_names() -> tuple[str, ...]:
    """The optional output fields: :class:`~llamabatch.Completion`'s fields that are
    neither in :data:`OUTPUT_FIELDS` nor internal (``index``, ``token_ids``)."""
    return tuple(
        f.name
        for f in dataclasses.fields(Completion)
        if f.name not in OUTPUT_FIELDS and f.name not in _NOT_WRITTEN
    )


def output_record(completion: Completion) -> dict[str, Any]:
    """The record of one completion: :data:`OUTPUT_FIELDS`, then each optional output
    field that is not ``None``, as JSON values."""
    record: dict[str, Any] = {name: getattr(completion, name) for name in OUTPUT_FIELDS}
    for name in extra_output_names():
        value = getattr(completion, name, None)
        if value is not None:
            record[name] = to_json(value)
    return record


def to_json(value: object) -> Any:
    """``value`` as JSON values: tuples and lists become lists, mappings dicts with
    string keys, dataclasses their fields' dict; other values as they are."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def from_json(name: str, value: Any) -> Any:
    """An optional output field read back from its JSON value in
    :class:`~llamabatch.Completion`'s types (:func:`to_json`'s inverse)."""
    if value is None:
        return None
    if name == "samples":
        return tuple(
            Sample(
                s["text"],
                tuple(s["token_ids"]),
                s["finish_reason"],
                s.get("error"),
                from_json("logprobs", s.get("logprobs")),
            )
            for s in value
        )
    if name == "logprobs":
        return tuple(tuple((int(t), float(lp)) for t, lp in step) for step in value)
    return value

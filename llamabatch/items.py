"""The one resolution of an item, the same for every path (the generator, a pool of
servers, Ray Data, the command line).

An item is a prompt (``str``, UTF-8 ``bytes``, token ids), chat messages, or a mapping
with exactly one of ``"prompt"`` / ``"messages"`` and any *item fields*: every field of
:class:`~llamabatch.SamplingParams` (derived from the dataclass) plus OpenAI's
``response_format``. An item's field replaces the default's (``None``: not set); one
constraint (``grammar`` / ``json_schema`` / ``choices`` / ``response_format``) replaces
the default's whole, ``{"type": "text"}`` lifting it (:func:`with_fields`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from .params import SamplingParams

#: The fields of :class:`~llamabatch.SamplingParams`, in its order.
SAMPLING_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SamplingParams))

#: What an item may set besides its prompt: every sampling field and ``response_format``.
ITEM_FIELDS: tuple[str, ...] = SAMPLING_FIELDS + ("response_format",)

#: The fields that say what a reply may be; an item's one replaces the default's.
CONSTRAINTS = ("grammar", "json_schema", "choices")

#: The keys that hold an item's prompt.
PROMPT_KEYS = ("prompt", "messages")

#: Fields whose values are real numbers (an integer in JSON is read as a float).
_FLOAT_FIELDS = frozenset(
    f.name for f in dataclasses.fields(SamplingParams) if str(f.type).split(" ")[0] == "float"
)


@dataclass(frozen=True, slots=True)
class Item:
    """One item, resolved.

    Attributes:
        prompt: the prompt (``str``, UTF-8 ``bytes`` or token ids), or ``None`` for a chat.
        messages: the chat messages (a list of mappings), or ``None`` for a prompt.
        sampling: the item's sampling params: the default's with the item's fields.
    """

    prompt: object
    messages: list[Mapping[str, Any]] | None
    sampling: SamplingParams


def item_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The line fields that ``obj`` sets (keys of :data:`ITEM_FIELDS` whose value is
    not ``None``), checked; integers given for real-valued fields become floats. Other
    keys are not looked at. ``response_format`` is kept as it is (see :func:`with_fields`).

    Raises:
        ValueError: a field of the wrong type or out of range (named), ``response_format``
            not one of OpenAI's forms, or two constraints at once.
    """
    fields = {k: obj[k] for k in ITEM_FIELDS if k in obj and obj[k] is not None}
    for name in _FLOAT_FIELDS:
        if isinstance(fields.get(name), int) and not isinstance(fields[name], bool):
            fields[name] = float(fields[name])
    with_fields(SamplingParams(), fields)  # checks each value, named in the message
    return fields


def with_fields(base: SamplingParams, fields: Mapping[str, Any]) -> SamplingParams:
    """``base`` with an item's ``fields`` (as :func:`item_fields` returns them): each
    replaces ``base``'s; a constraint (or ``response_format``) replaces ``base``'s
    constraint whole.

    Raises:
        ValueError: a bad value (named), or ``response_format`` with another constraint.
    """
    if not fields:
        return base
    changes = dict(fields)
    if "response_format" in changes:
        given = [k for k in CONSTRAINTS if changes.get(k) is not None]
        if given:
            raise ValueError(f"response_format and {given[0]} are both set; give one")
        from .llamacpp.constraints import response_format_fields  # pure; only when asked

        changes.update(response_format_fields(changes.pop("response_format")))
        for k in CONSTRAINTS:
            changes.setdefault(k, None)  # {"type": "text"}: no constraint
    if any(k in changes for k in CONSTRAINTS):
        for k in CONSTRAINTS:
            changes.setdefault(k, None)
    return dataclasses.replace(base, **changes)


def resolve_item(item: object, base: SamplingParams) -> Item:
    """What ``item`` asks for: its prompt or messages, and ``base`` (the default sampling
    params: the command's flags, the generator's) with its fields.

    Raises:
        ValueError: a mapping without exactly one of prompt / messages, with an unknown
            key or a bad field (named); messages that are not a list of mappings.
    """
    if not isinstance(item, Mapping):
        if is_messages(item):
            return Item(None, list(cast("Sequence[Mapping[str, Any]]", item)), base)
        return Item(item, None, base)
    keys = [k for k in PROMPT_KEYS if item.get(k) is not None]
    if len(keys) != 1:
        raise ValueError('an item mapping needs exactly one of "prompt" or "messages"')
    unknown = sorted(set(item) - set(ITEM_FIELDS) - set(PROMPT_KEYS))
    if unknown:
        raise ValueError(
            f"unknown item field(s) {', '.join(map(repr, unknown))}: valid are "
            f"prompt, messages, {', '.join(ITEM_FIELDS)}"
        )
    sampling = with_fields(base, item_fields(item))
    if keys[0] == "messages":
        messages = item["messages"]
        if not is_messages(messages):
            raise ValueError('messages must be a non-empty list of {"role", "content"} objects')
        return Item(None, list(messages), sampling)
    return Item(item["prompt"], None, sampling)


def is_messages(value: object) -> bool:
    """True for a non-empty sequence of mappings (chat messages), not a prompt."""
    return (
        isinstance(value, Sequence)
        and not isinstance(value, (str, bytes, bytearray))
        and bool(value)
        and all(isinstance(m, Mapping) for m in value)
    )


def per_item_sampling(
    prompts: Iterable[object], sampling: SamplingParams | Sequence[SamplingParams]
) -> Iterator[tuple[object, SamplingParams]]:
    """Each prompt with its sampling params: ``sampling`` for every one, or the items of
    a sequence of them, one per prompt. Checked up front; for a ``prompts`` of unknown
    length, the iterator raises ValueError once the counts are seen to differ (more
    prompts than params, or the prompts ended with params left).

    Raises:
        ValueError: ``sampling`` is not a SamplingParams or a sequence of them, or its
            count differs from that of a sized ``prompts``.
    """
    if isinstance(sampling, SamplingParams):
        return zip(prompts, itertools.repeat(sampling))
    if not isinstance(sampling, Sequence) or isinstance(sampling, (str, bytes)):
        raise ValueError(
            f"sampling is {type(sampling).__name__}; expected a "
            "SamplingParams or a sequence of them, one per prompt"
        )
    bad = [i for i, s in enumerate(sampling) if not isinstance(s, SamplingParams)]
    if bad:
        raise ValueError(
            f"sampling[{bad[0]}] is {type(sampling[bad[0]]).__name__}; "
            "expected a llamabatch.SamplingParams"
        )
    if isinstance(prompts, Sequence) and len(prompts) != len(sampling):
        raise ValueError(
            f"sampling has {len(sampling)} SamplingParams for {len(prompts)} prompts; "
            "give one per prompt, or a single SamplingParams"
        )
    return _exactly(prompts, sampling)


def _exactly(
    prompts: Iterable[object], sampling: Sequence[SamplingParams]
) -> Iterator[tuple[object, SamplingParams]]:
    n = 0
    for prompt in prompts:
        if n == len(sampling):
            raise ValueError(
                f"sampling has {len(sampling)} SamplingParams but there are more "
                "prompts; give one per prompt, or a single SamplingParams"
            )
        yield prompt, sampling[n]
        n += 1
    if n < len(sampling):
        raise ValueError(
            f"sampling has {len(sampling)} SamplingParams but there were {n} prompts; "
            "give one per prompt, or a single SamplingParams"
        )

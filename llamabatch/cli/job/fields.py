"""Per-item sampling fields of ``llamabatch complete``: what a JSONL line (or the body of
an OpenAI batch request) may set for its own reply, checked before any model work.

The names and rules are :mod:`llamabatch.items`' (the one resolution every path uses:
local, pool of servers, Ray): every :class:`~llamabatch.SamplingParams` field plus
``response_format``. A line's fields replace the command's flags for that item; a line
that sets one of ``grammar`` / ``json_schema`` / ``choices`` / ``response_format``
replaces the command's constraint (``--grammar`` / ``--json-schema`` / ``--choices``);
``"response_format": {"type": "text"}`` lifts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...items import CONSTRAINTS, ITEM_FIELDS, item_fields, with_fields

__all__ = ["CONSTRAINTS", "ITEM_FIELDS", "sampling_fields", "with_fields"]


def sampling_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The line fields of one line (only those it sets; a JSON ``null`` means "not
    set"): :func:`llamabatch.items.item_fields`.

    Raises:
        ValueError: a field of the wrong type or out of range (named), or two
            constraints at once.
    """
    return item_fields(obj)

"""Per-item sampling fields of ``llamabatch complete``: what a JSONL line (or the body of
an OpenAI batch request) may set for its own reply, checked before any model work.

The names and rules are :mod:`llamabatch.fields`' (the one resolution every path uses:
local, pool of servers, Ray): every :class:`~llamabatch.SamplingParams` field plus
``response_format``. A line's fields replace the command's flags for that item; a line
that sets one of ``grammar`` / ``json_schema`` / ``choices`` / ``response_format``
replaces the command's constraint (``--grammar`` / ``--json-schema`` / ``--choices``);
``"response_format": {"type": "text"}`` lifts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...fields import CONSTRAINTS, LINE_FIELDS, line_fields, with_fields

__all__ = ["CONSTRAINTS", "LINE_FIELDS", "sampling_fields", "with_fields"]


def sampling_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The line fields of one line (only those it sets; a JSON ``null`` means "not
    set"): :func:`llamabatch.fields.line_fields`.

    Raises:
        ValueError: a field of the wrong type or out of range (named), or two
            constraints at once.
    """
    return line_fields(obj)

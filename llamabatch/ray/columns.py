"""Ray Data batches (``dict[str, np.ndarray]``) as items and results, and back: the
columns of :class:`~llamabatch.ray.BatchCompleter` (docs/ray.md). Cells come back from
Arrow as NumPy scalars and arrays, ``None`` or ``NaN`` when missing (a nullable integer
column is read as floats): each is made a plain value first (:func:`plain`), a whole float
given for an integer field is read as the integer.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..items import ITEM_FIELDS
from ..params import SamplingParams

#: The per-row column of line fields (a mapping, or its JSON text).
SAMPLING_PARAMS_COLUMN = "sampling_params"

#: Line fields whose values are integers (``5.0`` from a nullable column is read as 5).
_INT_FIELDS = frozenset(
    f.name
    for f in dataclasses.fields(SamplingParams)
    if str(f.type).split(" ")[0] == "int" or str(f.type).startswith("int |")
)
#: Cells that may be JSON text of an object or a list (``json_schema`` may be JSON text
#: anyway: SamplingParams reads it).
_JSON_TEXT = ("messages", "response_format", SAMPLING_PARAMS_COLUMN)


def plain(value: object) -> Any:
    """A cell as plain Python values: NumPy arrays become lists, NumPy scalars Python
    numbers, mappings dicts (recursively); ``None`` and float ``NaN`` become ``None``."""
    if isinstance(value, np.ndarray):
        return (
            [plain(v) for v in value.tolist()]
            if value.dtype != object
            else [plain(v) for v in value]
        )
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def batch_rows(batch: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of a batch (columns of equal length) as dicts of plain values.

    Raises:
        ValueError: the columns are of different lengths.
    """
    lengths = {name: len(column) for name, column in batch.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"the batch's columns differ in length: {lengths}")
    n = next(iter(lengths.values()), 0)
    return [{name: plain(batch[name][k]) for name in batch} for k in range(n)]


def row_item(row: Mapping[str, Any]) -> dict[str, Any]:
    """The item mapping of one row (for :func:`llamabatch.items.resolve_item`): its
    ``prompt`` or ``messages``, the fields of its ``sampling_params``, then its field
    columns; missing values left out.

    Raises:
        ValueError: a JSON-text cell that is not valid JSON, or ``sampling_params`` that
            is not a mapping (named).
    """
    cells = {k: _json_cell(k, v) for k, v in row.items() if v is not None}
    item: dict[str, Any] = {}
    given = cells.get(SAMPLING_PARAMS_COLUMN)
    if given is not None:
        if not isinstance(given, Mapping):
            raise ValueError(
                f"{SAMPLING_PARAMS_COLUMN} is {type(given).__name__}: give a mapping of "
                "line fields (or its JSON text)"
            )
        item.update({k: v for k, v in given.items() if v is not None})
    item.update({k: cells[k] for k in ITEM_FIELDS if k in cells})
    for key in ("prompt", "messages"):
        if key in cells:
            item[key] = cells[key]
    for name in _INT_FIELDS:
        value = item.get(name)
        if isinstance(value, float) and value.is_integer():
            item[name] = int(value)
    return item


def _json_cell(name: str, value: Any) -> Any:
    if name in _JSON_TEXT and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{name} is a string but not valid JSON: {exc}") from None
    return value


def result_columns(records: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """Columns of ``records`` (one per row): one NumPy array per name, ``None`` where a
    record lacks the name; lists and mappings are kept whole, one object per cell."""
    columns: dict[str, Any] = {}
    for name in names:
        values = [r.get(name) for r in records]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            columns[name] = np.array(values, dtype=np.int64)
        else:
            column = np.empty(len(values), dtype=object)
            for k, v in enumerate(values):
                column[k] = v
            columns[name] = column
    return columns

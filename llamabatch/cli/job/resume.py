"""Resuming a job: which ids an existing output file already holds, and its cut-off end.

``llamabatch complete`` writes one JSON object per line and flushes and fsyncs after each
group, so a job killed at any moment (SIGKILL, a crash, a power cut) leaves whole lines,
possibly followed by one line cut off part-way (no newline at its end). :func:`scan_output`
reads such a file: the ids of its whole lines, and the size up to the end of the last one,
to which the caller truncates the file before appending.

Ids are compared as JSON values, by :func:`id_key`: the integer ``7`` and the string
``"7"`` are different ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import OutputCorrupt


def id_key(value: object) -> str:
    """The key an id is compared by: its JSON text (so ``7`` and ``"7"`` differ)."""
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class OutputScan:
    """What an existing output file holds.

    Attributes:
        done: :func:`id_key` of the id of every whole line.
        n_lines: whole (newline-terminated) non-blank lines.
        good_size: bytes up to the end of the last whole line.
        cut_bytes: bytes after it: a line cut off part-way (0 when the file ends with a
            newline).
    """

    done: frozenset[str]
    n_lines: int
    good_size: int
    cut_bytes: int

    @property
    def is_cut(self) -> bool:
        """True when the file ends with a line cut off part-way."""
        return self.cut_bytes > 0


def scan_output(f: BinaryIO, name: str = "output") -> OutputScan:
    """Read an existing output file from its start (``f`` opened in binary mode).

    Every newline-terminated line must be blank or a JSON object with an ``"id"`` (the
    item's, or for an OpenAI batch response line, whose item is its ``"custom_id"``); the
    bytes after the last newline, if any, are a cut-off line, whatever they hold.

    Raises:
        OutputCorrupt: a whole line is not a JSON object with an ``"id"`` (named by its
            line number): the file was not written by ``llamabatch complete`` or was
            edited, so it is left alone.
    """
    done: set[str] = set()
    n_lines = good_size = cut_bytes = 0
    for number, raw in enumerate(f, start=1):
        if not raw.endswith(b"\n"):
            cut_bytes = len(raw)
            break
        good_size += len(raw)
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:  # UnicodeDecodeError included
            raise OutputCorrupt(
                f"{name}:{number}: line {number} of the existing output is "
                f"not valid JSON ({exc}); cannot resume from it"
            ) from None
        if not isinstance(obj, dict) or "id" not in obj:
            raise OutputCorrupt(
                f"{name}:{number}: line {number} of the existing output is "
                'not a JSON object with an "id"; cannot resume from it'
            )
        # an OpenAI batch response line: the item is its custom_id (its id is the line's)
        done.add(id_key(obj["custom_id"] if "custom_id" in obj else obj["id"]))
        n_lines += 1
    return OutputScan(frozenset(done), n_lines, good_size, cut_bytes)

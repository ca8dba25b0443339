"""Reading the input of ``llamabatch complete``: a JSONL or text file of prompts.

- JSONL: one JSON object per line, ``{"prompt": "...", "id": ...}``; ``id`` (a string or
  an integer) is optional and defaults to the 1-based line number. Chosen for a
  ``.jsonl`` file, or for any file whose non-blank lines all parse as JSON objects.
- Text: one prompt per line, id = the 1-based line number. A prompt cannot contain a
  newline in this format (chat-formatted prompts need JSONL, with ``\\n`` in the string).

Blank lines are skipped in both formats (line numbers still count them). Ids must be
unique. Every problem is a :class:`~llamabatch.cli.UsageError` naming the line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .cli import UsageError

FORMATS = ("auto", "jsonl", "text")


@dataclass(frozen=True, slots=True)
class PromptItem:
    """One input prompt.

    Attributes:
        id: the ``id`` of the JSONL object, else the 1-based line number.
        prompt: the prompt text (special tokens such as ``<|im_start|>`` are parsed).
        line: 1-based line number in the input file.
    """

    id: str | int
    prompt: str
    line: int


def _decoded_lines(path: Path) -> list[tuple[int, str]]:
    """The non-blank lines of ``path`` as (1-based line number, text), UTF-8 checked."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"prompts file not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"prompts path is a directory: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read prompts file {path}: {exc.strerror or exc}") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{path}:{number}: not valid UTF-8 ({exc.reason} at byte "
                             f"{exc.start})") from None
        text = text.removesuffix("\r")
        if text.strip():
            lines.append((number, text))
    return lines


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _jsonl_item(path: Path, number: int, text: str) -> PromptItem:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path}:{number}: malformed JSON on line {number}: {exc}") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{path}:{number}: line {number} is not a JSON object")
    if "prompt" not in obj:
        hint = " ('messages' input is not supported yet)" if "messages" in obj else ""
        raise UsageError(f"{path}:{number}: line {number} has no \"prompt\" string{hint}")
    prompt = obj["prompt"]
    if not isinstance(prompt, str):
        raise UsageError(f"{path}:{number}: \"prompt\" on line {number} is "
                         f"{type(prompt).__name__}, not a string")
    item_id = obj.get("id", number)
    if isinstance(item_id, bool) or not isinstance(item_id, (str, int)):
        raise UsageError(f"{path}:{number}: \"id\" on line {number} must be a string or an "
                         f"integer, not {json.dumps(item_id)}")
    for name, value in (("prompt", prompt), ("id", item_id)):
        if isinstance(value, str) and not _is_encodable(value):
            raise UsageError(f"{path}:{number}: \"{name}\" on line {number} holds a lone "
                             "surrogate escape (not valid Unicode text)")
    return PromptItem(id=item_id, prompt=prompt, line=number)


def _is_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def read_prompts(path: str | os.PathLike[str], fmt: str = "auto") -> list[PromptItem]:
    """Read the prompts of a JSONL or text file (see the module doc for the formats).

    Args:
        path: the input file (UTF-8; a BOM is ignored; ``\\r\\n`` line ends accepted).
        fmt: ``"jsonl"``, ``"text"`` or ``"auto"`` (JSONL for a ``.jsonl`` name or when
            every non-blank line is a JSON object, else text).

    Returns:
        the prompts in file order, blank lines skipped.

    Raises:
        UsageError: the file is missing or unreadable, a line is not valid UTF-8, a
            JSONL line is malformed (named by its line number), or an id is repeated.
        ValueError: ``fmt`` is not one of :data:`FORMATS`.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r} is not one of {FORMATS}")
    p = Path(path)
    lines = _decoded_lines(p)
    if fmt == "auto":
        is_jsonl = p.suffix.lower() == ".jsonl" or (
            bool(lines) and all(_is_json_object(text) for _, text in lines))
        fmt = "jsonl" if is_jsonl else "text"
    if fmt == "text":
        return [PromptItem(id=number, prompt=text, line=number) for number, text in lines]
    items = [_jsonl_item(p, number, text) for number, text in lines]
    first_line: dict[str, int] = {}
    for item in items:
        key = json.dumps(item.id)
        if key in first_line:
            raise UsageError(f"{p}:{item.line}: duplicate id {key} on lines "
                             f"{first_line[key]} and {item.line}")
        first_line[key] = item.line
    return items

"""Reading the input of ``llamabatch complete`` (the formats: its ``--help``, from
:mod:`llamabatch.cli.complete`): JSONL, OpenAI batch requests
(:mod:`llamabatch.shapes.requests`) or text, ``-``
for standard input. A bad line is a :class:`~llamabatch.cli.common.UsageError` naming it,
or, with ``skip_bad``, a :class:`BadLine` in its place. Each entry keeps its id and the
digest of its line: :func:`id_key` is how ids compare, :func:`line_digest` what
``--resume`` checks a line against (:mod:`.resume`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...chat import ChatTemplate, ChatTemplateError, chat_prompt, check_messages
from ...items import ITEM_FIELDS, item_fields, with_fields
from ...params import SamplingParams
from ...shapes.requests import is_request, request_parts
from ..common import UsageError

#: The path that stands for standard input.
STDIN = Path("-")

FORMATS = ("auto", "jsonl", "text")


@dataclass(frozen=True, slots=True)
class LineItem:
    """One item read from a line of the input.

    Attributes:
        id: the JSONL ``id``, else the 1-based line number; line: that line number.
        prompt: the prompt text; a chat's once :func:`apply_chat_template` made it.
        messages: a chat's messages, else ``None``.
        fields: the item's own checked fields (:mod:`llamabatch.items`).
        url: the OpenAI endpoint it was asked of, or ``None`` for a plain line.
        is_text: a line of a text file (the command may wrap it in a template).
        digest: the digest of its line (:func:`line_digest`; not compared).
    """

    id: str | int
    prompt: str | list[int] | None
    line: int
    messages: list[dict[str, Any]] | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    url: str | None = None
    is_text: bool = False
    digest: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class BadLine:
    """An input line that cannot be completed, kept in its place (``--skip-bad``).

    Attributes:
        id: the line's own id when it has a valid one (``id``, or an OpenAI request's
            ``custom_id``), else the line number.
        line, error, digest: as :class:`LineItem`'s; ``error`` starts with ``line N:``.
    """

    id: str | int
    line: int
    error: str
    digest: str = field(default="", compare=False)


Line = LineItem | BadLine


def id_key(value: object) -> str:
    """The key an id is compared by: its JSON text (so ``7`` and ``"7"`` differ)."""
    return json.dumps(value, ensure_ascii=False)


def line_digest(item_id: object, text: str) -> str:
    """The digest of one input line: SHA-256 of its id (:func:`id_key`) and its text,
    the first 16 hex digits (kept in ``OUT.fingerprint``, :mod:`.resume`)."""
    data = f"{id_key(item_id)}\n{text}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()[:16]


class _Bad(ValueError):
    """One line is bad, saying why; ``id``: the line's own valid id (``custom_id`` of a
    request), or ``None``."""

    id: str | int | None = None


def _decoded_lines(path: Path) -> list[tuple[int, str | None, str | None]]:
    """The non-blank lines of ``path`` (``-``: standard input) as (line number, text,
    UTF-8 error), BOM skipped."""
    try:
        data = sys.stdin.buffer.read() if path == STDIN else path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"prompts file not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"prompts path is a directory: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read prompts file {path}: {exc.strerror or exc}") from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines: list[tuple[int, str | None, str | None]] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8").removesuffix("\r")
        except UnicodeDecodeError as exc:
            lines.append((number, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})"))
            continue
        if text.strip():
            lines.append((number, text, None))
    return lines


def _is_json_object(text: str | None) -> bool:
    try:
        return text is not None and isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _is_encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(name: str, value: object) -> None:
    if isinstance(value, str) and not _is_encodable(value):
        raise _Bad(f"{name} holds a lone surrogate escape (not valid Unicode text)")


def _readable_id(obj: Mapping[str, Any]) -> str | int | None:
    """The line's own id when it is a valid one: a request's ``custom_id`` (non-empty
    text), else its ``id`` (text or an integer); ``None`` when it has none."""
    if is_request(obj):
        value = obj["custom_id"]
        return value if isinstance(value, str) and value and _is_encodable(value) else None
    value = obj.get("id")
    if isinstance(value, str) and _is_encodable(value):
        return value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _jsonl_item(number: int, text: str, unknown: dict[str, int]) -> LineItem:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise _Bad(f"malformed JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _Bad("not a JSON object")
    try:
        return _jsonl_object(number, obj, unknown)
    except _Bad as exc:  # its error line keeps the line's own id where it has one
        exc.id = _readable_id(obj)
        raise


def _jsonl_object(number: int, obj: dict[str, Any], unknown: dict[str, int]) -> LineItem:
    url = None
    if is_request(obj):
        try:
            url, obj, extra = request_parts(obj)
        except ValueError as exc:
            raise _Bad(str(exc)) from None
        for key in extra:
            unknown.setdefault(key, number)
    for key in obj:
        if key not in ("id", "prompt", "messages") and key not in ITEM_FIELDS:
            unknown.setdefault(key, number)
    try:
        fields = item_fields(obj)
    except ValueError as exc:
        raise _Bad(str(exc)) from None
    item_id = obj.get("id", number)
    if isinstance(item_id, bool) or not isinstance(item_id, (str, int)):
        raise _Bad(f'"id" must be a string or an integer, not {json.dumps(item_id)}')
    _check_text('"id"', item_id)
    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        raise _Bad(
            'has both "prompt" and "messages"; give one'
            if has_prompt
            else 'has neither a "prompt" string nor a "messages" list'
        )
    if has_messages:
        try:
            messages = check_messages(obj["messages"])
        except ValueError as exc:
            raise _Bad(str(exc)) from None
        for k, message in enumerate(messages):
            for key in ("role", "content"):
                _check_text(f'"messages"[{k}]["{key}"]', message[key])
        return LineItem(
            id=item_id, prompt=None, line=number, messages=messages, fields=fields, url=url
        )
    prompt = obj["prompt"]
    if not isinstance(prompt, str):
        raise _Bad(f'"prompt" is {type(prompt).__name__}, not a string')
    _check_text('"prompt"', prompt)
    return LineItem(id=item_id, prompt=prompt, line=number, fields=fields, url=url)


def _digested(entry: Line, text: str) -> Line:
    """``entry`` with the digest of its input line (its id and ``text``)."""
    return dataclasses.replace(entry, digest=line_digest(entry.id, text))


def _entry(
    path: Path,
    number: int,
    text: str | None,
    error: str | None,
    fmt: str,
    skip_bad: bool,
    unknown: dict[str, int],
) -> Line:
    try:
        if error is not None:
            raise _Bad(error)
        if fmt == "text":
            return LineItem(id=number, prompt=text, line=number, is_text=True)
        return _jsonl_item(number, text, unknown)
    except _Bad as exc:
        if skip_bad:
            item_id = number if exc.id is None else exc.id
            return BadLine(id=item_id, line=number, error=f"line {number}: {exc}")
        raise UsageError(
            f"{path}:{number}: line {number}: {exc} (--skip-bad writes an "
            "error line in its place and goes on)"
        ) from None


def _check_unique(path: Path, entries: list[Line]) -> None:
    first: dict[str, Line] = {}
    for entry in entries:
        key = json.dumps(entry.id)
        other = first.setdefault(key, entry)
        if other is not entry:
            bad = [e.line for e in (other, entry) if isinstance(e, BadLine) and e.id == e.line]
            why = (
                (f" (line {bad[0]} is malformed: its error line takes its line number as id)")
                if bad
                else ""
            )
            raise UsageError(
                f"{path}:{entry.line}: duplicate id {key} on lines "
                f"{other.line} and {entry.line}{why}"
            )


def read_prompts(
    path: str | os.PathLike[str],
    fmt: str = "auto",
    *,
    skip_bad: bool = False,
    warn: Callable[[str], None] | None = None,
) -> list[Line]:
    """The lines of ``path`` (UTF-8, BOM ignored) in file order, blank ones skipped;
    ``fmt`` ``"auto"``: JSONL for a ``.jsonl`` name or when every line is a JSON object.
    ``warn`` hears each unknown key once (ignored otherwise).

    Raises:
        UsageError: the file is missing or unreadable, a line is bad (without
            ``skip_bad``), an id is repeated.
        ValueError: ``fmt`` is not one of :data:`FORMATS`.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r} is not one of {FORMATS}")
    p = Path(path)
    lines = _decoded_lines(p)
    if fmt == "auto":
        is_jsonl = p.suffix.lower() == ".jsonl" or (
            bool(lines) and all(_is_json_object(text) for _, text, _ in lines)
        )
        fmt = "jsonl" if is_jsonl else "text"
    unknown: dict[str, int] = {}
    entries = [
        _digested(_entry(p, number, text, error, fmt, skip_bad, unknown), text or error or "")
        for number, text, error in lines
    ]
    _check_unique(p, entries)
    if warn is not None:
        known = ", ".join(("id", "prompt", "messages") + ITEM_FIELDS)
        for key, number in unknown.items():
            warn(
                f"{p}:{number}: unknown field {json.dumps(key)} ignored, here and on any "
                f"later line (known fields: {known})"
            )
    return entries


def with_text_template(
    entries: list[Line],
    *,
    system: str | None = None,
    template: str | None = None,
    raw: bool = False,
) -> list[Line]:
    """Each text line through ``template`` (``{text}`` where it goes), then, unless
    ``raw``, a chat: an optional ``system`` message and the user's.

    Raises:
        ValueError: ``template`` has no ``{text}``; ``system`` together with ``raw``.
    """
    if template is not None and "{text}" not in template:
        raise ValueError(
            f"--template {template!r} has no {{text}}: put {{text}} where each line goes"
        )
    if raw and system is not None:
        raise ValueError("--system needs the chat template; it cannot be used with --raw")
    result: list[Line] = []
    for entry in entries:
        if isinstance(entry, LineItem) and entry.is_text:
            text = entry.prompt if template is None else template.replace("{text}", entry.prompt)
            if raw:
                entry = dataclasses.replace(entry, prompt=text)
            else:
                messages = ([{"role": "system", "content": system}] if system else []) + [
                    {"role": "user", "content": text}
                ]
                entry = dataclasses.replace(entry, prompt=None, messages=messages)
        result.append(entry)
    return result


def apply_chat_template(
    entries: list[Line],
    template: ChatTemplate,
    path: Path,
    *,
    llm: Any = None,
    skip_bad: bool = False,
) -> list[Line]:
    """Every ``messages`` item with its prompt (:func:`~llamabatch.chat.chat_prompt`: token
    ids with ``llm``); one the template refuses is a UsageError naming its line, or with
    ``skip_bad`` a :class:`BadLine` keeping its id."""
    result: list[Line] = []
    for entry in entries:
        if isinstance(entry, LineItem) and entry.messages is not None:
            try:
                entry = dataclasses.replace(
                    entry, prompt=chat_prompt(entry.messages, template, llm)
                )
            except (ValueError, RuntimeError, UnicodeError) as exc:
                if not skip_bad:
                    raise UsageError(
                        f"{path}:{entry.line}: line {entry.line}: {exc} "
                        "(--skip-bad writes an error line in its place and goes on)"
                    ) from None
                entry = BadLine(entry.id, entry.line, f"line {entry.line}: {exc}", entry.digest)
        result.append(entry)
    return result


def with_chat_prompts(
    llm: Any, entries: list[Line], path: Path, *, skip_bad: bool = False
) -> list[Line]:
    """:func:`apply_chat_template` with ``llm``'s template and tokens; UsageError when the
    model has none (naming the first line that needs one)."""
    first = next((e.line for e in entries if isinstance(e, LineItem) and e.messages), None)
    if first is None:
        return entries
    try:
        template = ChatTemplate.from_llama(llm)
    except ChatTemplateError as exc:
        raise UsageError(f'{path}:{first}: line {first} has "messages", but {exc}') from None
    return apply_chat_template(entries, template, path, llm=llm, skip_bad=skip_bad)


def item_samplings(entries: list[Line], base: SamplingParams, path: Path) -> list[SamplingParams]:
    """Each item's sampling: ``base`` (the flags) with its line's fields; UsageError
    naming a line whose fields do not go with ``base``."""
    out = []
    for it in entries:
        if isinstance(it, LineItem):
            try:
                out.append(with_fields(base, it.fields))
            except ValueError as exc:
                raise UsageError(f"{path}:{it.line}: line {it.line}: {exc}") from None
    return out


def job_items(items: list[LineItem]) -> Iterator[object]:
    """What a generator gets for each item: its prompt (a chat's token ids once
    :func:`with_chat_prompts` made them, else its messages), as an item mapping with the
    line's own fields when it has any (:mod:`llamabatch.items`)."""
    for item in items:
        key = "messages" if item.prompt is None else "prompt"
        value = getattr(item, key)
        yield {key: value, **item.fields} if item.fields else value

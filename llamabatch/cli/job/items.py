"""A PROMPTS file's items as ``llamabatch tune`` and ``llamabatch bench --prompts`` take
them: read as ``llamabatch complete`` reads them (:func:`.input.read_prompts`), text lines
wrapped (:func:`.input.with_text_template`), each item's sampling the base with the
line's own fields (:func:`llamabatch.items.with_fields`); then, once the model is
loaded, chats rendered with its chat template.

Everything that can be wrong with the file is found by :func:`read_items`, before any
model work, as a :class:`~llamabatch.cli.common.UsageError` naming the file and line
(the same messages ``llamabatch complete`` gives).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...measure.one_at_a_time import check_one_reply
from ...measure.records import WorkItem
from ...params import SamplingParams
from ..common import UsageError
from .input import (
    Line,
    LineItem,
    item_samplings,
    read_prompts,
    with_chat_prompts,
    with_text_template,
)


@dataclass(frozen=True, slots=True)
class ReadItems:
    """A prompts file read and checked, before the model is loaded.

    Attributes:
        path: the file (``-``: standard input).
        entries: its entries, text lines wrapped (chats not rendered yet).
        items: the :class:`~.input.LineItem` entries, in file order.
        samplings: each item's :class:`~llamabatch.SamplingParams`.
    """

    path: Path
    entries: list[Line]
    items: list[LineItem]
    samplings: list[SamplingParams]

    def work_items(self, llm: Any) -> list[WorkItem]:
        """The items as every path takes them (a chat as its messages), after checking
        each chat with ``llm``'s chat template.

        Raises:
            UsageError: the model has no chat template, or it refused an item (named
                by its line).
        """
        with_chat_prompts(llm, self.entries, self.path)
        return [
            WorkItem(it.id, it.prompt if it.messages is None else it.messages, s)
            for it, s in zip(self.items, self.samplings)
        ]


def read_items(
    path: Path,
    fmt: str,
    base: SamplingParams,
    *,
    system: str | None = None,
    template: str | None = None,
    raw: bool = False,
    warn: Callable[[str], None] | None = None,
    command: str = "tune",
) -> ReadItems:
    """Read the items of ``path`` and each one's sampling: ``base`` with its line's fields.

    Args:
        path: the prompts file (JSONL, OpenAI batch requests or text; ``-``: stdin).
        fmt: ``"auto"``, ``"jsonl"`` or ``"text"``.
        base: the sampling of items that set nothing themselves.
        system, template, raw: how a text line becomes a prompt (``--system``,
            ``--template``, ``--raw``).
        warn: hears about unknown fields (once per file and field).
        command: the command that reads them, for the messages.

    Raises:
        UsageError: the file is missing, unreadable or holds a bad line (named by its
            line, as ``llamabatch complete`` names it), an id is repeated, ``template``
            has no ``{text}``, ``system`` with ``raw``, or a line's fields do not go
            with ``base``, or a line asks for more than one generated reply (``n`` > 1,
            ``score_choices`` with choices, ``logprobs``: the command compares one
            reply per item with ``Llama.create_completion``'s one).
    """
    entries = read_prompts(path, fmt, warn=warn)
    try:
        entries = with_text_template(entries, system=system, template=template, raw=raw)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    items = [e for e in entries if isinstance(e, LineItem)]
    samplings = item_samplings(entries, base, path)
    try:
        check_one_reply(samplings, lambda k: f"{path}:{items[k].line}", command)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return ReadItems(path, entries, items, samplings)


__all__ = ["ReadItems", "read_items"]

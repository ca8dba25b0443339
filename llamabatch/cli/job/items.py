"""A PROMPTS file's items as ``llamabatch tune`` and ``llamabatch bench --prompts`` take
them, read and checked as ``llamabatch complete`` reads them, before any model work."""

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
    """The items of ``path`` (read as :func:`.input.read_prompts`, text lines through
    ``system`` / ``template`` / ``raw``) and each one's sampling: ``base`` with its fields.

    Raises:
        UsageError: what ``llamabatch complete`` refuses in the file or the options, or an
            item ``command`` cannot compare one at a time (:func:`check_one_reply`).
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

"""What the item paths take and give back (plain data): a :class:`WorkItem`, and the
:class:`PassReplies` of a pass."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..params import SamplingParams

#: Seed of items whose sampling sets none: every path must draw alike.
DEFAULT_SEED = 0


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One item of a measurement, as every path takes it.

    Attributes:
        id: the item's id (its input id, else its index).
        prompt: a prompt (string or token ids) or a chat (``{"role", "content"}``
            messages: ``create_chat_completion`` one at a time, the chat template in
            the engine).
        sampling: its sampling, reply cap and constraint.
    """

    id: str | int
    prompt: object
    sampling: SamplingParams


def seeded(items: Sequence[WorkItem], offset: int = 0) -> list[WorkItem]:
    """``items`` with seed ``(seed or DEFAULT_SEED) + offset`` (mod 2**32): every path,
    and every setting, draws alike; ``offset`` 1 gives the floor's second draw."""
    out = []
    for it in items:
        seed = DEFAULT_SEED if it.sampling.seed is None else it.sampling.seed
        sampling = dataclasses.replace(it.sampling, seed=(seed + offset) % 2**32)
        out.append(dataclasses.replace(it, sampling=sampling))
    return out


@dataclass(frozen=True, slots=True)
class PassReply:
    """One item's reply in one pass.

    Attributes:
        id: the item's id.
        text: the reply text (``""`` for a failed item).
        finish_reason: ``"stop"``, ``"length"`` or ``"error"``.
        error: what went wrong, for a failed item; else ``None``.
        n_tokens: reply tokens.
        path: ``"create_completion"`` / ``"create_chat_completion"`` one at a time,
            ``"batch"`` / ``"alone"`` in the slot engine (see ``Completion.path``).
        label: the reply's label (:mod:`llamabatch.measure.agreement`), ``None`` if none.
    """

    id: str | int
    text: str
    finish_reason: str
    error: str | None
    n_tokens: int
    path: str
    label: Any = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def compared(self) -> tuple[str | None, Any]:
        """``(text, label)``, text ``None`` for a failed item (it agrees with nothing)."""
        return (self.text if self.ok else None, self.label)


@dataclass(frozen=True, slots=True)
class PassReplies:
    """What an item path returns for a pass: one reply per item, in item order.

    Attributes:
        items_batched, items_alone: how the items were completed (one at a time: alone).
        batch_disabled_reason: the generator's ``stats.batch_disabled_reason`` after it.
    """

    replies: tuple[PassReply, ...]
    items_batched: int = 0
    items_alone: int = 0
    batch_disabled_reason: str | None = None

"""What a tune run records: every reply of every run of every round (plain data).

Names of the settings: ``"one_at_a_time"`` (the baseline), ``"floor"`` (a second
one-at-a-time run with another seed, only when sampling is random) and ``"slots=K"``
for the slot engine with K slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BASELINE = "one_at_a_time"
FLOOR = "floor"


def setting_name(slots: int) -> str:
    """``"slots=K"``, the name of the engine's setting with K slots."""
    return f"slots={slots}"


@dataclass(frozen=True, slots=True)
class TuneReply:
    """One reply of one run.

    Attributes:
        id: the item's id (its input id, else its 0-based index in the prompts).
        text: the reply text (``""`` for a failed item).
        finish_reason: ``"stop"``, ``"length"`` or ``"error"``.
        error: what went wrong, for a failed item; else ``None``.
        n_tokens: reply tokens.
        path: ``"create_completion"`` / ``"create_chat_completion"`` for the baseline,
            ``"batch"`` / ``"alone"`` for the slot engine (see ``Completion.path``).
        label: the reply's label (see :mod:`llamabatch.measure.agreement`), ``None`` if none.
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
        """True unless the item failed."""
        return self.error is None

    def compared(self) -> tuple[str | None, Any]:
        """``(text, label)`` for :func:`~llamabatch.measure.agreement.agreement`; text
        ``None`` for a failed item."""
        return (self.text if self.ok else None, self.label)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One setting's pass over one round's items.

    Attributes:
        setting: its name (see the module doc).
        slots: 1 for the baseline and the floor, else the engine's slots.
        seconds: wall seconds of the whole pass (``None`` if it failed as a whole).
        replies: one per item, in the round's item order (empty if it failed).
        error: why the whole pass failed (e.g. the generator could not be made).
        items_batched, items_alone: of the engine's replies, how many went each way.
        batch_disabled_reason: the generator's ``stats.batch_disabled_reason`` after the pass.
    """

    setting: str
    slots: int
    seconds: float | None
    replies: tuple[TuneReply, ...]
    error: str | None = None
    items_batched: int = 0
    items_alone: int = 0
    batch_disabled_reason: str | None = None

    @property
    def s_per_item(self) -> float | None:
        """``seconds / len(replies)``; ``None`` for a failed pass."""
        if self.seconds is None or not self.replies:
            return None
        return self.seconds / len(self.replies)


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One round: its items and every run over them, in the order they ran.

    Attributes:
        index: 0-based.
        item_ids: ids of the round's items (disjoint from every other round's).
        order: the settings' names in the order they ran.
        runs: one :class:`RunRecord` per setting, in ``order``.
    """

    index: int
    item_ids: tuple[str | int, ...]
    order: tuple[str, ...]
    runs: tuple[RunRecord, ...]

    def run(self, setting: str) -> RunRecord | None:
        """The run of ``setting`` in this round, or ``None``."""
        return next((r for r in self.runs if r.setting == setting), None)

"""Agreement of two runs over the same items: equal replies, and equal labels.

A reply's *label* is what a tagger keeps of it:

- with ``choices``: the reply itself, stripped of surrounding white space;
- with ``json_schema``: the parsed JSON value (its fields), compared as canonical JSON;
- with a label regex: its first match in the reply (group 1 when the pattern has a
  group, else the whole match).

A reply without a label (no match, JSON that does not parse) has the label ``None``,
which equals another ``None``. A failed item (``finish_reason == "error"``) agrees with
nothing, not even another failure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..params import SamplingParams


def label_rule(samplings: Sequence[SamplingParams], label_regex: str | None) -> str | None:
    """Which rule makes labels: ``"label_regex"`` when given, else ``"choices"`` or
    ``"json_schema"`` when every item has that constraint, else ``None`` (no labels)."""
    if label_regex is not None:
        return "label_regex"
    for name in ("choices", "json_schema"):
        if samplings and all(getattr(s, name) is not None for s in samplings):
            return name
    return None


def compile_label_regex(pattern: str | None) -> re.Pattern[str] | None:
    """``pattern`` compiled, or ``None``.

    Raises:
        ValueError: not a valid regular expression (the message quotes it).
    """
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(
            f"label_regex={pattern!r} is not a valid regular expression: {exc}"
        ) from None


def label_of(text: str | None, rule: str | None, regex: re.Pattern[str] | None = None) -> Any:
    """The label of a reply ``text`` under ``rule`` (see the module doc); ``None`` when
    it has none. With ``json_schema`` the label is the canonical JSON text of the value."""
    if text is None or rule is None:
        return None
    if rule == "choices":
        return text.strip()
    if rule == "json_schema":
        try:
            return json.dumps(json.loads(text), sort_keys=True)
        except ValueError:
            return None
    if regex is None:
        raise ValueError("rule 'label_regex' needs the compiled regex")
    match = regex.search(text)
    if match is None:
        return None
    return match.group(1) if regex.groups else match.group(0)


@dataclass(frozen=True, slots=True)
class Agreement:
    """How often two runs agree over the same items.

    Attributes:
        n_items: items compared.
        n_exact: items whose replies are both ok and exactly equal.
        n_label: items whose replies are both ok and have equal labels (``None`` when
            there is no label rule).
    """

    n_items: int
    n_exact: int
    n_label: int | None

    @property
    def exact_share(self) -> float | None:
        """``n_exact / n_items`` in percent; ``None`` for no items."""
        return 100.0 * self.n_exact / self.n_items if self.n_items else None

    @property
    def label_share(self) -> float | None:
        """``n_label / n_items`` in percent; ``None`` without labels or items."""
        if self.n_label is None or not self.n_items:
            return None
        return 100.0 * self.n_label / self.n_items

    def __add__(self, other: Agreement) -> Agreement:
        n_label = (
            None if self.n_label is None or other.n_label is None else self.n_label + other.n_label
        )
        return Agreement(self.n_items + other.n_items, self.n_exact + other.n_exact, n_label)


def agreement(
    a: Sequence[tuple[str | None, Any]], b: Sequence[tuple[str | None, Any]], has_labels: bool
) -> Agreement:
    """Agreement of two runs: ``a[i]`` and ``b[i]`` are ``(text, label)`` of item ``i``,
    ``text`` ``None`` for a failed item.

    Raises:
        ValueError: the runs have different lengths.
    """
    if len(a) != len(b):
        raise ValueError(f"runs of {len(a)} and {len(b)} items cannot be compared")
    both = [(x, y) for x, y in zip(a, b) if x[0] is not None and y[0] is not None]
    n_exact = sum(x[0] == y[0] for x, y in both)
    n_label = sum(x[1] == y[1] for x, y in both) if has_labels else None
    return Agreement(len(a), n_exact, n_label)

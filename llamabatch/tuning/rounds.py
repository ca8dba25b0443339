"""Which items each round of a tune run completes, and in which order the settings run.

Every round gets a fresh, disjoint sample of the prompts (so no path replays a prompt
that an earlier round left in a cache); within a round every setting completes the same
items, and the order of the settings alternates from round to round (forward, backward,
forward ...), so a slow drift of the machine hits every setting alike.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

#: Items per round when none is asked for: the owner's "8 waiting items".
DEFAULT_ITEMS = 8


def items_per_round(n_prompts: int, rounds: int, items: int | None) -> int:
    """How many items each round takes: ``items``, or ``min(8, n_prompts // rounds)``.

    Raises:
        ValueError: ``rounds < 1``, ``items < 1``, or fewer than ``rounds * items``
            prompts (the rounds must be disjoint); the message says what would fit.
    """
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"rounds={rounds!r} is out of range: valid is an integer >= 1")
    if items is None:
        items = min(DEFAULT_ITEMS, n_prompts // rounds)
        if items < 1:
            raise ValueError(
                f"{n_prompts} prompts cannot fill {rounds} disjoint rounds of at least one "
                f"item: give at most rounds={max(n_prompts, 1)} or more prompts"
            )
        return items
    if not isinstance(items, int) or isinstance(items, bool) or items < 1:
        raise ValueError(f"items={items!r} is out of range: valid is an integer >= 1")
    if rounds * items > n_prompts:
        raise ValueError(
            f"rounds={rounds} x items={items} needs {rounds * items} distinct prompts, but "
            f"there are {n_prompts}: give items <= {n_prompts // rounds} or fewer rounds"
        )
    return items


def sample_rounds(n_prompts: int, rounds: int, items: int, seed: int = 0) -> list[list[int]]:
    """``rounds`` disjoint lists of ``items`` prompt indices each, drawn without
    replacement with ``random.Random(seed)``; each list in input order.

    Raises:
        ValueError: ``rounds * items > n_prompts``.
    """
    if rounds * items > n_prompts:
        raise ValueError(f"{rounds} x {items} items do not fit in {n_prompts} prompts")
    drawn = random.Random(seed).sample(range(n_prompts), rounds * items)
    return [sorted(drawn[r * items : (r + 1) * items]) for r in range(rounds)]


def setting_order(names: Sequence[str], round_index: int) -> list[str]:
    """``names`` in order for an even round, reversed for an odd one."""
    return list(names) if round_index % 2 == 0 else list(reversed(names))

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


def items_per_round(
    n_prompts: int,
    rounds: int,
    items: int | None,
    *,
    names: tuple[str, str] = ("rounds", "items"),
    source: str | None = None,
) -> int:
    """How many items each round takes: ``items``, or ``min(8, n_prompts // rounds)``.

    Args:
        n_prompts, rounds, items: the prompts there are, the rounds and the items per
            round asked for (``None``: the default).
        names: how the caller's user spells ``rounds`` and ``items`` in the messages:
            parameter names (``rounds=2``), or flags (``"--rounds"``: ``--rounds 2``).
        source: where the prompts come from (a file), named in the messages.

    Raises:
        ValueError: ``rounds < 1``, ``items < 1``, no prompts, or fewer than ``rounds *
            items`` prompts (the rounds must be disjoint); the message says what would fit.
    """
    r_name, i_name = names

    def spell(name: str, value: object) -> str:
        return f"{name} {value}" if name.startswith("-") else f"{name}={value!r}"

    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"{spell(r_name, rounds)} is out of range: valid is an integer >= 1")
    if items is not None and (not isinstance(items, int) or isinstance(items, bool) or items < 1):
        raise ValueError(f"{spell(i_name, items)} is out of range: valid is an integer >= 1")
    needs = f"{spell(r_name, rounds)} needs at least {rounds * (items or 1)}"
    if n_prompts < 1:
        raise ValueError(
            f"{source} holds no prompts: {needs}" if source else f"no prompts: {needs}"
        )
    what = f"{source} holds {n_prompts} prompts" if source else f"{n_prompts} prompts"
    there = f"{source} holds {n_prompts}" if source else f"there are {n_prompts}"
    if items is None:
        items = min(DEFAULT_ITEMS, n_prompts // rounds)
        if items < 1:
            raise ValueError(
                f"{what}: they cannot fill {rounds} disjoint rounds of at least one item: "
                f"give at most {spell(r_name, n_prompts)} or more prompts"
            )
        return items
    if rounds * items > n_prompts:
        fits = (
            f"give {i_name} <= {n_prompts // rounds} or fewer {r_name}"
            if n_prompts >= rounds
            else f"give at most {spell(r_name, n_prompts)} and {spell(i_name, 1)}"
        )
        raise ValueError(
            f"{spell(r_name, rounds)} x {spell(i_name, items)} needs {rounds * items} "
            f"distinct prompts, but {there}: {fits}"
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

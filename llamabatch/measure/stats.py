"""Figures over rounds: a path's value in each round, ratios paired within a round (two
paths that ran minutes apart at most, so the machine's drift mostly cancels), and the
median and spread (min-max) of either."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .rounds import Pass, Round


def s_per_item(p: Pass) -> float | None:
    """Wall seconds per item of a pass (the default figure)."""
    return p.s_per_item


def seconds(p: Pass) -> float | None:
    """Wall seconds of a whole pass."""
    return p.seconds


@dataclass(frozen=True, slots=True)
class Spread:
    """Per-round values, and their median, min and max."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Spread | None:
        """The spread of the values that are not ``None``; ``None`` when none is."""
        kept = tuple(v for v in values if v is not None)
        return cls(kept) if kept else None

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    def to_json(self) -> dict[str, Any]:
        return {
            "values": list(self.values),
            "median": self.median,
            "min": self.min,
            "max": self.max,
        }


def ratios(values: Sequence[float], refs: Sequence[float]) -> list[float]:
    """``values[r] / refs[r]`` per round (infinite where a reference is 0).

    Raises:
        ValueError: the two have different lengths.
    """
    if len(values) != len(refs):
        raise ValueError(f"{len(values)} rounds against {len(refs)} rounds of the reference")
    return [v / r if r > 0 else float("inf") for v, r in zip(values, refs)]


def per_round(
    rounds: Sequence[Round], path: str, figure: Callable[[Pass], float | None] = s_per_item
) -> list[float | None]:
    """``figure`` of ``path``'s pass in each round (``None`` where it did not run or failed)."""
    out = []
    for r in rounds:
        p = r.get(path)
        out.append(None if p is None or p.error is not None else figure(p))
    return out


def paired(
    rounds: Sequence[Round],
    path: str,
    ref: str,
    figure: Callable[[Pass], float | None] = s_per_item,
) -> list[float]:
    """``figure`` of ``path`` over that of ``ref`` in the same round, for every round in
    which both have one."""
    both = [
        (a, b)
        for a, b in zip(per_round(rounds, path, figure), per_round(rounds, ref, figure))
        if a is not None and b is not None
    ]
    return ratios([a for a, _ in both], [b for _, b in both])

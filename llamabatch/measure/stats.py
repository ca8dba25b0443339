"""Figures over rounds: a path's value in each round, ratios paired within a round (two
paths that ran minutes apart at most, so the machine's drift mostly cancels), and the
median and spread (min-max) of either, and a ratio's confidence interval (:class:`Interval`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .rounds import Pass, Round


def s_per_item(p: Pass) -> float | None:
    """Wall seconds per item of a pass (the default figure)."""
    return p.s_per_item


def cpu_s_per_item(p: Pass) -> float | None:
    """This process's CPU seconds per item of a pass (``None`` when not measured)."""
    return p.cpu_s_per_item


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


#: Two-sided 95 % quantiles of Student's t for 1 to 30 degrees of freedom (any
#: statistics table; beyond 30, :func:`t95` uses the Cornish-Fisher expansion).
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"df={df} is out of range: valid is an integer >= 1")
    if df <= len(_T95):
        return _T95[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True, slots=True)
class Interval:
    """A 95 % confidence interval of a ratio: ``low`` <= the true ratio <= ``high``.

    Computed as a Student t interval on the logs of the per-round paired ratios
    (criterion and pyperf report intervals the same way for small samples), so its
    centre is their geometric mean and it is symmetric in log space: a 2x slower round
    weighs as much as a 2x faster one.
    """

    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval | None:
        """The interval of ``values`` (each > 0 and finite); ``None`` with fewer than 2
        such values (one round says nothing about its own spread)."""
        logs = [math.log(v) for v in values if 0 < v < math.inf]
        if len(logs) < 2:
            return None
        mean = statistics.fmean(logs)
        half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
        return cls(math.exp(mean - half), math.exp(mean + half))

    def below(self, threshold: float) -> bool:
        """The whole interval is at or below ``threshold``."""
        return self.high <= threshold

    def above(self, threshold: float) -> bool:
        """The whole interval is above ``threshold``."""
        return self.low > threshold

    def to_json(self) -> dict[str, float]:
        return {"low": self.low, "high": self.high}

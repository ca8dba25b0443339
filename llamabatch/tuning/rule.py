"""The recommendation: the fastest setting that pays and still agrees.

A setting is *eligible* when it is usable (it ran in every round and really batched),
its median paired ratio makes it at least ``min_gain_pct`` percent faster than one at a
time, and its agreement with one at a time (label share when the replies are labels,
else exact share) is at most ``max_agreement_drop`` points below the floor (two
one-at-a-time runs). The recommendation is the eligible setting with the lowest median
ratio; equal ratios go to fewer slots (less KV memory). Without one, batching does not
pay: the message names the best usable setting and what it lacked.

Defaults (15 %, 5 points) are the thresholds this library's owner chose after measuring
one desktop: batches of 4 took 17–24 % less time per item than one at a time, and
batched labels agreed with sequential ones on 96–98 % where two sequential runs agreed
on 100 %.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ..measure.summary import Floor, SettingReport

#: Percent less time per item a setting must save to be recommended.
DEFAULT_MIN_GAIN_PCT = 15.0
#: Points of agreement a setting may lose against the floor.
DEFAULT_MAX_AGREEMENT_DROP = 5.0


@dataclass(frozen=True, slots=True)
class Recommendation:
    """What to run.

    Attributes:
        slots: the recommended ``--slots`` (1 when batching does not pay).
        pays: a setting met both thresholds.
        message: the verdict in one line.
        command: the ``llamabatch complete ... --slots K`` command to use.
    """

    slots: int
    pays: bool
    message: str
    command: str


def _drop(setting: SettingReport, floor: Floor) -> float | None:
    share, ref = setting.agreement_share(), floor.agreement_share()
    if share is None or ref is None:
        return None
    return ref - share


def _why_not(setting: SettingReport, floor: Floor, min_gain: float, max_drop: float) -> str:
    reasons = []
    if setting.faster_pct is None or setting.faster_pct < min_gain:
        reasons.append(f"under the {min_gain:g} % needed")
    drop = _drop(setting, floor)
    if drop is None or drop > max_drop:
        what = "unknown" if drop is None else f"{drop:.1f} points below the floor"
        reasons.append(f"its agreement is {what} (at most {max_drop:g} allowed)")
    return " and ".join(reasons)


def _speed(pct: float) -> str:
    return f"{pct:.0f} % faster" if pct >= 0 else f"{-pct:.0f} % slower"


def recommend(
    settings: Sequence[SettingReport],
    floor: Floor,
    *,
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT,
    max_agreement_drop: float = DEFAULT_MAX_AGREEMENT_DROP,
    complete_args: Sequence[str] = ("PROMPTS",),
) -> Recommendation:
    """Apply the rule (module doc) to the engine's ``settings`` (one at a time excluded).

    ``complete_args``: what goes between ``llamabatch complete`` and ``--slots K`` in
    the command (the prompts file and the sampling options of the run).
    """

    def command(k: int) -> str:
        return shlex.join(["llamabatch", "complete", *complete_args, "--slots", str(k)])

    batched = [s for s in settings if s.slots > 1]
    usable = [s for s in batched if s.usable and s.ratio_median is not None]
    eligible = [
        s
        for s in usable
        if s.faster_pct is not None
        and s.faster_pct >= min_gain_pct
        and (d := _drop(s, floor)) is not None
        and d <= max_agreement_drop
    ]
    if eligible:
        best = min(eligible, key=lambda s: (s.ratio_median, s.slots))
        share = best.agreement_share()
        return Recommendation(
            best.slots,
            True,
            f"use --slots {best.slots}: {_speed(best.faster_pct or 0.0)} than one at a time, "
            f"agreement {share:.0f} % (floor {floor.agreement_share():.0f} %)",
            command(best.slots),
        )
    if not usable:
        why = "; ".join(f"{s.setting}: {s.unusable_reason}" for s in batched) or "none was run"
        return Recommendation(
            1, False, f"batching does not pay here: no setting batched ({why})", command(1)
        )
    best = min(usable, key=lambda s: (s.ratio_median, s.slots))
    return Recommendation(
        1,
        False,
        f"batching does not pay here: at best {_speed(best.faster_pct or 0.0)} "
        f"(slots {best.slots}), {_why_not(best, floor, min_gain_pct, max_agreement_drop)}",
        command(1),
    )

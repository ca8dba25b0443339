"""The verdict: use K slots, batching does not pay, or cannot tell.

A setting is judged on four things. It is *usable* when it ran in every round and really
batched; it *fits* when a round's items can fill its slots (more slots than items only
cost KV memory); it *agrees* when its agreement (label share when the replies are labels,
else exact share) is at most ``max_agreement_drop`` points below the floor (two
one-at-a-time runs); and its speed is judged on the 95 % interval of its paired ratio to
one at a time (:class:`~llamabatch.measure.stats.Interval`) against the threshold
``1 - min_gain_pct / 100``: *faster* when the whole interval is at or below it, *not
faster* when the whole interval is above it, *unclear* otherwise (one round has no
interval).

- **use K**: the fastest (lowest median ratio; equal ratios go to fewer slots, less KV
  memory) of the usable, fitting, agreeing settings that are faster.
- **cannot tell**: none is, but a usable, fitting, agreeing setting is unclear, or no
  usable setting fits the items of a round: the message says why and what would tell.
- **batching does not pay**: every usable setting that fits is not faster or does not agree.

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


#: The verdicts of :func:`recommend`.
USE, DOES_NOT_PAY, CANNOT_TELL = "use", "does_not_pay", "cannot_tell"


@dataclass(frozen=True, slots=True)
class Recommendation:
    """What to run.

    Attributes:
        slots: the recommended ``--slots`` (1 unless the verdict is ``"use"``).
        pays: the verdict is ``"use"``.
        message: the verdict in one line.
        command: the ``llamabatch complete ... --slots K`` command to use.
        verdict: ``"use"``, ``"does_not_pay"`` or ``"cannot_tell"``.
        reason: why, in words (the settings and their intervals against the threshold).
        advice: what would tell, for ``"cannot_tell"`` (else ``None``).
    """

    slots: int
    pays: bool
    message: str
    command: str
    verdict: str
    reason: str
    advice: str | None = None


def _drop(setting: SettingReport, floor: Floor) -> float | None:
    share, ref = setting.agreement_share(), floor.agreement_share()
    if share is None or ref is None:
        return None
    return ref - share


def _agrees(setting: SettingReport, floor: Floor, max_drop: float) -> bool:
    drop = _drop(setting, floor)
    return drop is not None and drop <= max_drop


def _interval(s: SettingReport, named: bool = True) -> str:
    iv = s.ratio_interval
    name = f"slots {s.slots}: " if named else ""
    if iv is None:
        return f"{name}ratio {s.ratio_median:.2f} in one round, no interval"
    return f"{name}ratio {s.ratio_median:.2f} (95 % {iv.low:.2f} to {iv.high:.2f})"


def _why_not(setting: SettingReport, floor: Floor, threshold: float, max_drop: float) -> str:
    reasons = []
    iv = setting.ratio_interval
    if iv is None or not iv.below(threshold):
        reasons.append(
            f"its {_interval(setting, named=False)} is not all at or below {threshold:.2f}"
        )
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
    items_per_round: int | None = None,
    busy: bool = False,
    fresh_rounds_left: int | None = None,
) -> Recommendation:
    """Apply the rule (module doc) to the engine's ``settings`` (one at a time excluded).

    ``complete_args``: what goes between ``llamabatch complete`` and ``--slots K`` in
    the command (the prompts file and the sampling options of the run).
    ``items_per_round``: the items each round held (``None``: every setting fits).
    ``busy``: other work shared the CPU (the advice of "cannot tell" names it first).
    ``fresh_rounds_left``: the rounds of unused prompts the input still holds (``None``:
    unknown); at 0, "cannot tell" asks for more prompts, not more rounds or items.
    """
    threshold = 1.0 - min_gain_pct / 100.0

    def command(k: int) -> str:
        return shlex.join(["llamabatch", "complete", *complete_args, "--slots", str(k)])

    def fits(s: SettingReport) -> bool:
        return items_per_round is None or s.slots <= items_per_round

    batched = [s for s in settings if s.slots > 1]
    usable = [s for s in batched if s.usable and s.ratio_median is not None]
    if not usable:
        why = "; ".join(f"{s.setting}: {s.unusable_reason}" for s in batched) or "none was run"
        return Recommendation(
            1,
            False,
            f"batching does not pay here: no setting batched ({why})",
            command(1),
            DOES_NOT_PAY,
            why,
        )
    fitting = [s for s in usable if fits(s)]
    agreeing = [s for s in fitting if _agrees(s, floor, max_agreement_drop)]
    faster = [s for s in agreeing if s.ratio_interval and s.ratio_interval.below(threshold)]
    unclear = [
        s for s in agreeing if s.ratio_interval is None or not s.ratio_interval.above(threshold)
    ]
    unclear = [s for s in unclear if s not in faster]
    if faster:
        best = min(faster, key=lambda s: (s.ratio_median, s.slots))
        share = best.agreement_share()
        reason = (
            f"{_interval(best)}, all at or below {threshold:.2f} "
            f"({min_gain_pct:g} % faster); agreement {share:.0f} % "
            f"(floor {floor.agreement_share():.0f} %)"
        )
        return Recommendation(
            best.slots,
            True,
            f"use --slots {best.slots}: {_speed(best.faster_pct or 0.0)} than one at a time "
            f"(95 % interval {_pct_range(best)}), agreement {share:.0f} % "
            f"(floor {floor.agreement_share():.0f} %)",
            command(best.slots),
            USE,
            reason,
        )
    if unclear or not fitting:
        if unclear:
            reason = "; ".join(
                f"{_interval(s)} straddles {threshold:.2f}"
                if s.ratio_interval is not None
                else _interval(s)
                for s in unclear
            )
        else:
            reason = (
                f"{items_per_round} items per round fill none of the slot counts tried "
                f"({', '.join(str(s.slots) for s in usable)})"
            )
        advice = []
        if busy:
            advice.append("run it on a quieter machine (other work shared the CPU)")
        if unclear and fresh_rounds_left == 0:
            advice.append(
                "give it more prompts (these are used up: each round takes fresh ones), "
                "then more rounds (--rounds, --budget)"
            )
        elif unclear:
            advice.append("run more rounds (--rounds, --budget) or more items per round (--items)")
        else:
            advice.append("give more items per round (--items) or fewer slots (--slots)")
        what = "; ".join(advice)
        return Recommendation(
            1,
            False,
            f"cannot tell whether batching pays here: {reason}; to tell: {what}",
            command(1),
            CANNOT_TELL,
            reason,
            what,
        )
    best = min(fitting, key=lambda s: (s.ratio_median, s.slots))
    why = _why_not(best, floor, threshold, max_agreement_drop)
    return Recommendation(
        1,
        False,
        f"batching does not pay here: at best {_speed(best.faster_pct or 0.0)} "
        f"(slots {best.slots}): {why}",
        command(1),
        DOES_NOT_PAY,
        why,
    )


def _pct_range(s: SettingReport) -> str:
    iv = s.ratio_interval
    if iv is None:
        return "none"
    return f"{_speed(100 * (1 - iv.high))} to {_speed(100 * (1 - iv.low))}"

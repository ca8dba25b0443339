"""How much other work and chance moved a run's timings, from its own rounds
(:func:`noise_of`): the load average after each pass, this process's CPU time against
wall time (on a CPU device a busy machine shows as wall >> CPU), and the spread of each
setting's paired ratios. hyperfine and pyperf warn on the same signs ("the result may
be unstable")."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._util.busy import busy_cpu_warning, is_busy
from .rounds import Round
from .stats import paired

#: A setting whose rounds got less than this share of the CPU seconds per wall second of
#: its best round was starved in some of them (the same work, so the same CPU share on a
#: quiet machine).
STARVED_SHARE = 0.5
#: On a CPU device every pass of a quiet run gets about the same CPU seconds per wall
#: second (each decoding thread keeps a core busy): a pass under this share of the run's
#: best got the cores only part of the time (a quiet 2-core run here: 0.92 to 1; two busy
#: loops switched on and off every 3 s: 0.53 to 0.6).
UNEVEN_SHARE = 0.75
#: Passes shorter than this (seconds) are left out of the CPU share: too short to tell.
MIN_PASS_S = 0.5
#: Paired ratios of one setting further apart than this factor (largest over smallest)
#: mean the rounds disagree. pyperf warns at a standard deviation above 10 % of the
#: mean; with a few rounds the extremes are the readable figure.
SPREAD_FACTOR = 1.5


@dataclass(frozen=True, slots=True)
class SettingNoise:
    """One setting's noise figures over its rounds.

    Attributes:
        cpu_per_wall: per round, this process's CPU seconds per wall second of the pass
            (``None``: failed, unmeasured or under :data:`MIN_PASS_S`).
        ratio_spread: the largest paired ratio to one at a time over the smallest
            (``None`` for one at a time or with fewer than 2 rounds).
    """

    cpu_per_wall: tuple[float | None, ...]
    ratio_spread: float | None


@dataclass(frozen=True, slots=True)
class Noise:
    """The noise figures of a run and the warnings they give.

    Attributes:
        n_cores: the machine's cores (``os.cpu_count``), ``None`` when unknown.
        load_max: the highest 1-minute load average after any pass, ``None`` when unknown.
        busy: other work shared the cores: ``load_max`` above 1.5 times ``n_cores``, or
            (on a CPU device) some pass got under :data:`UNEVEN_SHARE` of the CPU seconds
            per wall second of the run's best pass.
        settings: per setting name, its :class:`SettingNoise`.
        warnings: what to tell the user, one line each (empty on a quiet run).
    """

    n_cores: int | None
    load_max: float | None
    busy: bool
    settings: dict[str, SettingNoise] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "n_cores": self.n_cores,
            "load_max": self.load_max,
            "busy": self.busy,
            "settings": {
                k: {"cpu_per_wall": list(v.cpu_per_wall), "ratio_spread": v.ratio_spread}
                for k, v in self.settings.items()
            },
            "warnings": list(self.warnings),
        }


def _cpu_per_wall(rounds: Sequence[Round], name: str) -> tuple[float | None, ...]:
    out: list[float | None] = []
    for r in rounds:
        p = r.get(name)
        wall = None if p is None or p.error is not None else p.seconds
        cpu = None if p is None else p.cpu_seconds
        out.append(cpu / wall if cpu is not None and wall and wall >= MIN_PASS_S else None)
    return tuple(out)


def noise_of(
    rounds: Sequence[Round],
    names: Sequence[str],
    reference: str,
    *,
    n_cores: int | None,
    threads: int | None = None,
    threads_as: str = "--threads {}",
    cpu_threads: int | None = None,
) -> Noise:
    """The :class:`Noise` of ``rounds`` for the settings ``names`` (``reference``, the
    one the ratios are paired with, among them or not).

    ``threads`` (``None``: the default) and ``threads_as`` shape the busy hint
    (:func:`llamabatch._util.busy.busy_cpu_warning`). ``cpu_threads``: the threads that
    decode on the host CPU when the model runs there (``None``: on a GPU, or unknown);
    each of them keeps a core busy through a pass on a quiet machine, so the process
    should get about that many CPU seconds per wall second.
    """
    loads = [p.load for r in rounds for p in r.passes if p.load is not None]
    load_max = max(loads) if loads else None
    warnings = []
    busy = busy_cpu_warning(
        load_max, n_cores, threads, threads_as=threads_as, during="the measurement"
    )
    if busy is not None:
        warnings.append(busy + "; the timings above are not this machine's own")
    every = [c for name in names for c in _cpu_per_wall(rounds, name) if c is not None]
    uneven = bool(cpu_threads) and len(every) >= 2 and min(every) < UNEVEN_SHARE * max(every)
    if uneven and busy is None:
        warnings.append(
            f"the CPU was busy in part of the measurement: its passes got {min(every):.2f} to "
            f"{max(every):.2f} CPU seconds per wall second (on a quiet machine every pass "
            "gets about the same): other work took the cores in some passes; run it when the "
            "other work is done, or on a machine of its own; the timings above are not this "
            "machine's own"
        )
    if cpu_threads and every and statistics.median(every) < STARVED_SHARE * cpu_threads:
        warnings.append(
            f"this process got {statistics.median(every):.2f} CPU seconds per wall second "
            f"(median of the passes) with {cpu_threads} thread"
            f"{'' if cpu_threads == 1 else 's'} decoding on the CPU, about "
            f"{cpu_threads} on a quiet machine: it waited for cores (wall >> CPU); the CPU "
            "s/item is the figure the wait touches least"
        )
    settings = {}
    for name in names:
        shares = _cpu_per_wall(rounds, name)
        kept = [c for c in shares if c is not None]
        if len(kept) >= 2 and min(kept) < STARVED_SHARE * max(kept):
            warnings.append(
                f"{name}: its rounds got {min(kept):.2f} to {max(kept):.2f} CPU seconds per "
                "wall second: other work took the cores in some of them (compare the CPU "
                "s/item, which the wait does not count)"
            )
        spread = None
        if name != reference:
            ratio = [v for v in paired(rounds, name, reference) if v > 0 and v != float("inf")]
            if len(ratio) >= 2:
                spread = max(ratio) / min(ratio)
                if spread > SPREAD_FACTOR:
                    warnings.append(
                        f"{name}: its per-round ratios range from {min(ratio):.2f} to "
                        f"{max(ratio):.2f}: the rounds disagree"
                    )
        settings[name] = SettingNoise(shares, spread)
    busy_now = is_busy(load_max, n_cores) or uneven
    return Noise(n_cores, load_max, busy_now, settings, tuple(warnings))


__all__ = ["Noise", "SettingNoise", "noise_of"]

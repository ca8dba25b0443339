"""The rounds runner (:func:`run_rounds`): every *path* (a way of completing items:
``path(items, progress)`` returns what it measured) completes each round's fresh items, in
an order that alternates from round to round (:func:`order`: a slow drift of the machine
hits every path alike), each pass timed by one clock; :func:`sample_rounds` draws disjoint
rounds from a fixed list of items.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._util.busy import load_average

Clock = Callable[[], float]
#: ``progress(n)``: ``n`` more items done.
Progress = Callable[[int], None]
#: ``path(items, progress)``: completes ``items``; what it measured.
PathFn = Callable[[Sequence[Any], Progress], Any]

#: Items per round when none is asked for: the owner's "8 waiting items".
DEFAULT_ITEMS = 8


def order(names: Sequence[str], round_index: int) -> list[str]:
    """``names`` in order for an even round, reversed for an odd one."""
    return list(names) if round_index % 2 == 0 else list(reversed(names))


@dataclass(frozen=True, slots=True)
class Pass:
    """One path's pass over one round's items.

    Attributes:
        path: the path's name.
        items: the items it was given.
        seconds: wall seconds of the pass; ``None`` when it failed.
        result: what the path returned; ``None`` when it failed.
        error: why it failed (``"TypeName: message"``), else ``None``.
        cpu_seconds: CPU seconds of this process over the pass (every thread's, from
            ``time.process_time``); ``None`` when it failed or was not measured.
        load: the 1-minute load average when the pass ended (``os.getloadavg``);
            ``None`` where the system has none or it was not measured.
    """

    path: str
    items: tuple[Any, ...]
    seconds: float | None
    result: Any = None
    error: str | None = None
    cpu_seconds: float | None = None
    load: float | None = None

    @property
    def s_per_item(self) -> float | None:
        """``seconds / len(items)``; ``None`` for a failed or empty pass."""
        if self.seconds is None or not self.items:
            return None
        return self.seconds / len(self.items)

    @property
    def cpu_s_per_item(self) -> float | None:
        """``cpu_seconds / len(items)``; ``None`` when unmeasured, failed or empty."""
        if self.cpu_seconds is None or not self.items:
            return None
        return self.cpu_seconds / len(self.items)


@dataclass(frozen=True, slots=True)
class Round:
    """One round: every path's pass, in the order they ran."""

    index: int
    passes: tuple[Pass, ...]

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(p.path for p in self.passes)

    def get(self, path: str) -> Pass | None:
        """The pass of ``path`` in this round, or ``None``."""
        return next((p for p in self.passes if p.path == path), None)


def _ignore(n: int) -> None:
    pass


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def run_rounds(
    paths: Mapping[str, PathFn],
    items: Callable[[int, str], Sequence[Any]],
    rounds: int,
    *,
    warmup: Callable[[str], Sequence[Any]] | None = None,
    failures: tuple[type[Exception], ...] = (),
    clock: Clock = time.perf_counter,
    cpu_clock: Clock | None = time.process_time,
    load: Callable[[], float | None] | None = load_average,
    progress: Progress | None = None,
    on_pass: Callable[[int, Pass], None] | None = None,
    more: Callable[[Sequence[Round]], bool] | None = None,
    max_rounds: int | None = None,
) -> list[Round]:
    """Run ``rounds`` rounds of every path.

    Args:
        paths: the paths by name (their order is the forward order).
        items: ``items(round, name)``: what the path gets in that round.
        rounds: rounds, >= 1.
        warmup: ``warmup(name)``: items each path completes once, untimed, first.
        failures: errors that fail one pass (recorded, the run goes on) instead of the
            run; a path that fails its warm-up is not run again (each round records
            that error).
        clock: seconds, monotonic.
        cpu_clock: this process's CPU seconds (each pass's ``cpu_seconds``); ``None``:
            not measured.
        load: the load average after each pass (each pass's ``load``); ``None``: not
            measured.
        progress: hears every item done (or given up on); a path that reports fewer
            than its items is topped up after its pass.
        on_pass: ``on_pass(round, pass)`` after every pass.
        more: after ``rounds`` rounds, ``more(done)`` says whether to run one round
            more (adaptive rounds); ``None``: exactly ``rounds``.
        max_rounds: the most rounds ``more`` may reach (``items`` must give that many);
            ``None``: no limit.

    Returns:
        one :class:`Round` per round.

    Raises:
        ValueError: ``rounds < 1`` or no paths; what a path raises outside ``failures``.
    """
    if rounds < 1 or not paths:
        raise ValueError(f"rounds={rounds} of {len(paths)} paths: give rounds >= 1 and a path")
    tick = progress or _ignore
    failed: dict[str, str] = {}
    if warmup is not None:
        for name, path in paths.items():
            try:
                path(warmup(name), _ignore)
            except failures as exc:
                failed[name] = _why(exc)
    done: list[Round] = []
    r = 0
    while r < rounds or (
        more is not None and (max_rounds is None or r < max_rounds) and more(done)
    ):
        passes = []
        for name in order(list(paths), r):
            given = tuple(items(r, name))
            if name in failed:
                tick(len(given))
                p = Pass(name, given, None, error=failed[name])
            else:
                p = _timed(paths[name], name, given, failures, clock, cpu_clock, tick)
                if load is not None:
                    p = replace(p, load=load())
            passes.append(p)
            if on_pass is not None:
                on_pass(r, p)
        done.append(Round(r, tuple(passes)))
        r += 1
    return done


def _timed(
    path: PathFn,
    name: str,
    items: tuple[Any, ...],
    failures: tuple[type[Exception], ...],
    clock: Clock,
    cpu_clock: Clock | None,
    tick: Progress,
) -> Pass:
    count = 0

    def counted(n: int) -> None:
        nonlocal count
        count += n
        tick(n)

    c0 = None if cpu_clock is None else cpu_clock()
    t0 = clock()
    try:
        result = path(items, counted)
    except failures as exc:
        tick(max(0, len(items) - count))
        return Pass(name, items, None, error=_why(exc))
    seconds = clock() - t0
    cpu = None if cpu_clock is None or c0 is None else cpu_clock() - c0
    tick(max(0, len(items) - count))
    return Pass(name, items, seconds, result, cpu_seconds=cpu)


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


def print_each_round(paths: Sequence[str]) -> Callable[[int, Pass], None]:
    """An ``on_pass`` for :func:`run_rounds` that prints one line per round, once all
    ``paths`` have passed: each path's milliseconds per item (``failed`` for a failed
    pass), in ``paths``' order."""
    heard: dict[str, Pass] = {}

    def on_pass(r: int, p: Pass) -> None:
        heard[p.path] = p
        if len(heard) == len(paths):
            figures = ((m, heard.pop(m).s_per_item) for m in paths)
            print(
                f"round {r + 1}: "
                + ", ".join(
                    f"{m} {'failed' if s is None else f'{s * 1000:.1f} ms'}" for m, s in figures
                ),
                flush=True,
            )

    return on_pass

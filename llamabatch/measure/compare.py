"""One at a time against the slot engine on the same items, what ``llamabatch tune`` and
``bench``'s workload run (:func:`compare`): the settings :data:`ONE_AT_A_TIME` (the
``Llama`` in a loop, else ``BatchGenerator(slots=1)``), :data:`FLOOR` (the same, every seed
+ 1) and ``"slots=K"``, each completing every round's items after a warm-up item.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from .._util.busy import load_average
from ..completion import Completion
from ..generator import BatchGenerator
from .one_at_a_time import OneAtATime
from .records import PassReplies, PassReply, WorkItem, seeded
from .rounds import Clock, PathFn, Progress, Round, run_rounds
from .workloads import warmup_prompt

ONE_AT_A_TIME = "one_at_a_time"
FLOOR = "floor"


def setting_name(slots: int) -> str:
    """``"slots=K"``, the name of the engine's setting with K slots."""
    return f"slots={slots}"


def setting_slots(setting: str) -> int:
    """The slots of a setting: K for ``"slots=K"``, 1 one at a time and for the floor."""
    return int(setting.split("=", 1)[1]) if setting.startswith("slots=") else 1


def warmup_item(
    items: Sequence[WorkItem], rounds: Sequence[Sequence[int]]
) -> tuple[WorkItem, int | None]:
    """The warm-up: the first item in none of ``rounds`` (indices into ``items``) and its
    index, else the built-in :func:`~llamabatch.measure.workloads.warmup_prompt` with the
    first item's sampling (and ``None``)."""
    used = {i for r in rounds for i in r}
    spare = next((i for i in range(len(items)) if i not in used), None)
    if spare is not None:
        return items[spare], spare
    prompt = warmup_prompt()
    return WorkItem("warmup", prompt, items[0].sampling), None


class EnginePath:
    """``BatchGenerator(slots=K)`` as a path: made by ``make()`` at its first pass (a
    failure there fails that pass), then kept for every round until :meth:`close`."""

    def __init__(self, make: Callable[[], BatchGenerator]) -> None:
        self._make = make
        self.generator: BatchGenerator | None = None

    def __call__(self, items: Sequence[WorkItem], progress: Progress) -> PassReplies:
        if self.generator is None:
            self.generator = self._make()
        gen = self.generator
        done: list[Completion] = []
        for group in gen.iter_groups([it.prompt for it in items], [it.sampling for it in items]):
            done.extend(group)
            progress(len(group))
        done.sort(key=lambda c: c.index)
        batched = sum(c.path == "batch" for c in done)
        return PassReplies(
            tuple(
                PassReply(items[c.index].id, c.text, c.finish_reason, c.error, c.n_tokens, c.path)
                for c in done
            ),
            items_batched=batched,
            items_alone=len(done) - batched,
            batch_disabled_reason=gen.stats.batch_disabled_reason,
        )

    def kv_bytes_per_slot(self, slots: int) -> int | None:
        """KV bytes of one slot of its batch context; ``None`` when it has none."""
        gen = self.generator
        if gen is None or not gen.stats.kv_bytes:
            return None
        return gen.stats.kv_bytes // slots

    def close(self) -> None:
        if self.generator is not None:
            self.generator.close()


@dataclass(frozen=True, slots=True)
class Comparison:
    """What :func:`compare` measured.

    Attributes:
        rounds: every round with every setting's pass (results: ``PassReplies``).
        kv_bytes_per_slot: per ``"slots=K"`` setting, the KV bytes of one of its slots
            (``None`` when unknown).
    """

    rounds: tuple[Round, ...]
    kv_bytes_per_slot: dict[str, int | None]


def compare(
    items: Callable[[int], Sequence[WorkItem]],
    rounds: int,
    slots: Sequence[int],
    make_generator: Callable[[int], BatchGenerator],
    *,
    warmup: WorkItem,
    one_at_a_time: OneAtATime | None = None,
    floor: bool = False,
    label: Callable[[str | None], Any] | None = None,
    failures: tuple[type[Exception], ...] = (),
    progress: Progress | None = None,
    clock: Clock = time.perf_counter,
    cpu_clock: Clock | None = time.process_time,
    load: Callable[[], float | None] | None = load_average,
    more: Callable[[Sequence[Round]], bool] | None = None,
    max_rounds: int | None = None,
) -> Comparison:
    """One at a time, then (maybe) the floor, then each slot count, in alternating rounds.

    Args:
        items: ``items(round)``: that round's items (every setting gets the same).
        rounds: rounds, >= 1.
        slots: the engine's slot counts (``"slots=K"`` settings; K > 1).
        make_generator: ``make_generator(K)``: a ``BatchGenerator`` with ``slots=K``
            (``K = 1``: one at a time when ``one_at_a_time`` is ``None``).
        warmup: the untimed item.
        one_at_a_time: the one-at-a-time path, e.g. the ``Llama`` loop (closed here: the
            ``Llama`` is put back as it was).
        floor: also run :data:`FLOOR`.
        label: the label of a reply's text (``None``: a failed item), for each reply.
        failures: errors that fail one setting's pass instead of the whole run.
        progress: hears every item done.
        clock: seconds, monotonic.
        cpu_clock, load, more, max_rounds: as for
            :func:`~llamabatch.measure.rounds.run_rounds` (``more``: adaptive rounds).

    Raises:
        ValueError: from ``run_rounds``; what a path raises outside ``failures``.
    """
    engines = {setting_name(k): EnginePath(partial(make_generator, k)) for k in slots}
    with ExitStack() as stack:
        for engine in engines.values():
            stack.callback(engine.close)
        base: OneAtATime | EnginePath = (
            one_at_a_time if one_at_a_time is not None else EnginePath(partial(make_generator, 1))
        )
        stack.callback(base.close)
        paths: dict[str, PathFn] = {ONE_AT_A_TIME: base}
        if floor:
            paths[FLOOR] = lambda items, tick: base(seeded(items, 1), tick)
        paths.update(engines)
        if label is not None:
            paths = {name: _labelled(path, label) for name, path in paths.items()}
        done = run_rounds(
            paths,
            lambda r, name: items(r),
            rounds,
            warmup=lambda name: [warmup] * min(2, setting_slots(name)),
            failures=failures,
            clock=clock,
            cpu_clock=cpu_clock,
            load=load,
            progress=progress,
            more=more,
            max_rounds=max_rounds,
        )
        kv = {name: e.kv_bytes_per_slot(setting_slots(name)) for name, e in engines.items()}
    return Comparison(tuple(done), kv)


def _labelled(path: PathFn, label: Callable[[str | None], Any]) -> PathFn:
    def run(items: Sequence[Any], progress: Progress) -> PassReplies:
        out: PassReplies = path(items, progress)
        replies = tuple(replace(r, label=label(r.text if r.ok else None)) for r in out.replies)
        return replace(out, replies=replies)

    return run

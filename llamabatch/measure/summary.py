"""Per setting of a :func:`~llamabatch.measure.compare.compare` run, over its rounds:
s/item, the paired ratio to one at a time, throughput, KV memory and agreement with one
at a time (plain data, computed from the rounds' replies)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .agreement import Agreement, agreement
from .compare import FLOOR, ONE_AT_A_TIME
from .records import PassReplies
from .rounds import Pass, Round
from .stats import Interval, Spread, cpu_s_per_item, paired, per_round

MIB = 2**20


@dataclass(frozen=True, slots=True)
class SettingReport:
    """One setting summed up over the rounds.

    Attributes:
        setting: ``"one_at_a_time"`` or ``"slots=K"``.
        slots: 1 for one at a time, else K.
        s_per_item: per round, wall seconds of the pass over the items (``None``: failed).
        s_per_item_median, s_per_item_min, s_per_item_max: over the rounds that ran.
        ratio: per round, s/item over the same round's one-at-a-time s/item (below 1:
            faster than one at a time).
        ratio_median: median of ``ratio``.
        ratio_interval: the 95 % interval of the ratio (a t interval on the log ratios,
            :class:`~llamabatch.measure.stats.Interval`); ``None`` with fewer than 2 rounds.
        cpu_s_per_item: per round, this process's CPU seconds per item (``None``: failed
            or not measured): on a CPU device the figure other work moves least.
        cpu_s_per_item_median: its median over the rounds that have one.
        faster_pct: ``100 * (1 - ratio_median)``: percent less time per item.
        items_per_hour: ``3600 / s_per_item_median``.
        eta_s: seconds for all the prompts at ``s_per_item_median``.
        kv_mib_per_slot, kv_mib_total: KV cache of the context the setting decodes in
            (MiB = 2**20 bytes), ``None`` when unknown.
        exact_share, label_share: percent of the items whose reply (label) equals the
            reply (label) of the same round's reference run (``against`` of
            :func:`summarize`: one at a time, or the one-at-a-time run of the other seed);
            ``label_share`` ``None`` without a label rule.
        n_items, n_failed: items over all rounds, and those that failed.
        first_error: the first of their errors, ``None`` if none failed.
        tokens_per_item: reply tokens per item, over the rounds that ran.
        items_batched, items_alone: how the engine completed them.
        usable: the setting ran in every round and really batched.
        unusable_reason: why not, when not usable.
    """

    setting: str
    slots: int
    s_per_item: tuple[float | None, ...]
    s_per_item_median: float | None
    s_per_item_min: float | None
    s_per_item_max: float | None
    ratio: tuple[float, ...]
    ratio_median: float | None
    ratio_interval: Interval | None
    cpu_s_per_item: tuple[float | None, ...]
    cpu_s_per_item_median: float | None
    faster_pct: float | None
    items_per_hour: float | None
    eta_s: float | None
    kv_mib_per_slot: float | None
    kv_mib_total: float | None
    exact_share: float | None
    label_share: float | None
    n_items: int
    n_failed: int
    first_error: str | None
    tokens_per_item: float | None
    items_batched: int
    items_alone: int
    usable: bool
    unusable_reason: str | None

    def agreement_share(self) -> float | None:
        """The share the recommendation judges: ``label_share`` when there are labels,
        else ``exact_share``."""
        return self.label_share if self.label_share is not None else self.exact_share


def _replies(p: Pass | None) -> PassReplies | None:
    return None if p is None or p.error is not None else p.result


def _unusable(slots: int, passes: Sequence[Pass | None]) -> str | None:
    if slots == 1:
        return None
    for p in passes:
        if p is None or p.error is not None:
            return f"it failed: {p.error if p is not None else 'it did not run'}"
    ran = [r for p in passes if (r := _replies(p)) is not None]
    for r in ran:
        if r.batch_disabled_reason:
            return f"batching was turned off: {r.batch_disabled_reason}"
    if sum(r.items_batched for r in ran) == 0:
        return "no item was batched (every item was completed alone)"
    return None


def run_agreement(run: Pass | None, base: Pass | None, has_labels: bool) -> Agreement:
    """Agreement of ``run`` with ``base`` (both of one round); a failed run agrees on
    nothing (all its items count as disagreeing)."""
    a, b = _replies(run), _replies(base)
    if b is None or not b.replies:
        return Agreement(0, 0, 0 if has_labels else None)
    if a is None or not a.replies:
        return Agreement(len(b.replies), 0, 0 if has_labels else None)
    return agreement(
        [r.compared() for r in a.replies], [r.compared() for r in b.replies], has_labels
    )


def summarize(
    setting: str,
    slots: int,
    rounds: Sequence[Round],
    *,
    n_prompts: int,
    has_labels: bool,
    kv_bytes_per_slot: int | None = None,
    against: str = ONE_AT_A_TIME,
) -> SettingReport:
    """The :class:`SettingReport` of ``setting`` from the rounds.

    ``kv_bytes_per_slot``: the KV bytes of one slot of its context (``None``: unknown).
    ``against``: the run its agreement is counted against (``"one_at_a_time"``, or
    ``"floor"``: the one-at-a-time run of the other seed, so that a batched setting is
    judged like the floor, two runs of different seeds); the speed ratio is always to
    one at a time.
    """
    passes = [r.get(setting) for r in rounds]
    per_item = tuple(per_round(rounds, setting))
    timed = Spread.of(per_item)
    ratio = tuple(paired(rounds, setting, ONE_AT_A_TIME))
    median = timed.median if timed else None
    ratios = Spread.of(ratio)
    ratio_median = ratios.median if ratios else None
    cpu = tuple(per_round(rounds, setting, cpu_s_per_item))
    cpu_timed = Spread.of(cpu)
    total = Agreement(0, 0, 0 if has_labels else None)
    for r in rounds:
        total = total + run_agreement(r.get(setting), r.get(against), has_labels)
    ran = [x for p in passes if (x := _replies(p)) is not None]
    replies = [rep for x in ran for rep in x.replies]
    n_items = sum(len(b.items) for r in rounds if (b := r.get(ONE_AT_A_TIME)) is not None)
    errors = [rep.error for rep in replies if rep.error is not None]
    unusable = _unusable(slots, passes)
    return SettingReport(
        setting=setting,
        slots=slots,
        s_per_item=per_item,
        s_per_item_median=median,
        s_per_item_min=timed.min if timed else None,
        s_per_item_max=timed.max if timed else None,
        ratio=ratio,
        ratio_median=ratio_median,
        ratio_interval=Interval.of(ratio),
        cpu_s_per_item=cpu,
        cpu_s_per_item_median=cpu_timed.median if cpu_timed else None,
        faster_pct=None if ratio_median is None else 100.0 * (1.0 - ratio_median),
        items_per_hour=3600.0 / median if median else None,
        eta_s=median * n_prompts if median is not None else None,
        kv_mib_per_slot=None if kv_bytes_per_slot is None else kv_bytes_per_slot / MIB,
        kv_mib_total=None if kv_bytes_per_slot is None else kv_bytes_per_slot * slots / MIB,
        exact_share=total.exact_share,
        label_share=total.label_share,
        n_items=n_items,
        n_failed=len(errors) + n_items - len(replies),
        first_error=errors[0] if errors else None,
        tokens_per_item=sum(rep.n_tokens for rep in replies) / len(replies) if replies else None,
        items_batched=sum(x.items_batched for x in ran),
        items_alone=sum(x.items_alone for x in ran),
        usable=unusable is None,
        unusable_reason=unusable,
    )


@dataclass(frozen=True, slots=True)
class Floor:
    """The agreement of two one-at-a-time runs under the same sampling.

    Attributes:
        measured: a second one-at-a-time run was made (random sampling: another seed);
            False at temperature 0, where two runs are the same computation and agree
            on 100 % by construction.
        exact_share, label_share: percent, as in :class:`SettingReport`.
        seeds: the two seeds compared, when measured.
        note: how it was obtained, in words.
    """

    measured: bool
    exact_share: float | None
    label_share: float | None
    seeds: tuple[int, int] | None
    note: str

    def agreement_share(self) -> float | None:
        """``label_share`` when there are labels, else ``exact_share``."""
        return self.label_share if self.label_share is not None else self.exact_share


def floor_of(rounds: Sequence[Round], has_labels: bool, seeds: tuple[int, int]) -> Floor:
    """The floor from the rounds' ``"floor"`` runs, or 100 % by construction when the
    rounds have none (greedy sampling)."""
    if not any(r.get(FLOOR) is not None for r in rounds):
        return Floor(
            measured=False,
            exact_share=100.0,
            label_share=100.0 if has_labels else None,
            seeds=None,
            note="temperature 0: two one-at-a-time runs are the same computation, "
            "100 % by construction (not measured)",
        )
    total = Agreement(0, 0, 0 if has_labels else None)
    for r in rounds:
        total = total + run_agreement(r.get(FLOOR), r.get(ONE_AT_A_TIME), has_labels)
    return Floor(
        measured=True,
        exact_share=total.exact_share,
        label_share=total.label_share,
        seeds=seeds,
        note=f"two one-at-a-time runs with seeds {seeds[0]} and {seeds[1]}",
    )


__all__ = ["Floor", "SettingReport", "floor_of", "run_agreement", "summarize"]

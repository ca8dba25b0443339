"""The tagging workload: seconds per item, one at a time against batches of B.

N chat-formatted (ChatML) tagging prompts of varied lengths around ``prompt_tokens``
(:func:`tagging_prompts`, deterministic for a seed) are completed with natural stops
(end of generation or ``max_tokens``), greedily, one at a time (the caller's own loop of
``Llama.create_completion`` when given, else ``BatchGenerator(slots=1)``) and through
``BatchGenerator(slots=B)`` for each B. Rounds alternate the runs (alone, B1, B2, …,
then again), so slow drift of the machine hits all of them alike; each round's per-item
time of B is divided by the same round's per-item time alone (the *ratio*; below 1
means batching saves time).

The generators are made by a caller-supplied factory (a real ``Llama`` or a fake
backend), created once, warmed up with one short untimed group, and reused by every
round. A round's items may also carry their own sampling (:class:`WorkItems`: the items
of a user's file, :mod:`llamabatch.measure.file_workload`).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..generator import BatchGenerator
from ..params import SamplingParams

Clock = Callable[[], float]
Progress = Callable[[int], None]

SYSTEM = "You are a helpful assistant that labels customer support tickets."
#: The request after each ticket: a short reply that ends by itself, as a tagger's label.
REQUEST = "Summarize this support ticket in one short sentence."

_SUBJECTS = [
    "Cannot log in after the password reset",
    "Invoice shows the wrong VAT number",
    "App crashes when I open the camera",
    "Refund for a duplicate charge",
    "Printer offline since the firmware update",
    "Shipping label was never emailed",
    "Two-factor codes arrive late",
    "Export to CSV drops the last column",
    "Dark mode makes the charts unreadable",
    "Cancel my subscription, please",
    "Webhook retries flood our endpoint",
    "The mobile sync loses offline edits",
]
_SENTENCES = [
    "I have tried restarting the device twice and nothing changed.",
    "This started on Monday morning, right after the update was installed.",
    "Our whole team of twelve people is affected, not just my account.",
    "The error message says something about an expired session token.",
    "I attached a screenshot of the settings page to this ticket.",
    "Support chat told me to clear the cache, which did not help.",
    "We are on the business plan and pay yearly by bank transfer.",
    "It works in the browser but fails every time in the desktop app.",
    "Could you please look into it before the end of the week?",
    "The same problem happened last month and went away on its own.",
    "I am using the latest version on Windows 11 with a German keyboard.",
    "Our accountant needs the corrected document for the quarterly report.",
    "Nothing in the status page mentions an outage today.",
    "When I switch to another network the behaviour stays the same.",
    "I would rather not reinstall since it took hours to configure.",
    "Please reply by email, I rarely check the in-app messages.",
]


def chatml(system: str, user: str) -> str:
    """A ChatML prompt ending where the assistant's reply starts."""
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


def tagging_prompts(
    n: int,
    prompt_tokens: int,
    tokenize: Callable[[str], Sequence[int]],
    seed: int = 0,
    spread: float = 0.4,
) -> list[str]:
    """``n`` ChatML tagging prompts, each of about ``prompt_tokens * U(1-spread, 1+spread)``
    tokens (at least the bare prompt), made deterministically from ``seed``.

    A ticket is a subject line and sentences drawn from a fixed pool (each once before
    any repeats), added until the prompt reaches its target length as counted by
    ``tokenize``; :data:`REQUEST` follows it.
    """
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        target = max(1, round(prompt_tokens * rng.uniform(1 - spread, 1 + spread)))
        ticket = f"Ticket #{1000 + rng.randrange(9000)}: {rng.choice(_SUBJECTS)}."
        pool: list[str] = []
        prompt = chatml(SYSTEM, f"{ticket}\n\n{REQUEST}")
        while len(tokenize(prompt)) < target:
            if not pool:  # each sentence once before any repeats
                pool = rng.sample(_SENTENCES, len(_SENTENCES))
            ticket += " " + pool.pop()
            prompt = chatml(SYSTEM, f"{ticket}\n\n{REQUEST}")
        prompts.append(prompt)
    return prompts


def warmup_prompt() -> str:
    """A short prompt for the untimed warm-up group."""
    return chatml(SYSTEM, "Ticket #1: Printer offline.")


@dataclass(slots=True)
class WorkloadRow:
    """Measurements of one generator (``b == 1``: one at a time).

    Attributes:
        b: slots of the generator.
        n_items: items per pass.
        per_item_s: per round, wall seconds of the whole pass divided by the items.
        ratio: per round, ``per_item_s`` over the same round's one-at-a-time figure.
        tokens: per round, generated tokens of all items.
        items_batched, items_alone: over the timed rounds (from the generator's stats).
        items_failed: over the timed rounds, items that ended with an error.
        first_error: the first of their errors, ``None`` if none failed.
        batch_disabled_reason: why batching was off, if it was.
    """

    b: int
    n_items: int = 1
    per_item_s: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    items_batched: int = 0
    items_alone: int = 0
    items_failed: int = 0
    first_error: str | None = None
    batch_disabled_reason: str | None = None

    @property
    def median_per_item_s(self) -> float:
        return statistics.median(self.per_item_s)

    @property
    def items_per_hour(self) -> float:
        m = self.median_per_item_s
        return 3600.0 / m if m > 0 else float("inf")

    @property
    def tokens_per_item(self) -> float:
        return statistics.fmean(self.tokens) / self.n_items if self.tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "b": self.b,
            "per_item_s": list(self.per_item_s),
            "median_per_item_s": self.median_per_item_s,
            "ratio": list(self.ratio),
            "ratio_median": statistics.median(self.ratio),
            "ratio_min": min(self.ratio),
            "ratio_max": max(self.ratio),
            "items_per_hour": self.items_per_hour,
            "tokens_per_item": self.tokens_per_item,
            "items_batched": self.items_batched,
            "items_alone": self.items_alone,
            "items_failed": self.items_failed,
            "first_error": self.first_error,
            "batch_disabled_reason": self.batch_disabled_reason,
        }


def ratios(per_item: Sequence[float], alone: Sequence[float]) -> list[float]:
    """Per-round ratios ``per_item[r] / alone[r]``."""
    if len(per_item) != len(alone):
        raise ValueError(f"{len(per_item)} rounds against {len(alone)} rounds alone")
    return [p / a if a > 0 else float("inf") for p, a in zip(per_item, alone)]


@dataclass(frozen=True, slots=True)
class WorkItems:
    """One round's items as each path takes them (or the warm-up's).

    Attributes:
        prompts: what the engine gets, one per item: a ``str`` or a list of token ids.
        samplings: one :class:`~llamabatch.SamplingParams` per item, or ``None``: the
            generator's own ``sampling`` for every item.
        alone: what ``one_at_a_time`` gets, one per item, in the form that loop
            understands; ``None``: ``prompts``.
    """

    prompts: Sequence[object]
    samplings: Sequence[SamplingParams] | None = None
    alone: Sequence[object] | None = None

    def __post_init__(self) -> None:
        for name, seq in (("samplings", self.samplings), ("alone", self.alone)):
            if seq is not None and len(seq) != len(self.prompts):
                raise ValueError(
                    f"{name} has {len(seq)} entries for {len(self.prompts)} prompts: "
                    "give one per prompt"
                )


@dataclass(frozen=True, slots=True)
class LoopResult:
    """What a one-at-a-time loop may return instead of a plain token count.

    Attributes:
        tokens: reply tokens of every item.
        failed: items that ended with an error (the loop went on).
        first_error: the first of those errors, ``None`` if none failed.
    """

    tokens: int
    failed: int = 0
    first_error: str | None = None


#: ``one_at_a_time(prompts)``: complete ``prompts`` one after the other the way a caller
#: without llamabatch does (``Llama.create_completion`` in a loop); the reply tokens, or
#: a :class:`LoopResult` when it counts failed items too.
OneAtATime = Callable[[Sequence[Any]], "int | LoopResult"]


def _timed_pass(
    gen: BatchGenerator, items: WorkItems, clock: Clock, progress: Progress | None
) -> tuple[float, LoopResult]:
    tokens = failed = 0
    first_error = None
    args: tuple[Any, ...] = (items.prompts,)
    if items.samplings is not None:
        args = (items.prompts, list(items.samplings))
    t0 = clock()
    for group in gen.iter_groups(*args):
        for c in group:
            tokens += c.n_tokens
            if c.error is not None:
                failed += 1
                first_error = first_error or c.error
        if progress is not None:
            progress(len(group))
    return clock() - t0, LoopResult(tokens, failed, first_error)


def _timed_loop(
    one_at_a_time: OneAtATime, items: WorkItems, clock: Clock, progress: Progress | None
) -> tuple[float, LoopResult]:
    alone = items.prompts if items.alone is None else items.alone
    t0 = clock()
    result = one_at_a_time(alone)
    seconds = clock() - t0
    if progress is not None:
        progress(len(alone))
    return seconds, result if isinstance(result, LoopResult) else LoopResult(result)


def _as_items(items: Sequence[str] | WorkItems) -> WorkItems:
    return items if isinstance(items, WorkItems) else WorkItems(list(items))


def run_workload(
    make_generator: Callable[[int], BatchGenerator],
    prompts: Sequence[str] | Callable[[int], Sequence[str] | WorkItems],
    slots: Sequence[int],
    *,
    rounds: int = 2,
    clock: Clock = time.perf_counter,
    progress: Progress | None = None,
    one_at_a_time: OneAtATime | None = None,
    warmup: WorkItems | None = None,
) -> list[WorkloadRow]:
    """Seconds per item one at a time and for each B > 1 of ``slots``.

    Args:
        make_generator: ``make_generator(B)`` returns a ``BatchGenerator`` with
            ``slots=B`` (greedy sampling and ``max_tokens`` are the caller's choice).
            Each is closed before returning.
        one_at_a_time: the baseline row (B=1): the caller's own loop over the
            ``Llama`` (:data:`OneAtATime`), which keeps the KV cache of the previous
            prompt and so reuses a shared system prompt. Default: ``make_generator(1)``
            (``BatchGenerator(slots=1)``: every item alone through the generator).
        prompts: the items, completed whole by every run; or ``prompts(round)`` giving
            each round its own FRESH items (same count), so that no run replays a
            prompt its slots already hold from an earlier round: prompts, or a
            :class:`WorkItems` (items with their own sampling, and what the
            one-at-a-time loop gets for each).
        slots: the B values; 1 (one at a time) is always measured, listed or not.
        rounds: each round runs alone, then every B, in that order.
        clock: seconds, monotonic.
        progress: called with the number of items of each group completed (timed).
        warmup: the untimed item(s) every path completes first (one at a time: all of
            them; B: each of them ``min(B, 2)`` times, which opens the batch context);
            default :func:`warmup_prompt`, with the generator's own sampling.

    Returns:
        the one-at-a-time row first, then one row per distinct B > 1 in ``slots`` order.

    Raises:
        ValueError: no items, ``rounds < 1``, or a :class:`WorkItems` whose lists differ
            in length.
    """

    def per_round(r: int) -> WorkItems:
        return _as_items(prompts(r) if callable(prompts) else prompts)

    first = per_round(0)
    n_items = len(first.prompts)
    if not n_items:
        raise ValueError("prompts is empty: the workload needs at least one item")
    if rounds < 1:
        raise ValueError(f"rounds={rounds} is out of range: valid is >= 1")
    warm = warmup or WorkItems([warmup_prompt()])
    order = [1] + [b for i, b in enumerate(slots) if b > 1 and b not in slots[:i]]
    gens: dict[int, BatchGenerator] = {}
    try:
        for b in order:
            if b == 1 and one_at_a_time is not None:
                one_at_a_time(warm.prompts if warm.alone is None else warm.alone)
                continue
            gens[b] = make_generator(b)
            k = min(b, 2)  # opens the batch context
            if warm.samplings is None:
                gens[b].complete_many(list(warm.prompts) * k)
            else:
                gens[b].complete_many(list(warm.prompts) * k, list(warm.samplings) * k)
        rows = {b: WorkloadRow(b, n_items) for b in order}
        before = {b: (g.stats.items_batched, g.stats.items_alone) for b, g in gens.items()}
        for r in range(rounds):
            items = first if r == 0 else per_round(r)
            for b in order:
                if one_at_a_time is not None and b not in gens:  # b == 1: the loop
                    seconds, result = _timed_loop(one_at_a_time, items, clock, progress)
                else:
                    seconds, result = _timed_pass(gens[b], items, clock, progress)
                row = rows[b]
                row.per_item_s.append(seconds / len(items.prompts))
                row.tokens.append(result.tokens)
                row.items_failed += result.failed
                row.first_error = row.first_error or result.first_error
        alone = rows[1].per_item_s
        for b in order:
            row = rows[b]
            row.ratio = ratios(row.per_item_s, alone)
            if b not in gens:  # the caller's own loop: every item alone
                row.items_alone = n_items * rounds
                continue
            stats = gens[b].stats
            row.items_batched = stats.items_batched - before[b][0]
            row.items_alone = stats.items_alone - before[b][1]
            row.batch_disabled_reason = None if b == 1 else stats.batch_disabled_reason
    finally:
        for g in gens.values():
            g.close()
    return [rows[b] for b in order]


def workload_json(
    rows: Sequence[WorkloadRow], prompt_tokens: Sequence[int], rounds: int, max_tokens: int
) -> dict[str, Any]:
    """The ``"workload"`` part of the JSON document (see :mod:`llamabatch.bench`)."""
    return {
        "items": len(prompt_tokens),
        "rounds": rounds,
        "max_tokens": max_tokens,
        "prompt_tokens": list(prompt_tokens),
        "rows": [r.to_json() for r in rows],
    }


def format_workload_table(rows: Sequence[WorkloadRow]) -> str:
    """The workload table: per B the median s/item, the ratio to alone, items/hour."""
    head = ("B", "s/item", "ratio", "min", "max", "items/h", "tok/item", "batched")
    lines = [
        "|%6s | %8s | %6s | %6s | %6s | %8s | %8s | %7s |" % head,
        "|-------|----------|--------|--------|--------|----------|----------|---------|",
    ]
    for r in rows:
        label = "alone" if r.b == 1 else str(r.b)
        n = r.items_batched + r.items_alone
        share = f"{r.items_batched}/{n}" if r.b > 1 else "-"
        lines.append(
            "|%6s | %8.3f | %6.3f | %6.3f | %6.3f | %8.0f | %8.1f | %7s |"
            % (
                label,
                r.median_per_item_s,
                statistics.median(r.ratio),
                min(r.ratio),
                max(r.ratio),
                r.items_per_hour,
                r.tokens_per_item,
                share,
            )
        )
    return "\n".join(lines)

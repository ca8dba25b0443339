"""The workload of the user's own file (``llamabatch bench --prompts FILE``): seconds per
item one at a time and through the slot engine, on items sampled from that file.

The items (:class:`FileItems`) are read as ``llamabatch complete`` and ``llamabatch
tune`` read them (``llamabatch.cli.job.items``), each with its own sampling (the base
with the line's fields; items without a seed get seed 0, as in tune). Each round takes
``items`` fresh ones, disjoint from every other round's, sampled as tune samples them
(:func:`llamabatch.measure.rounds.sample_rounds`: the same seed draws the same rounds);
too few prompts for disjoint rounds is a ``ValueError`` that says what would fit, as in
tune, never a round that repeats items. One item in no round warms every path up
(:func:`~llamabatch.measure.workload.warmup_prompt` when every item is in a round).

The timing is the bench's own (:func:`~llamabatch.measure.workload.run_workload`: every
round one at a time, then each B, in that order). One at a time is :class:`LlamaLoop`:
a loop over ``Llama.create_completion`` (``create_chat_completion`` for a chat) with
each item's sampling, reply cap and constraint (``choices`` / ``json_schema`` /
``grammar`` as the GBNF the engine uses, :func:`llamabatch.llamacpp.constraints.grammar_of`);
the engine is ``BatchGenerator(slots=B)`` with the same per-item sampling.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import LlamaBatchError
from ..generator import BatchGenerator
from ..params import SamplingParams
from ..tuning.run import DEFAULT_SEED
from .baseline import check_one_reply, completion_kwargs, is_chat
from .rounds import items_per_round, sample_rounds
from .workload import (
    Clock,
    LoopResult,
    OneAtATime,
    Progress,
    WorkItems,
    WorkloadRow,
    run_workload,
    warmup_prompt,
)


@dataclass(frozen=True, slots=True)
class FileItems:
    """The items of a prompts file, as each path takes them; every list has one entry
    per item, in file order.

    Attributes:
        path: the file, for the report.
        ids: each item's id (the line's ``id``, else its 1-based line number).
        alone: what ``Llama`` gets: a prompt string (``create_completion``) or a chat,
            a list of ``{"role", "content"}`` messages (``create_chat_completion``).
        engine: what the engine gets: the prompt string, or the chat's token ids
            (rendered with the model's chat template).
        samplings: each item's :class:`~llamabatch.SamplingParams` (the base with the
            line's own fields).

    Raises:
        ValueError: lists of different lengths, or no items.
    """

    path: str
    ids: Sequence[str | int]
    alone: Sequence[object]
    engine: Sequence[object]
    samplings: Sequence[SamplingParams]

    def __post_init__(self) -> None:
        n = len(self.ids)
        if not n:
            raise ValueError(f"{self.path} holds no prompts: the workload needs at least one")
        for name in ("alone", "engine", "samplings"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries for {n} ids")

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class AloneItem:
    """One item as :class:`LlamaLoop` takes it.

    Attributes:
        prompt: a prompt string, or a chat (a list of messages).
        sampling: its sampling, reply cap and constraint.
    """

    prompt: object
    sampling: SamplingParams


class LlamaLoop:
    """The one-at-a-time path of the file workload: one ``Llama.create_completion`` per
    item (``create_chat_completion`` for a chat), with the item's sampling and reply cap
    (its ``max_tokens``, else ``max_tokens``) and its constraint as a ``LlamaGrammar``
    (each grammar text compiled once). The ``Llama`` keeps the previous prompt's KV
    cache, as a tagger's loop does.

    Called with a sequence of :class:`AloneItem`, it returns a
    :class:`~llamabatch.measure.workload.LoopResult`: reply tokens, and the items that
    raised (a ``ValueError``, ``RuntimeError`` or ``LlamaBatchError``: a prompt longer
    than the context, a bad grammar), which end with their error while the loop goes on.
    """

    def __init__(self, llm: Any, max_tokens: int) -> None:
        from llama_cpp.llama_grammar import LlamaGrammar

        from ..locks import llm_lock

        self._llm, self._max_tokens = llm, max_tokens
        self._lock = llm_lock(llm)
        self._compile = LlamaGrammar.from_string
        self._grammars: dict[str, Any] = {}

    def _grammar(self, sampling: SamplingParams) -> Any:
        from ..llamacpp.constraints import grammar_of

        text = grammar_of(sampling)
        if text is None:
            return None
        if text not in self._grammars:
            self._grammars[text] = self._compile(text, verbose=False)
        return self._grammars[text]

    def __call__(self, items: Sequence[AloneItem]) -> LoopResult:
        tokens = failed = 0
        first_error = None
        for item in items:
            try:
                kwargs = completion_kwargs(
                    item.sampling, self._max_tokens, self._grammar(item.sampling)
                )
                with self._lock:
                    if is_chat(item.prompt):
                        out = self._llm.create_chat_completion(messages=item.prompt, **kwargs)
                    else:
                        out = self._llm.create_completion(item.prompt, **kwargs)
            except (ValueError, RuntimeError, LlamaBatchError) as exc:
                failed += 1
                first_error = first_error or f"{type(exc).__name__}: {exc}"
                continue
            tokens += int(out["usage"]["completion_tokens"])
        return LoopResult(tokens, failed, first_error)


@dataclass(frozen=True, slots=True)
class FileRun:
    """What :func:`run_file_workload` measured.

    Attributes:
        rows: one at a time first, then one row per B > 1 (see
            :func:`~llamabatch.measure.workload.run_workload`).
        rounds: per round, the indices (into the items) of its items, in file order.
        warmup: index of the warm-up item, ``None`` when every item is in a round (the
            warm-up is then :func:`~llamabatch.measure.workload.warmup_prompt`).
    """

    rows: list[WorkloadRow]
    rounds: list[list[int]]
    warmup: int | None


def seeded(samplings: Sequence[SamplingParams]) -> list[SamplingParams]:
    """``samplings`` with seed 0 where none is set (tune's rule: every path draws alike)."""
    return [
        s if s.seed is not None else dataclasses.replace(s, seed=DEFAULT_SEED) for s in samplings
    ]


def run_file_workload(
    make_generator: Callable[[int], BatchGenerator],
    items: FileItems,
    slots: Sequence[int],
    *,
    rounds: int = 2,
    per_round: int | None = None,
    items_seed: int = 0,
    one_at_a_time: OneAtATime | None = None,
    clock: Clock = time.perf_counter,
    progress: Progress | None = None,
) -> FileRun:
    """Seconds per item one at a time and for each B > 1 of ``slots``, on ``rounds``
    disjoint samples of ``per_round`` items of ``items``.

    Args:
        make_generator: ``make_generator(B)``: a ``BatchGenerator`` with ``slots=B``
            (its ``max_tokens`` is the reply cap of items that set none).
        items: the file's items.
        slots: the B values; one at a time is always measured.
        rounds: rounds, >= 1.
        per_round: items per round (default ``min(8, len(items) // rounds)``).
        items_seed: seed of the sample (tune's ``items_seed``: the same rounds).
        one_at_a_time: the loop over :class:`AloneItem` lists (a :class:`LlamaLoop`);
            default ``BatchGenerator(slots=1)`` (``make_generator(1)``).
        clock: seconds, monotonic.
        progress: called with the number of items of each group completed (timed).

    Returns:
        a :class:`FileRun`.

    Raises:
        ValueError: ``rounds`` or ``per_round`` out of range, fewer than ``rounds *
            per_round`` items (the message says what would fit), or an item whose
            sampling asks for more than one generated reply (``n`` > 1,
            ``score_choices`` with choices, ``logprobs``: the loop's one
            ``create_completion`` call gives one), before any item runs.
    """
    n = len(items)
    k = items_per_round(n, rounds, per_round, source=items.path)
    check_one_reply(items.samplings, lambda i: f"{items.path} item {items.ids[i]!r}", "bench")
    chosen = sample_rounds(n, rounds, k, items_seed)
    used = {i for r in chosen for i in r}
    spare = next((i for i in range(n) if i not in used), None)
    samplings = seeded(items.samplings)

    def work(indices: Sequence[int]) -> WorkItems:
        return WorkItems(
            [items.engine[i] for i in indices],
            [samplings[i] for i in indices],
            [AloneItem(items.alone[i], samplings[i]) for i in indices],
        )

    if spare is None:
        prompt = warmup_prompt()
        warm = WorkItems([prompt], [samplings[0]], [AloneItem(prompt, samplings[0])])
    else:
        warm = work([spare])
    rows = run_workload(
        make_generator,
        lambda r: work(chosen[r]),
        slots,
        rounds=rounds,
        clock=clock,
        progress=progress,
        one_at_a_time=one_at_a_time,
        warmup=warm,
    )
    return FileRun(rows, chosen, spare)


def file_json(run: FileRun, items: FileItems, items_seed: int) -> dict[str, Any]:
    """The ``"prompts"`` part of the workload's JSON (see :mod:`llamabatch.bench.report`)."""
    return {
        "file": items.path,
        "n_prompts": len(items),
        "items_seed": items_seed,
        "items_per_round": len(run.rounds[0]),
        "item_ids": [[items.ids[i] for i in r] for r in run.rounds],
        "warmup_id": None if run.warmup is None else items.ids[run.warmup],
    }


__all__ = [
    "AloneItem",
    "FileItems",
    "FileRun",
    "LlamaLoop",
    "file_json",
    "run_file_workload",
    "seeded",
]

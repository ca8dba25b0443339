"""Which slot count pays on the user's own device, model and items, and whether the
replies still agree: :func:`tune` runs one at a time against the slot engine at each slot
count, in alternating rounds of fresh items (:func:`llamabatch.measure.compare.compare`),
and returns a :class:`~llamabatch.measure.report.TuneReport` with the verdict
(:mod:`llamabatch.measure.verdict`)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, cast

from .._util.busy import load_average
from ..engine.auto_slots import choose_slots
from ..engine.backend import Backend, BackendInfo
from ..errors import LlamaBatchError, ParameterError
from ..generator import BatchGenerator
from ..items import is_messages, per_item_sampling
from ..params import AUTO_SLOTS, DEFAULT_N_CTX_SEQ, BatchConfig, SamplingParams
from .agreement import compile_label_regex, label_of, label_rule
from .compare import FLOOR, ONE_AT_A_TIME, compare, setting_name, setting_slots, warmup_item
from .noise import Noise, noise_of
from .one_at_a_time import LlamaLoop, OneAtATime, check_one_reply
from .records import PassReply, WorkItem, seeded
from .report import TuneReport, json_ready
from .rounds import Clock, Progress, Round, items_per_round, sample_rounds
from .summary import Floor, SettingReport, floor_of, summarize
from .verdict import (
    CANNOT_TELL,
    DEFAULT_MAX_AGREEMENT_DROP,
    DEFAULT_MIN_GAIN_PCT,
    Recommendation,
    recommend,
)

#: The slot counts tune tries (``slots``' default); ``slots="auto"`` tries those below
#: the count that fits, then that count.
TUNE_SLOTS = (2, 4, 8)


def auto_slot_counts(
    info: BackendInfo, n_ctx_seq: int, n_batch: int
) -> tuple[tuple[int, ...], str]:
    """``slots="auto"``: :data:`TUNE_SLOTS` below the count whose KV cache fits
    (:func:`~llamabatch.engine.auto_slots.choose_slots`), then that count; and its reason.

    Raises:
        ValueError: not even 2 slots fit (nothing to compare), or the free memory is unknown.
    """
    choice = choose_slots(info, n_ctx_seq, n_batch)
    if choice.slots < 2:
        raise ParameterError("slots", AUTO_SLOTS, f"slot counts >= 2 that fit: {choice.reason}")
    return (*(k for k in TUNE_SLOTS if k < choice.slots), choice.slots), choice.reason


def _slot_counts(slots: Sequence[int]) -> tuple[int, ...]:
    values = tuple(dict.fromkeys(slots))
    if not values or not all(
        isinstance(b, int) and not isinstance(b, bool) and b >= 2 for b in values
    ):
        raise ValueError(
            f"slots={list(slots)!r} is not valid: give slot counts >= 2 "
            "(one at a time is always measured)"
        )
    return values


def tune(
    llm: Any,
    prompts: Sequence[object],
    slots: Sequence[int] | Literal["auto"] = (2, 4, 8),
    rounds: int = 3,
    *,
    items: int | None = None,
    sampling: SamplingParams | Sequence[SamplingParams] | None = None,
    max_tokens: int = 200,
    n_ctx_seq: int | None = None,
    n_batch: int = 512,
    cache_ram_mib: int = 1024,
    label_regex: str | None = None,
    ids: Sequence[str | int] | None = None,
    items_seed: int = 0,
    min_gain_pct: float = DEFAULT_MIN_GAIN_PCT,
    max_agreement_drop: float = DEFAULT_MAX_AGREEMENT_DROP,
    complete_args: Sequence[str] = ("PROMPTS",),
    model: str | None = None,
    progress: Progress | None = None,
    backend: Callable[[int], Backend] | None = None,
    one_at_a_time: Callable[[object, SamplingParams], PassReply] | None = None,
    budget_s: float | None = None,
    threads: int | None = None,
    threads_as: str = "Llama(n_threads={})",
    clock: Clock = time.perf_counter,
    cpu_clock: Clock | None = time.process_time,
    load: Callable[[], float | None] | None = load_average,
    n_cores: int | None = None,
) -> TuneReport:
    """Measure which slot count pays on this machine, model and items.

    Each of ``rounds`` rounds draws ``items`` fresh prompts (disjoint from every other
    round's, sampled with ``items_seed``) and completes them one at a time
    (``llm.create_completion``, or ``create_chat_completion`` for a chat),
    then with the slot engine at each slot count, in an order that alternates from
    round to round; at temperature > 0 a second one-at-a-time pass with every seed + 1
    measures the floor (how much two one-at-a-time runs agree), and each slot count's
    agreement is then counted against that second run too (like with like: two runs of
    different seeds). Everything is first warmed up with one untimed item. The time
    grows as ``rounds * items * (settings + 1, or + 2 with the floor)`` items, whatever
    the number of prompts. With ``budget_s``, rounds go on after ``rounds`` while the
    verdict is "cannot tell", fresh items remain and the next round (as long as the
    longest so far) ends within ``budget_s`` seconds of the start.

    Args:
        llm: a loaded ``llama_cpp.Llama`` (left as it was, apart from its KV cache), or
            ``None`` with ``backend``.
        prompts: the user's items: strings (special tokens parsed), lists of token ids,
            or chats (lists of ``{"role", "content"}`` messages, which need ``llm``).
        slots: the engine's slot counts, each >= 2; ``"auto"``: 2, 4 and 8 below the most
            whose KV cache fits half the free memory of the device, then that count
            (:func:`auto_slot_counts`; the reason is one of the report's ``notes``).
        rounds: rounds, >= 1 (with ``budget_s``: the fewest).
        items: items per round (default ``min(8, len(prompts) // rounds)``).
        sampling: one :class:`~llamabatch.SamplingParams` for every item, or one per
            prompt (default: ``SamplingParams()``), each for one generated reply.
            Items without a seed get seed 0, so that every setting samples alike.
        max_tokens, n_ctx_seq, n_batch, cache_ram_mib: as for
            :class:`~llamabatch.BatchGenerator` (``max_tokens`` also caps one at a time).
        label_regex: a regular expression whose first match (group 1 if it has groups)
            is a reply's label; default: the reply itself with ``choices``, its JSON
            value with ``json_schema`` (every item must have that constraint).
        ids: an id per prompt for the report (default: the 0-based index).
        items_seed: seed of the sample of items.
        min_gain_pct, max_agreement_drop: the recommendation's thresholds
            (:mod:`llamabatch.measure.verdict`).
        complete_args: what the recommended ``llamabatch complete`` command holds
            before ``--slots K``.
        model: the model's name for the report.
        progress: ``progress(n)`` after every ``n`` items timed (a progress bar).
        backend: ``backend(slots)`` gives a fresh backend (e.g. ``FakeBackend``) for the
            generator of each slot count (1 for one at a time) instead of ``llm``.
        one_at_a_time: ``one_at_a_time(prompt, sampling)``: the reply one at a time to one
            item (its ``id`` and ``label`` are filled in here; default: ``llm``'s
            ``create_completion``; with ``backend``, ``BatchGenerator(slots=1)``).
        budget_s: seconds the whole run may take for more rounds (``None``: exactly
            ``rounds``; > 0).
        threads, threads_as: the thread count the caller set (``None``: the default; the
            CPU-time check then reads ``llm.n_threads``) and how the busy hint spells a
            thread count (``"--threads {}"`` in the CLI).
        clock: seconds, monotonic.
        cpu_clock: this process's CPU seconds (``None``: not measured).
        load: the load average (``None``: not measured).
        n_cores: the machine's cores, for the busy rule (``None``: ``os.cpu_count()``).

    Returns:
        a :class:`~llamabatch.measure.report.TuneReport`.

    Raises:
        ValueError: before any model work: a parameter out of range (named), too few
            prompts for disjoint rounds, a bad ``label_regex``, ``ids`` / ``sampling`` of
            the wrong length, or an item one ``create_completion`` call cannot answer
            (``n`` > 1, ``score_choices``, ``logprobs``, ``stop_token_ids``).
    """
    t_start = clock()
    if (llm is None) == (backend is None):
        raise ValueError("give exactly one of llm (a llama_cpp.Llama) or backend")
    notes = []
    info: BackendInfo | None = None
    if slots == AUTO_SLOTS:
        info = (backend(2) if backend is not None else _llama_backend(llm)).info
        length = n_ctx_seq or min(DEFAULT_N_CTX_SEQ, info.n_ctx)
        counts, reason = auto_slot_counts(info, length, n_batch)
        notes.append(reason)
    else:
        counts = _slot_counts(cast(Sequence[int], slots))
    if budget_s is not None and (
        isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0
    ):
        raise ParameterError("budget_s", budget_s, "seconds > 0, or None for exactly rounds")
    n = len(prompts)
    per_round = items_per_round(n, rounds, items)
    samplings = [s for _, s in per_item_sampling(prompts, sampling or SamplingParams())]
    check_one_reply(samplings, lambda k: f"item {k} (sampling of prompts[{k}])")
    ids = list(range(n)) if ids is None else list(ids)
    if len(ids) != n:
        raise ValueError(f"ids has {len(ids)} entries for {n} prompts")
    regex = compile_label_regex(label_regex)
    rule = label_rule(samplings, label_regex)
    config = BatchConfig(  # checked up front; each setting replaces slots
        n_ctx_seq=n_ctx_seq, n_batch=n_batch, max_tokens=max_tokens, cache_ram_mib=cache_ram_mib
    )

    def make_generator(k: int) -> BatchGenerator:
        return BatchGenerator.from_config(
            replace(config, slots=k, lookahead=None),
            llm if backend is None else None,
            backend=None if backend is None else backend(k),
        )

    if llm is None and any(is_messages(p) for p in prompts):
        raise ValueError("chat prompts (lists of messages) need llm (a llama_cpp.Llama)")
    work = seeded([WorkItem(i, p, s) for i, p, s in zip(ids, prompts, samplings)])
    if info is None:  # after every check: no backend is made for a refused call
        info = (backend(2) if backend is not None else _llama_backend(llm)).info
    on_cpu = info.device is None
    # adaptive rounds keep one prompt back for the warm-up when they can
    max_rounds = rounds if budget_s is None else max(rounds, (n - 1) // per_round)
    chosen = sample_rounds(n, max_rounds, per_round, items_seed)
    warm, _ = warmup_item(work, chosen)
    unfilled = [k for k in counts if k > per_round]
    if unfilled:
        notes.append(
            f"{per_round} items per round fill at most {per_round} of "
            f"{', '.join(map(str, unfilled))} slots: not judged; give more prompts or --items"
        )
    has_labels = rule is not None
    floored = any(not s.is_greedy for s in samplings)
    n_cores = n_cores or os.cpu_count()
    # the threads that decode: those given, else the Llama's own (its default resolved)
    decoding = threads if threads is not None else getattr(llm, "n_threads", None)
    names = [ONE_AT_A_TIME, *(setting_name(b) for b in counts)]

    def judge(
        done: Sequence[Round], kv: Mapping[str, int | None]
    ) -> tuple[dict[str, SettingReport], Floor, Noise, Recommendation]:
        against = FLOOR if floored else ONE_AT_A_TIME
        report_of = {
            name: summarize(
                name,
                setting_slots(name),
                done,
                n_prompts=n,
                has_labels=has_labels,
                kv_bytes_per_slot=kv.get(name),
                against=ONE_AT_A_TIME if name == ONE_AT_A_TIME else against,
            )
            for name in names
        }
        seed = work[0].sampling.seed or 0
        floor = floor_of(done, has_labels, (seed, (seed + 1) % 2**32))
        noise = noise_of(
            done,
            names,
            ONE_AT_A_TIME,
            n_cores=n_cores,
            threads=threads,
            threads_as=threads_as,
            cpu_threads=decoding if on_cpu else None,
        )
        rec = recommend(
            [report_of[setting_name(b)] for b in counts],
            floor,
            min_gain_pct=min_gain_pct,
            max_agreement_drop=max_agreement_drop,
            complete_args=complete_args,
            items_per_round=per_round,
            busy=noise.busy,
            fresh_rounds_left=max(0, (n - 1 - len(done) * per_round) // per_round),
        )
        return report_of, floor, noise, rec

    fits = any(k <= per_round for k in counts)

    def more(done: Sequence[Round]) -> bool:
        if budget_s is None or not done or not fits:
            return False  # more rounds cannot fill slots that a round's items cannot
        _, _, _, rec = judge(done, {})
        longest = max(sum(p.seconds or 0.0 for p in r.passes) for r in done)
        return rec.verdict == CANNOT_TELL and clock() - t_start + longest <= budget_s

    done = compare(
        lambda r: [work[i] for i in chosen[r]],
        rounds,
        counts,
        make_generator,
        warmup=warm,
        one_at_a_time=_one_at_a_time(llm, max_tokens, one_at_a_time),
        floor=floored,
        label=lambda text: label_of(text, rule, regex),
        failures=(ValueError, LlamaBatchError),
        progress=progress,
        clock=clock,
        cpu_clock=cpu_clock,
        load=load,
        more=more,
        max_rounds=max_rounds,
    )
    kv = {ONE_AT_A_TIME: _llama_kv_bytes(llm), **done.kv_bytes_per_slot}
    report_of, floor, noise, recommendation = judge(done.rounds, kv)
    if budget_s is not None and recommendation.verdict == CANNOT_TELL and fits:
        notes.append(_budget_end(len(done.rounds), max_rounds, budget_s))
    return TuneReport(
        model=model,
        n_prompts=n,
        items_per_round=per_round,
        n_rounds=len(done.rounds),
        slots=counts,
        sampling=json_ready(work[0].sampling if work else SamplingParams()),
        max_tokens=max_tokens,
        label_rule=rule,
        label_regex=label_regex,
        items_seed=items_seed,
        min_gain_pct=min_gain_pct,
        max_agreement_drop=max_agreement_drop,
        one_at_a_time=report_of[ONE_AT_A_TIME],
        settings=tuple(report_of[setting_name(b)] for b in counts),
        floor=floor,
        agreement_against=FLOOR if floored else ONE_AT_A_TIME,
        noise=noise,
        recommendation=recommendation,
        rounds=done.rounds,
        seconds=clock() - t_start,
        notes=tuple(notes),
    )


def _budget_end(n_rounds: int, max_rounds: int, budget_s: float) -> str:
    if n_rounds >= max_rounds:
        return (
            f"stopped after {n_rounds} rounds: the prompts hold no fresh items for another "
            "round; give more prompts (or fewer --items) to go on"
        )
    return f"stopped after {n_rounds} rounds: another would pass the budget of {budget_s:g} s"


def _llama_backend(llm: Any) -> Backend:
    from ..llamacpp.backend import LlamaBackend  # loads llama.cpp only when asked

    return LlamaBackend(llm)


def _one_at_a_time(
    llm: Any, max_tokens: int, one: Callable[[object, SamplingParams], PassReply] | None
) -> OneAtATime | None:
    if one is not None:
        return OneAtATime(lambda it: dataclasses.replace(one(it.prompt, it.sampling), id=it.id))
    return None if llm is None else LlamaLoop(llm, max_tokens)


def _llama_kv_bytes(llm: Any) -> int | None:
    """KV bytes of the ``Llama``'s own context (one at a time), estimated; ``None``
    without a ``Llama`` or when it cannot be estimated."""
    if llm is None:
        return None
    try:
        from ..llamacpp.kv_size import estimate

        return estimate(llm, slots=1, n_ctx_seq=int(llm.n_ctx())).bytes_per_slot
    except (ValueError, LlamaBatchError, AttributeError):
        return None

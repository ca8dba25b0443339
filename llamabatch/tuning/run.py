"""``tune``: one at a time against the slot engine at each slot count, on the caller's
own items, in alternating rounds of fresh items; see :func:`tune`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

from ..completion import Completion
from ..engine.backend import Backend
from ..errors import LlamaBatchError
from ..generator import BatchGenerator
from ..measure.agreement import compile_label_regex, label_of, label_rule
from ..measure.baseline import OneAtATime, check_one_reply, is_chat, llama_one_at_a_time
from ..measure.records import BASELINE, FLOOR, RoundRecord, RunRecord, TuneReply, setting_name
from ..measure.rounds import items_per_round, sample_rounds, setting_order
from ..measure.summary import floor_of, summarize
from ..measure.workload import warmup_prompt
from ..params import BatchConfig, SamplingParams
from .report import TuneReport
from .rule import DEFAULT_MAX_AGREEMENT_DROP, DEFAULT_MIN_GAIN_PCT, recommend

Clock = Callable[[], float]
#: ``progress(n)``: ``n`` more items completed (timed passes only).
Progress = Callable[[int], None]

#: Seed of items whose sampling sets none: every setting must draw alike.
DEFAULT_SEED = 0


def _reply(index_id: str | int, c: Completion) -> TuneReply:
    return TuneReply(index_id, c.text, c.finish_reason, c.error, c.n_tokens, c.path)


def _with_seeds(samplings: Sequence[SamplingParams], offset: int) -> list[SamplingParams]:
    return [
        dataclasses.replace(s, seed=((DEFAULT_SEED if s.seed is None else s.seed) + offset) % 2**32)
        for s in samplings
    ]


def _per_item(
    sampling: SamplingParams | Sequence[SamplingParams] | None, n: int
) -> list[SamplingParams]:
    if sampling is None:
        sampling = SamplingParams()
    if isinstance(sampling, SamplingParams):
        return [sampling] * n
    samplings = list(sampling)
    if len(samplings) != n or not all(isinstance(s, SamplingParams) for s in samplings):
        raise ValueError(
            f"sampling has {len(samplings)} entries for {n} prompts: give one "
            "SamplingParams, or one per prompt"
        )
    return samplings


class _Paths:
    """How each setting completes items: the baseline, and one generator per slot count
    (made lazily, reused by every round, closed by :meth:`close`)."""

    def __init__(
        self,
        llm: Any,
        backend: Callable[[int], Backend] | None,
        one_at_a_time: OneAtATime | None,
        generator_kwargs: dict[str, Any],
    ) -> None:
        self.llm, self.backend, self.generator_kwargs = llm, backend, generator_kwargs
        self.gens: dict[int, BatchGenerator] = {}
        self.failed: dict[int, str] = {}
        if one_at_a_time is None:
            if llm is not None:
                one_at_a_time = llama_one_at_a_time(llm, generator_kwargs["max_tokens"])
            else:
                one_at_a_time = self._alone_through_generator
        self.one_at_a_time = one_at_a_time

    def _alone_through_generator(self, prompt: object, sampling: SamplingParams) -> TuneReply:
        gen = self.generator(1)
        if gen is None:
            raise LlamaBatchError(self.failed[1])
        return _reply(0, gen.complete_many([prompt], [sampling])[0])

    def generator(self, slots: int) -> BatchGenerator | None:
        if slots in self.failed:
            return None
        if slots not in self.gens:
            kwargs: dict[str, Any] = dict(slots=slots, **self.generator_kwargs)
            try:
                if self.backend is not None:
                    gen = BatchGenerator(backend=self.backend(slots), **kwargs)
                else:
                    gen = BatchGenerator(self.llm, **kwargs)
            except (ValueError, LlamaBatchError) as exc:
                self.failed[slots] = f"{type(exc).__name__}: {exc}"
                return None
            self.gens[slots] = gen
        return self.gens[slots]

    def kv_bytes_per_slot(self, slots: int) -> int | None:
        if slots == 1:
            if self.llm is None:
                return None
            try:
                from ..llamacpp.kv_size import estimate

                n_ctx = int(self.llm.n_ctx())
                return estimate(self.llm, slots=1, n_ctx_seq=n_ctx).bytes_per_slot
            except (ValueError, LlamaBatchError, AttributeError):
                return None
        gen = self.gens.get(slots)
        if gen is None or not gen.stats.kv_bytes:
            return None
        return gen.stats.kv_bytes // slots

    def close(self) -> None:
        for gen in self.gens.values():
            gen.close()


def _timed(
    paths: _Paths,
    setting: str,
    slots: int,
    prompts: Sequence[object],
    samplings: Sequence[SamplingParams],
    ids: Sequence[str | int],
    labels: Callable[[TuneReply], TuneReply],
    clock: Clock,
    progress: Progress,
) -> RunRecord:
    """One setting's pass over one round's items."""
    if slots == 1:
        t0 = clock()
        replies = []
        for p, s, i in zip(prompts, samplings, ids):
            replies.append(labels(dataclasses.replace(paths.one_at_a_time(p, s), id=i)))
            progress(1)
        return RunRecord(setting, 1, clock() - t0, tuple(replies), items_alone=len(replies))
    gen = paths.generator(slots)
    if gen is None:
        progress(len(prompts))
        return RunRecord(setting, slots, None, (), error=paths.failed[slots])
    done: list[Completion] = []
    try:
        t0 = clock()
        for group in gen.iter_groups(prompts, list(samplings)):
            done.extend(group)
            progress(len(group))
        seconds = clock() - t0
    except (ValueError, LlamaBatchError) as exc:
        progress(len(prompts) - len(done))
        return RunRecord(setting, slots, None, (), error=f"{type(exc).__name__}: {exc}")
    return RunRecord(
        setting,
        slots,
        seconds,
        tuple(labels(_reply(ids[c.index], c)) for c in done),
        items_batched=sum(c.path == "batch" for c in done),
        items_alone=sum(c.path != "batch" for c in done),
        batch_disabled_reason=gen.stats.batch_disabled_reason,
    )


def _warm_up(
    paths: _Paths,
    slot_counts: Sequence[int],
    prompt: object,
    engine_prompt: object,
    sampling: SamplingParams,
) -> None:
    """One untimed item through every path (a loaded model's first calls are slow; the
    generators open their batch context)."""
    paths.one_at_a_time(prompt, sampling)
    prompt = engine_prompt
    for b in slot_counts:
        gen = paths.generator(b)
        if gen is not None:
            try:
                gen.complete_many([prompt] * min(b, 2), sampling)
            except (ValueError, LlamaBatchError) as exc:
                paths.failed[b] = f"{type(exc).__name__}: {exc}"


def _engine_prompts(llm: Any, prompts: Sequence[object]) -> list[object]:
    """What the engine gets: a chat is rendered with the model's chat template and
    tokenized as llama-cpp-python's chat handlers do; a prompt as it is."""
    if not any(is_chat(p) for p in prompts):
        return list(prompts)
    if llm is None:
        raise ValueError("chat prompts (lists of messages) need llm (a llama_cpp.Llama)")
    from ..llamacpp.chat import ChatTemplate, chat_tokens, check_messages

    template = ChatTemplate.from_llama(llm)
    out: list[object] = []
    for k, p in enumerate(prompts):
        if not is_chat(p):
            out.append(p)
            continue
        try:
            out.append(chat_tokens(llm, template.render(check_messages(p))))
        except ValueError as exc:
            raise ValueError(f"prompts[{k}]: {exc}") from None
    return out


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
    slots: Sequence[int] = (2, 4, 8),
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
    one_at_a_time: OneAtATime | None = None,
    clock: Clock = time.perf_counter,
) -> TuneReport:
    """Measure which slot count pays on this machine, model and items.

    Each of ``rounds`` rounds draws ``items`` fresh prompts (disjoint from every other
    round's, sampled with ``items_seed``) and completes them one at a time
    (``llm.create_completion``, or ``create_chat_completion`` for a chat; the baseline),
    then with the slot engine at each slot count, in an order that alternates from
    round to round; at temperature > 0 a second one-at-a-time pass with every seed + 1
    measures the floor (how much two one-at-a-time runs agree). Everything is first
    warmed up with one untimed item. The time grows as ``rounds * items * (settings +
    1, or + 2 with the floor)`` items, whatever the number of prompts.

    Args:
        llm: a loaded ``llama_cpp.Llama`` (left as it was, apart from its KV cache), or
            ``None`` with ``backend``.
        prompts: the user's items: strings (special tokens parsed), lists of token ids,
            or chats (lists of ``{"role", "content"}`` messages, which need ``llm``).
        slots: the engine's slot counts, each >= 2.
        rounds: rounds, >= 1.
        items: items per round (default ``min(8, len(prompts) // rounds)``).
        sampling: one :class:`~llamabatch.SamplingParams` for every item, or one per
            prompt (default: ``SamplingParams()``), each for one generated reply.
            Items without a seed get seed 0, so that every setting samples alike.
        max_tokens, n_ctx_seq, n_batch, cache_ram_mib: as for
            :class:`~llamabatch.BatchGenerator` (``max_tokens`` also caps the baseline).
        label_regex: a regular expression whose first match (group 1 if it has groups)
            is a reply's label; default: the reply itself with ``choices``, its JSON
            value with ``json_schema`` (every item must have that constraint).
        ids: an id per prompt for the report (default: the 0-based index).
        items_seed: seed of the sample of items.
        min_gain_pct, max_agreement_drop: the recommendation's thresholds
            (:mod:`llamabatch.tuning.rule`).
        complete_args: what the recommended ``llamabatch complete`` command holds
            before ``--slots K``.
        model: the model's name for the report.
        progress: ``progress(n)`` after every ``n`` items timed (a progress bar).
        backend: ``backend(slots)`` gives a fresh backend (e.g. ``FakeBackend``) for the
            generator of each slot count (1 for the baseline) instead of ``llm``.
        one_at_a_time: the baseline for one item (default: ``llm``'s
            ``create_completion``; with ``backend``, ``BatchGenerator(slots=1)``).
        clock: seconds, monotonic.

    Returns:
        a :class:`~llamabatch.tuning.TuneReport`.

    Raises:
        ValueError: a parameter out of range (named), too few prompts for disjoint
            rounds, a bad ``label_regex``, ``ids`` / ``sampling`` of the wrong length, or
            an item whose sampling asks for more than one generated reply (``n`` > 1,
            ``score_choices`` with ``choices``, ``logprobs``: one
            ``create_completion`` call gives one reply, so tune compares one reply per
            item), all before any model work.
    """
    t_start = clock()
    if (llm is None) == (backend is None):
        raise ValueError("give exactly one of llm (a llama_cpp.Llama) or backend")
    counts = _slot_counts(slots)
    n = len(prompts)
    per_round = items_per_round(n, rounds, items)
    samplings = _per_item(sampling, n)
    check_one_reply(samplings, lambda k: f"item {k} (sampling of prompts[{k}])")
    ids = list(range(n)) if ids is None else list(ids)
    if len(ids) != n:
        raise ValueError(f"ids has {len(ids)} entries for {n} prompts")
    regex = compile_label_regex(label_regex)
    rule = label_rule(samplings, label_regex)
    # checked up front (n_ctx_seq None: the generator's default, a stand-in here)
    BatchConfig(slots=1, n_ctx_seq=n_ctx_seq or 1, n_batch=n_batch, max_tokens=max_tokens)
    generator_kwargs: dict[str, Any] = dict(
        n_ctx_seq=n_ctx_seq, n_batch=n_batch, max_tokens=max_tokens, cache_ram_mib=cache_ram_mib
    )
    engine_prompts = _engine_prompts(llm, prompts)
    base = _with_seeds(samplings, 0)
    random_sampling = any(not s.is_greedy for s in samplings)
    floor_samplings = _with_seeds(samplings, 1) if random_sampling else None
    chosen = sample_rounds(n, rounds, per_round, items_seed)
    used = {i for r in chosen for i in r}
    spare = next((i for i in range(n) if i not in used), None)
    notes = []
    if per_round < max(counts):
        notes.append(
            f"{per_round} items per round fill at most {per_round} of "
            f"{max(counts)} slots: give more prompts or --items"
        )

    def labels(reply: TuneReply) -> TuneReply:
        return dataclasses.replace(
            reply, label=label_of(reply.text if reply.ok else None, rule, regex)
        )

    names = [BASELINE, *([FLOOR] if floor_samplings else []), *map(setting_name, counts)]
    slots_of = {BASELINE: 1, FLOOR: 1, **{setting_name(b): b for b in counts}}
    tick = progress or (lambda k: None)
    records: list[RoundRecord] = []
    with ExitStack() as stack:
        if llm is not None:  # the baseline's seeds and cache: put back at the end
            from ..llamacpp.llm_state import LlamaGuard

            stack.callback(LlamaGuard(llm).restore)
        paths = _Paths(llm, backend, one_at_a_time, generator_kwargs)
        stack.callback(paths.close)
        if spare is None:
            _warm_up(paths, counts, warmup_prompt(), warmup_prompt(), base[0])
        else:
            _warm_up(paths, counts, prompts[spare], engine_prompts[spare], base[spare])
        for r, indices in enumerate(chosen):
            order = setting_order(names, r)
            runs = []
            for name in order:
                ss = floor_samplings if name == FLOOR and floor_samplings else base
                runs.append(
                    _timed(
                        paths,
                        name,
                        slots_of[name],
                        [(engine_prompts if slots_of[name] > 1 else prompts)[i] for i in indices],
                        [ss[i] for i in indices],
                        [ids[i] for i in indices],
                        labels,
                        clock,
                        tick,
                    )
                )
            records.append(
                RoundRecord(r, tuple(ids[i] for i in indices), tuple(order), tuple(runs))
            )
        has_labels = rule is not None
        report_of = {
            name: summarize(
                name,
                slots_of[name],
                records,
                n_prompts=n,
                has_labels=has_labels,
                kv_bytes_per_slot=paths.kv_bytes_per_slot(slots_of[name]),
            )
            for name in (BASELINE, *map(setting_name, counts))
        }
    settings = tuple(report_of[setting_name(b)] for b in counts)
    seed = base[0].seed or 0
    floor = floor_of(records, has_labels, (seed, (seed + 1) % 2**32))
    return TuneReport(
        model=model,
        n_prompts=n,
        items_per_round=per_round,
        n_rounds=rounds,
        slots=counts,
        sampling=_sampling_dict(base[0] if base else SamplingParams()),
        max_tokens=max_tokens,
        label_rule=rule,
        label_regex=label_regex,
        items_seed=items_seed,
        min_gain_pct=min_gain_pct,
        max_agreement_drop=max_agreement_drop,
        baseline=report_of[BASELINE],
        settings=settings,
        floor=floor,
        recommendation=recommend(
            settings,
            floor,
            min_gain_pct=min_gain_pct,
            max_agreement_drop=max_agreement_drop,
            complete_args=complete_args,
        ),
        rounds=tuple(records),
        seconds=clock() - t_start,
        notes=tuple(notes),
    )


def _sampling_dict(s: SamplingParams) -> dict[str, Any]:
    d = dataclasses.asdict(s)
    for k, v in d.items():
        if isinstance(v, tuple):
            d[k] = list(v)
    return d

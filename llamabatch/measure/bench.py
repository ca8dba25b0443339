"""``llamabatch bench``'s measurement (:func:`bench`): the raw throughput per B
(:mod:`llamabatch.measure.raw`) and a tagging workload, one at a time against the slot
engine at each B (:func:`llamabatch.measure.compare.compare`), on a :class:`BenchSetup`;
its tables and JSON document are :mod:`llamabatch.measure.report`'s."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from ..engine.backend import Backend
from ..errors import ParameterError
from ..generator import BatchGenerator
from ..params import DEFAULT_N_CTX_SEQ, DEFAULT_TEMPERATURE, BatchConfig, SamplingParams
from .compare import ONE_AT_A_TIME, compare, setting_name, setting_slots, warmup_item
from .host import collect_header
from .noise import noise_of
from .one_at_a_time import LlamaLoop, check_one_reply
from .raw import ctx_per_seq, run_raw
from .records import WorkItem, seeded
from .report import (
    document,
    format_header,
    format_raw_table,
    format_split,
    format_workload_table,
    json_ready,
    workload_rows,
    write_json,
)
from .rounds import items_per_round, sample_rounds
from .summary import summarize
from .workloads import WORKLOADS, Workload, tagging, warmup_prompt

PARTS = ("raw", "workload")
#: Prompt lengths of the workload vary within PP * (1 +- SPREAD).
SPREAD = 0.4
#: The workload's name when its items come from --prompts FILE.
PROMPTS_WORKLOAD = "prompts"
#: ``BatchConfig``'s defaults: a file's context per sequence and reply cap are
#: ``llamabatch complete``'s and ``llamabatch tune``'s.
_BATCH_DEFAULTS = BatchConfig()


@dataclass(frozen=True, slots=True)
class BenchParams:
    """What to measure (the ``"params"`` of the JSON document), grouped by part.

    Attributes:
        slots, parts, n_batch, seed: the B values, the parts run (``PARTS``), most tokens
            per ``llama_decode``, the seed of the random prompts and of the workload.
        prompt_tokens, gen_tokens, rounds: the raw bench's PP and TG per sequence and its
            measurements per B (``prompt_tokens`` is also the tagging workload's mean).
        workload, items, workload_rounds, max_tokens: the workload's name (``"prompts"``
            for the items of a file), items per round, rounds, and reply cap
            (``None``: the workload's, see ``reply_cap``).
        prompts, temperature, n_ctx_seq: the workload of a file (``workload ==
            "prompts"``): its path, the temperature of items that set none, and the
            context per sequence of both paths (the ``Llama``'s ``n_ctx`` and each
            slot's), as for ``llamabatch tune``; ``seed`` is the seed of the sample.
    """

    slots: tuple[int, ...] = (1, 2, 4, 8)
    parts: tuple[str, ...] = PARTS
    n_batch: int = 512
    seed: int = 0
    # the raw bench
    prompt_tokens: int = 256
    gen_tokens: int = 64
    rounds: int = 3
    # the workload
    workload: str = "S"
    items: int = 8
    workload_rounds: int = 2
    max_tokens: int | None = None
    # the workload of a file (--prompts)
    prompts: str | None = None
    temperature: float = DEFAULT_TEMPERATURE
    n_ctx_seq: int = DEFAULT_N_CTX_SEQ

    @property
    def reply_cap(self) -> int:
        """``max_tokens``, else the workload's (S, U: 48; L: 200; tagging: 64; a file:
        200, as ``llamabatch complete``)."""
        if self.max_tokens is not None:
            return self.max_tokens
        if self.workload == PROMPTS_WORKLOAD:
            return _BATCH_DEFAULTS.max_tokens
        return WORKLOADS[self.workload].max_tokens if self.workload in WORKLOADS else 64

    @property
    def llama_n_ctx(self) -> int:
        """Tokens of context the ``Llama`` needs (one at a time runs in it): a file's
        ``n_ctx_seq``, else the longest synthetic prompt (S: ~390 + up to 150 ticket
        tokens) and the reply cap, padded; at least the raw bench's PP + TG when it runs."""
        raw = self.prompt_tokens + self.gen_tokens if "raw" in self.parts else 0
        if self.workload == PROMPTS_WORKLOAD:
            return max(raw, self.n_ctx_seq)
        longest = math.ceil(self.prompt_tokens * (1 + SPREAD)) + 64
        if self.workload in WORKLOADS:
            longest = max(longest, 600)
        return ctx_per_seq(max(self.prompt_tokens + self.gen_tokens, longest + self.reply_cap))

    def __post_init__(self) -> None:
        checks = [
            ("slots", bool(self.slots) and min(self.slots) >= 1, "B values >= 1"),
            ("prompt_tokens", self.prompt_tokens >= 1, ">= 1"),
            ("gen_tokens", self.gen_tokens >= 1, ">= 1"),
            ("rounds", self.rounds >= 1, ">= 1"),
            ("items", self.items >= 1, ">= 1"),
            ("workload_rounds", self.workload_rounds >= 1, ">= 1"),
            ("max_tokens", self.max_tokens is None or self.max_tokens >= 1, "None or >= 1"),
            (
                "workload",
                self.workload in (*WORKLOADS, "tagging")
                or (self.workload == PROMPTS_WORKLOAD and self.prompts is not None),
                f"one of {', '.join((*WORKLOADS, 'tagging'))}, or {PROMPTS_WORKLOAD!r} "
                "with prompts (a file)",
            ),
            (
                "prompts",
                self.prompts is None or self.workload == PROMPTS_WORKLOAD,
                f"None unless workload={PROMPTS_WORKLOAD!r}",
            ),
            ("temperature", self.temperature >= 0, ">= 0"),
            ("n_ctx_seq", self.n_ctx_seq >= 1, ">= 1"),
            (
                "n_batch",
                self.n_batch >= max(self.slots or (1,)),
                f">= {max(self.slots or (1,))} (the largest slot count)",
            ),
        ]
        for name, ok, valid in checks:
            if not ok:
                raise ParameterError(name, getattr(self, name), valid)

    def to_json(self) -> dict[str, Any]:
        return cast("dict[str, Any]", json_ready(self))


@dataclass(frozen=True, slots=True)
class BenchSetup:
    """Where the bench runs: how to get backends and generators, and the header.

    Attributes:
        make_backend: a fresh backend (its batch context not open) for the raw bench.
        make_generator: ``make_generator(B, n_ctx_seq, max_tokens)``: a
            ``BatchGenerator`` with ``slots=B``.
        tokenize: token ids of a prompt (a string, or a chat's messages), as the
            generators will count them.
        header: :func:`llamabatch.measure.host.collect_header`'s dict (``n_ctx_seq`` filled in
            by the bench).
        one_at_a_time: ``one_at_a_time(max_tokens)``: the workload's one at a time, the
            ``Llama`` in a loop (:class:`~llamabatch.measure.one_at_a_time.LlamaLoop`); ``None``:
            ``BatchGenerator(slots=1)``.
    """

    make_backend: Callable[[], Backend]
    make_generator: Callable[[int, int, int], BatchGenerator]
    tokenize: Callable[[Any], Sequence[int]]
    header: dict[str, Any]
    one_at_a_time: Callable[[int], LlamaLoop] | None = None


def _bar(total: int, desc: str, unit: str, quiet: bool, err: IO[str]) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total, unit=unit, file=err, disable=quiet, dynamic_ncols=True, desc=desc, leave=False
    )


# -- the bench -----------------------------------------------------------------------------
def bench(
    setup: BenchSetup,
    params: BenchParams,
    *,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    json_path: Path | None = None,
    quiet: bool = False,
    items: Sequence[WorkItem] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Run the raw bench and the workload, print the header and tables on ``out`` (and
    progress bars on ``err``, unless ``quiet``), write the JSON document to ``json_path``
    when given, and return it. ``items``: the items of ``params.prompts`` (given exactly
    when it names a file); ``clock`` times the workload.

    Raises:
        ValueError: ``items`` without ``params.prompts`` or missing with it; sizes that do
            not fit; too few items for disjoint rounds.
    """
    if (items is None) != (params.prompts is None):
        raise ValueError("give items exactly when params.prompts names a file")
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    t0 = time.perf_counter()
    header = dict(setup.header)
    header["n_batch"] = params.n_batch
    rows = None
    if "raw" in params.parts:
        backend = setup.make_backend()
        bar = _bar(params.rounds * len(params.slots), "raw", "run", quiet, err)
        try:
            rows, limits = run_raw(
                backend,
                params.slots,
                params.prompt_tokens,
                params.gen_tokens,
                rounds=params.rounds,
                n_batch=params.n_batch,
                seed=params.seed,
                progress=bar.update,
            )
        finally:
            bar.close()
            backend.close()
        header["n_ctx_seq"] = limits.n_ctx_seq
    workload = None
    if "workload" in params.parts:
        work = _synthetic(setup, params) if items is None else _file_rounds(setup, params, items)
        if rows is None:  # the header's context: the workload's
            header["n_ctx_seq"], header["n_ctx_seq_of"] = work.n_ctx_seq, "workload"
    print(format_header(header), file=out)
    if rows is not None:
        print(
            f"\nraw throughput: B sequences of PP random prompt tokens, then TG greedy "
            f"tokens each (EOG ignored); median of {params.rounds} rounds",
            file=out,
        )
        print(format_raw_table(rows), file=out, flush=True)
        split = format_split(rows)
        if split:
            print(split, file=out, flush=True)
    if "workload" in params.parts:
        workload = _workload(setup, params, work, out, err, quiet, clock)
    doc = document(header, params.to_json(), rows, workload, time.perf_counter() - t0)
    if json_path is not None:
        write_json(json_path, doc, indent=2)
    return doc


@dataclass(frozen=True, slots=True)
class _Work:
    """A workload's rounds of items, how to say what they are, and its context."""

    rounds: list[list[WorkItem]]
    warmup: WorkItem
    n_ctx_seq: int
    lengths: list[int]  # prompt tokens of the first round's items
    what: str
    json: dict[str, Any] | None = None  # the file's "prompts" part


def _synthetic(setup: BenchSetup, params: BenchParams) -> _Work:
    """A synthetic workload's fresh prompts per round (greedy); its context per sequence
    is the longest prompt + the reply cap, padded."""
    w: Workload = WORKLOADS.get(params.workload) or tagging(params.prompt_tokens, SPREAD)
    greedy = SamplingParams(temperature=0.0)
    rounds = [
        [
            WorkItem(k, p, greedy)
            for k, p in enumerate(w.prompts(params.items, setup.tokenize, params.seed + r))
        ]
        for r in range(params.workload_rounds)
    ]
    lengths = [[_prompt_length(setup, it.prompt) for it in items] for items in rounds]
    n_ctx_seq = ctx_per_seq(max(map(max, lengths)) + params.reply_cap)
    warm = warmup_prompt()
    what = (
        f"workload {params.workload}: {params.items} items per round "
        f"({w.description.split(', replies')[0]}; first round "
        f"{min(lengths[0])}-{max(lengths[0])} tokens), replies up to {params.reply_cap} "
        f"tokens (natural stops, greedy), {params.workload_rounds} rounds of fresh prompts; "
        "ratio = s/item over s/item one at a time (Llama.create_completion, or "
        "BatchGenerator(slots=1) without a Llama) in the same round (< 1: batching saves "
        "time)"
    )
    return _Work(rounds, WorkItem("warmup", warm, greedy), n_ctx_seq, lengths[0], what)


def _file_rounds(setup: BenchSetup, params: BenchParams, items: Sequence[WorkItem]) -> _Work:
    """Disjoint rounds of a file's items, drawn as tune draws them; one item in no round
    warms up (a built-in prompt when every item is in a round)."""
    rounds = params.workload_rounds
    path = params.prompts
    per_round = items_per_round(
        len(items), rounds, params.items, names=("workload_rounds", "items"), source=path
    )
    samplings = [it.sampling for it in items]
    check_one_reply(samplings, lambda i: f"{path} item {items[i].id!r}", "bench")
    work = seeded(items)
    chosen = sample_rounds(len(items), rounds, per_round, params.seed)
    warm, spare = warmup_item(work, chosen)
    lengths = [_prompt_length(setup, items[i].prompt) for i in chosen[0]]
    what = (
        f"workload prompts ({path}): {per_round} items per round of "
        f"{len(items)}, {rounds} round{'s' if rounds != 1 else ''} of disjoint items "
        f"(sampled with seed {params.seed}; first round {min(lengths)}-{max(lengths)} "
        f"prompt tokens), each with its own sampling and constraint (temperature "
        f"{params.temperature:g} and replies up to {params.reply_cap} tokens unless its "
        "line sets them, seed 0 unless it sets one); ratio = s/item over s/item one at a "
        "time (Llama.create_completion, or create_chat_completion for a chat, per item) in "
        "the same round (< 1: batching saves time)"
    )
    prompts = {
        "file": path,
        "n_prompts": len(items),
        "items_seed": params.seed,
        "items_per_round": per_round,
        "item_ids": [[items[i].id for i in r] for r in chosen],
        "warmup_id": None if spare is None else items[spare].id,
    }
    rounds_items = [[work[i] for i in r] for r in chosen]
    return _Work(rounds_items, warm, params.n_ctx_seq, lengths, what, prompts)


def _prompt_length(setup: BenchSetup, prompt: object) -> int:
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)  # token ids
    return len(setup.tokenize(prompt))


def _workload(
    setup: BenchSetup,
    params: BenchParams,
    work: _Work,
    out: IO[str],
    err: IO[str],
    quiet: bool,
    clock: Callable[[], float],
) -> dict[str, Any]:
    cap, rounds = params.reply_cap, params.workload_rounds
    engine = list(dict.fromkeys(b for b in params.slots if b > 1))
    n_items = len(work.rounds[0])
    bar = _bar(n_items * rounds * (1 + len(engine)), "workload", "item", quiet, err)
    try:
        done = compare(
            lambda r: work.rounds[r],
            rounds,
            engine,
            lambda b: setup.make_generator(b, work.n_ctx_seq, cap),
            warmup=work.warmup,
            one_at_a_time=None if setup.one_at_a_time is None else setup.one_at_a_time(cap),
            progress=bar.update,
            clock=clock,
        )
    finally:
        bar.close()
    names = [ONE_AT_A_TIME, *map(setting_name, engine)]
    settings = [
        summarize(n, setting_slots(n), done.rounds, n_prompts=n_items, has_labels=False)
        for n in names
    ]
    rows = workload_rows(settings, done.rounds)
    threads = setup.header.get("threads")
    noise = noise_of(  # the same figures and warnings as tune's
        done.rounds,
        names,
        ONE_AT_A_TIME,
        n_cores=setup.header.get("cpu_count"),
        threads=threads,
        cpu_threads=None if setup.header.get("gpu_offload") else threads,
    )
    print(f"\n{work.what}", file=out)
    print(format_workload_table(rows), file=out, flush=True)
    for w in noise.warnings:
        print(f"warning: {w}", file=out)
    for r, s in zip(rows, settings):
        label = "one at a time" if r["b"] == 1 else f"B={r['b']}"
        if r["batch_disabled_reason"]:
            print(f"note: {label}: batching was off: {r['batch_disabled_reason']}", file=out)
        if s.n_failed:
            print(
                f"note: {label}: {s.n_failed} of {s.n_items} items failed (first: {s.first_error})",
                file=out,
            )
    return {
        "name": params.workload,
        "items": n_items,
        "rounds": rounds,
        "max_tokens": cap,
        "n_ctx_seq": work.n_ctx_seq,
        "prompt_tokens": work.lengths,
        "prompts": work.json,
        "rows": rows,
        "noise": noise.to_json(),
    }


# -- the real setup ------------------------------------------------------------------------
def llama_setup(
    llm: Any, model_path: Path, params: BenchParams, *, threads: int | None, n_gpu_layers: int
) -> BenchSetup:
    """A :class:`BenchSetup` on a loaded ``llama_cpp.Llama``."""
    from ..llamacpp.backend import LlamaBackend

    greedy = SamplingParams(temperature=0.0)
    vocab = LlamaBackend(llm).vocab

    def tokenize(prompt: Any) -> Sequence[int]:
        if isinstance(prompt, str):
            return vocab.tokenize(prompt)
        from ..chat import ChatTemplate, chat_prompt

        return cast("list[int]", chat_prompt(prompt, ChatTemplate.from_llama(llm), llm))

    def make_generator(b: int, n_ctx_seq: int, max_tokens: int) -> BatchGenerator:
        return BatchGenerator(
            llm,
            slots=b,
            n_ctx_seq=n_ctx_seq,
            n_batch=params.n_batch,
            max_tokens=max_tokens,
            sampling=greedy,
        )

    header = collect_header(
        model_path=str(model_path),
        metadata=getattr(llm, "metadata", None),
        threads=threads,
        n_gpu_layers=n_gpu_layers,
        n_batch=params.n_batch,
    )

    return BenchSetup(
        lambda: LlamaBackend(llm),
        make_generator,
        tokenize,
        header,
        lambda max_tokens: LlamaLoop(llm, max_tokens),
    )

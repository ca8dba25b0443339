"""Benchmarks of a Backend: raw tokens/s per slot count, in llama-batched-bench's columns.

Pure functions over a :class:`~llamabatch.engine.backend.Backend`, so they run on
:class:`llamabatch.testing.FakeBackend` in tests and on
:class:`llamabatch.llamacpp.backend.LlamaBackend` (``BatchContext`` / ``LlamaBatch`` /
``SeqSampler``) for real. The tagging workload (one at a time against batches, through
``BatchGenerator``) is in :mod:`llamabatch.measure.workload`; ``llamabatch bench``
(:mod:`llamabatch.cli.bench`) prints both; the JSON document and the
tables are :mod:`llamabatch.bench.report`'s, the host and model facts
:mod:`llamabatch.bench.host`'s.

Raw throughput (:func:`run_raw`) does what llama.cpp's ``llama-batched-bench`` does,
through the slot engine itself (:class:`~llamabatch.engine.scheduler.Scheduler`, the code path
of ``BatchGenerator``; there is no second decode loop): one batch context of
``max(slots)`` sequences; for each B, every cache is emptied and B prompts of PP random
tokens are given to the engine, which lays them into decodes of at most ``n_batch``
tokens; T_PP ends with the decode that ends the last prompt; then the engine decodes
until each sequence fed back TG sampled tokens (greedy, EOG ignored: the engine sees a
backend without EOG ids), timed as T_TG. When B*PP > n_batch, sequences whose prompt
ended early already decode inside T_PP (continuous batching), as they would in real
use. Unlike ``llama-batched-bench`` (which only decodes) each step also samples one
token per sequence with its own sampler chain. Each B is measured ``rounds`` times
(rounds outermost, so drift is spread over every B) and the median times are reported.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.backend import Backend, BatchLimits, Span
from ..engine.items import Item
from ..engine.scheduler import Scheduler
from ..errors import BackendError, BatchUnavailable
from ..params import BatchConfig, SamplingParams

#: The columns of llama-batched-bench's markdown table, in its order.
RAW_COLUMNS = ("PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s")

#: Greedy sampling: the raw bench's figures must not depend on the draw.
GREEDY = SamplingParams(temperature=0.0)

#: Tokens decoded once before anything is timed (as llama-batched-bench's warm-up).
WARMUP_TOKENS = 16

#: llama.cpp pads the tokens per sequence of a non-unified KV cache up to a multiple of
#: this (and logs a warning when it has to); the bench asks for a multiple right away.
CTX_PAD = 256


def ctx_per_seq(n_tokens: int) -> int:
    """``n_tokens`` rounded up to a multiple of :data:`CTX_PAD`."""
    return -(-n_tokens // CTX_PAD) * CTX_PAD


Clock = Callable[[], float]
Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class RawRow:
    """One line of the raw table: B sequences of PP prompt tokens, then TG steps.

    ``t_pp`` and ``t_tg`` are the medians over rounds; the rest follows as in
    llama-batched-bench: N_KV = B*(PP+TG), S_PP = B*PP/T_PP, S_TG = B*TG/T_TG,
    T = T_PP+T_TG, S = N_KV/T.
    """

    pp: int
    tg: int
    b: int
    t_pp: float
    t_tg: float
    rounds: tuple[tuple[float, float], ...] = field(default=())

    @property
    def n_kv(self) -> int:
        return self.b * (self.pp + self.tg)

    @property
    def s_pp(self) -> float:
        return _rate(self.b * self.pp, self.t_pp)

    @property
    def s_tg(self) -> float:
        return _rate(self.b * self.tg, self.t_tg)

    @property
    def t(self) -> float:
        return self.t_pp + self.t_tg

    @property
    def s(self) -> float:
        return _rate(self.n_kv, self.t)

    def values(self) -> tuple[int, int, int, int, float, float, float, float, float, float]:
        """The row in :data:`RAW_COLUMNS` order."""
        return (
            self.pp,
            self.tg,
            self.b,
            self.n_kv,
            self.t_pp,
            self.s_pp,
            self.t_tg,
            self.s_tg,
            self.t,
            self.s,
        )

    def to_json(self) -> dict[str, Any]:
        """The row with llama-batched-bench's jsonl keys, plus every round's times."""
        return {
            "pp": self.pp,
            "tg": self.tg,
            "pl": self.b,
            "n_kv": self.n_kv,
            "t_pp": self.t_pp,
            "speed_pp": self.s_pp,
            "t_tg": self.t_tg,
            "speed_tg": self.s_tg,
            "t": self.t,
            "speed": self.s,
            "rounds": [{"t_pp": a, "t_tg": b} for a, b in self.rounds],
        }


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def raw_row(pp: int, tg: int, b: int, rounds: Sequence[tuple[float, float]]) -> RawRow:
    """The row of B from its per-round ``(t_pp, t_tg)`` times (medians of each)."""
    if not rounds:
        raise ValueError("rounds is empty: at least one (t_pp, t_tg) measurement is needed")
    return RawRow(
        pp,
        tg,
        b,
        statistics.median(r[0] for r in rounds),
        statistics.median(r[1] for r in rounds),
        tuple(rounds),
    )


def random_prompts(n_seqs: int, n_tokens: int, n_vocab: int, rng: random.Random) -> list[list[int]]:
    """``n_seqs`` prompts of ``n_tokens`` uniformly random valid token ids each."""
    return [[rng.randrange(n_vocab) for _ in range(n_tokens)] for _ in range(n_seqs)]


class RawBackend:
    """The backend as the raw bench shows it to the engine: no EOG ids (every sequence
    generates a fixed number of tokens), and the clock read right after the decode that
    ends the last prompt of a measurement. Everything else is the wrapped backend's."""

    eog_ids: frozenset[int] = frozenset()

    def __init__(self, backend: Backend, clock: Clock) -> None:
        self._backend, self._clock = backend, clock
        self.prompt_left = self.pp = 0
        self.t_pp: float | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def expect(self, n_prompts: int, pp: int) -> None:
        """A measurement starts: ``n_prompts`` prompts of ``pp`` tokens will be prefilled
        (positions [0, pp) of each sequence; later positions are decode tokens)."""
        self.prompt_left, self.pp, self.t_pp = n_prompts * pp, pp, None

    def decode(self, spans: Sequence[Span]) -> list[int]:
        sampled = self._backend.decode(spans)
        if self.prompt_left > 0:
            pp = self.pp
            self.prompt_left -= sum(max(0, min(s.pos + len(s.tokens), pp) - s.pos) for s in spans)
            if self.prompt_left <= 0:
                self.t_pp = self._clock()
        return sampled


class RawEngine:
    """The slot engine on a :class:`RawBackend`, opened once for ``slots`` sequences.

    Raises:
        BatchUnavailable: the batch context cannot be created.
    """

    def __init__(
        self, backend: Backend, slots: int, n_ctx_seq: int, n_batch: int, tg: int, clock: Clock
    ) -> None:
        self.backend = RawBackend(backend, clock)
        config = BatchConfig(
            slots=max(slots, 2), n_ctx_seq=n_ctx_seq, n_batch=n_batch, max_tokens=tg + 1
        )
        self.scheduler = Scheduler(  # a failure is the bench's error, not a retry alone
            self.backend, config, min_copy_tokens=n_ctx_seq + 1, max_batch_failures=1
        )
        self.limits = self.scheduler.open()
        self.clock = clock

    def time(self, prompts: Sequence[Sequence[int]], tg: int) -> tuple[float, float]:
        """Run ``prompts`` (of one length; fresh caches) until each fed back ``tg``
        sampled tokens.

        Returns:
            ``(t_pp, t_tg)`` in seconds.

        Raises:
            BackendError: the engine turned batching off (the reason is the message).
        """
        scheduler = self.scheduler
        scheduler.engine.reset()  # llama-batched-bench: a fresh cache
        sampling = SamplingParams(temperature=0.0, max_tokens=tg + 1)
        items = [Item(i, list(p), None, sampling) for i, p in enumerate(prompts)]
        self.backend.expect(len(items), len(items[0].tokens) if items else 0)
        t0 = self.clock()
        for _ in scheduler.iter_steps(iter(items), contextlib.nullcontext, len(items)):
            pass
        t2 = self.clock()
        if not scheduler.stats.batching_enabled:
            raise BackendError(
                f"the raw bench lost its batch context: {scheduler.stats.batch_disabled_reason}"
            )
        t1 = self.backend.t_pp if self.backend.t_pp is not None else t2
        return t1 - t0, t2 - t1


def time_raw(
    engine: RawEngine, b: int, pp: int, tg: int, rng: random.Random
) -> tuple[float, float]:
    """Prefill ``b`` random prompts of ``pp`` tokens, then decode ``tg`` tokens each,
    through the slot engine.

    Returns:
        ``(t_pp, t_tg)`` in seconds.

    Raises:
        BackendError: from the engine (batching turned off).
    """
    return engine.time(random_prompts(b, pp, engine.backend.n_vocab, rng), tg)


def check_raw_sizes(limits: BatchLimits, slots: Sequence[int], pp: int, tg: int) -> None:
    """Raise ``ValueError`` if B or PP+TG does not fit the batch context."""
    if max(slots) > limits.n_seq_max:
        raise ValueError(
            f"slots up to {max(slots)} but the batch context holds {limits.n_seq_max} sequences"
        )
    if pp + tg > limits.n_ctx_seq:
        raise ValueError(
            f"prompt_tokens + gen_tokens = {pp + tg} exceeds the "
            f"{limits.n_ctx_seq} tokens per sequence of the batch context"
        )
    if tg > 0 and max(slots) > limits.n_batch:
        raise ValueError(
            f"B={max(slots)} exceeds n_batch={limits.n_batch}: a lockstep step must fit one decode"
        )


def warm_up(engine: RawEngine, rng: random.Random) -> None:
    """One untimed decode of a few tokens, as llama-batched-bench does before timing."""
    limits = engine.limits
    n = min(WARMUP_TOKENS, limits.n_batch, limits.n_ctx_seq - 1)
    time_raw(engine, 1, n, 0, rng)


def run_raw(
    backend: Backend,
    slots: Sequence[int],
    prompt_tokens: int,
    gen_tokens: int,
    *,
    rounds: int = 3,
    n_batch: int = 512,
    seed: int = 0,
    clock: Clock = time.perf_counter,
    progress: Progress | None = None,
) -> tuple[list[RawRow], BatchLimits]:
    """Raw throughput for each B in ``slots``, through ``backend``'s batch context.

    Opens the batch context once with ``max(slots)`` sequences of ``prompt_tokens +
    gen_tokens`` tokens (rounded up to :data:`CTX_PAD`), warms up, then measures every B
    once per round.

    Args:
        backend: a backend whose batch context is not open yet.
        slots: the B values, each >= 1.
        prompt_tokens: PP, >= 1.
        gen_tokens: TG, >= 0.
        rounds: measurements per B (the median is reported), >= 1.
        n_batch: most tokens per decode.
        seed: of the random prompts.
        clock: seconds, monotonic.
        progress: called with 1 after each measurement.

    Returns:
        one row per B in ``slots`` order, and the limits of the batch context.

    Raises:
        ValueError: a size out of range or not fitting the context.
        BatchUnavailable: the batch context cannot be created.
    """
    if not slots or min(slots) < 1:
        raise ValueError(f"slots={list(slots)!r}: give at least one B, each >= 1")
    if prompt_tokens < 1 or gen_tokens < 0 or rounds < 1:
        raise ValueError(
            f"prompt_tokens={prompt_tokens} (>= 1), gen_tokens={gen_tokens} "
            f"(>= 0), rounds={rounds} (>= 1)"
        )
    engine = RawEngine(
        backend, max(slots), ctx_per_seq(prompt_tokens + gen_tokens + 1), n_batch, gen_tokens, clock
    )
    limits = engine.limits
    if limits is None:
        raise BatchUnavailable(
            f"the batch context could not be created: "
            f"{engine.scheduler.stats.batch_disabled_reason}"
        )
    check_raw_sizes(limits, slots, prompt_tokens, gen_tokens)
    rng = random.Random(seed)
    warm_up(engine, rng)
    times: dict[int, list[tuple[float, float]]] = {b: [] for b in slots}
    for _ in range(rounds):
        for b in slots:
            times[b].append(time_raw(engine, b, prompt_tokens, gen_tokens, rng))
            if progress is not None:
                progress(1)
    return [raw_row(prompt_tokens, gen_tokens, b, times[b]) for b in slots], limits

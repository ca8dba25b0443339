"""Raw tokens/s per slot count, in llama-batched-bench's columns (``llamabatch bench``'s
first table), on any backend (``FakeBackend`` in tests, ``LlamaBackend`` for real).

:func:`run_raw` does what llama.cpp's ``llama-batched-bench`` does, through the slot
engine itself (the code path of ``BatchGenerator``): one batch context of ``max(slots)``
sequences; for each B, every cache emptied, B prompts of PP random tokens laid into
decodes of at most ``n_batch`` tokens (T_PP ends with the decode that ends the last
prompt; a sequence whose prompt ended early already decodes inside it, as in real use),
then decodes until each sequence fed back TG greedy tokens (T_TG; EOG ignored). Unlike
``llama-batched-bench`` each step also samples, one sampler chain per sequence. Each B is
measured once per round, the B values in alternating order; medians are reported.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.backend import Backend, BatchLimits, Vocab
from ..engine.request import Request
from ..engine.scheduler import Scheduler
from ..engine.step import Span, StepResult
from ..errors import BackendError, BatchUnavailable
from ..params import BatchConfig, SamplingParams
from ..stats import StepSplit
from .rounds import Clock, Progress, run_rounds

#: The columns of llama-batched-bench's markdown table, in its order.
RAW_COLUMNS = ("PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s")

#: Tokens decoded once before anything is timed (as llama-batched-bench's warm-up).
WARMUP_TOKENS = 16

#: llama.cpp pads the tokens per sequence of a non-unified KV cache up to a multiple of
#: this (and logs a warning when it has to); the bench asks for a multiple right away.
CTX_PAD = 256


def ctx_per_seq(n_tokens: int) -> int:
    """``n_tokens`` rounded up to a multiple of :data:`CTX_PAD`."""
    return -(-n_tokens // CTX_PAD) * CTX_PAD


@dataclass(frozen=True, slots=True)
class RawRow:
    """One line of the raw table: B sequences of PP prompt tokens, then TG steps.

    ``t_pp`` and ``t_tg`` are the medians over rounds; the rest follows as in
    llama-batched-bench: N_KV = B*(PP+TG), S_PP = B*PP/T_PP, S_TG = B*TG/T_TG,
    T = T_PP+T_TG, S = N_KV/T. ``split``: where the TG steps of all rounds spent their time
    (``None``: not measured).
    """

    pp: int
    tg: int
    b: int
    t_pp: float
    t_tg: float
    rounds: tuple[tuple[float, float], ...] = field(default=())
    split: StepSplit | None = None

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
            "split": None if self.split is None else self.split.to_json(),
        }


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def raw_row(
    pp: int, tg: int, b: int, rounds: Sequence[tuple[float, float]], split: StepSplit | None = None
) -> RawRow:
    """The row of B from its per-round ``(t_pp, t_tg)`` times (medians of each) and the split
    of its TG steps."""
    if not rounds:
        raise ValueError("rounds is empty: at least one (t_pp, t_tg) measurement is needed")
    return RawRow(
        pp,
        tg,
        b,
        statistics.median(r[0] for r in rounds),
        statistics.median(r[1] for r in rounds),
        tuple(rounds),
        split,
    )


def random_prompts(n_seqs: int, n_tokens: int, n_vocab: int, rng: random.Random) -> list[list[int]]:
    """``n_seqs`` prompts of ``n_tokens`` uniformly random valid token ids each."""
    return [[rng.randrange(n_vocab) for _ in range(n_tokens)] for _ in range(n_seqs)]


class RawEngine:
    """``backend`` as the raw bench drives it through a
    :class:`~llamabatch.engine.scheduler.Scheduler` opened once for ``slots``: no EOG ids,
    the clock read right after the decode that ends the last prompt; ``limits`` ``None``
    when the batch context cannot be created (``disabled_reason`` says why); ``split``: where
    the TG steps of the last :meth:`time` went.
    """

    def __init__(
        self, backend: Backend, slots: int, n_ctx_seq: int, n_batch: int, tg: int, clock: Clock
    ) -> None:
        self._backend, self._clock = backend, clock
        self.vocab = _NoEog(backend.vocab)
        self._prompt_left = self._pp = 0
        self._t_pp: float | None = None
        self._split_pp: StepSplit | None = None  # the split when the TG steps began
        self.split = StepSplit()
        config = BatchConfig(
            slots=max(slots, 2),
            n_ctx_seq=n_ctx_seq,
            n_batch=n_batch,
            max_tokens=tg + 1,
            min_copy_tokens=n_ctx_seq + 1,
            cache_ram_mib=0,
            max_batch_failures=1,  # a failure is the bench's error, not a retry alone
        )
        self._scheduler = Scheduler(self, config)
        self.limits: BatchLimits | None = self._scheduler.open()

    def __getattr__(self, name: str) -> Any:
        if name == "_backend":
            raise AttributeError(name)
        return getattr(self._backend, name)

    @property
    def disabled_reason(self) -> str | None:
        return self._scheduler.stats.batch_disabled_reason

    def run(self, spans: Sequence[Span]) -> StepResult:
        if self._prompt_left <= 0 and self._split_pp is None:  # the first TG step
            self._split_pp = self._scheduler.stats.step_split
        result = self._backend.run(spans)
        if self._prompt_left > 0:
            pp = self._pp
            self._prompt_left -= sum(
                max(0, min(s.pos + n, pp) - s.pos) for s, n in zip(spans, result.decoded)
            )
            if self._prompt_left <= 0:
                self._t_pp = self._clock()
        return result

    def time(self, prompts: Sequence[Sequence[int]], tg: int) -> tuple[float, float]:
        """Run ``prompts`` (of one length; fresh caches) until each fed back ``tg``
        sampled tokens.

        Returns:
            ``(t_pp, t_tg)`` in seconds.

        Raises:
            BackendError: the engine turned batching off (the reason is the message).
        """
        scheduler = self._scheduler
        scheduler.engine.reset()  # type: ignore[union-attr]  # open: llama-batched-bench's fresh cache
        sampling = SamplingParams(temperature=0.0, max_tokens=tg + 1)
        items = [Request(i, list(p), sampling) for i, p in enumerate(prompts)]
        self._pp = len(items[0].prompt) if items else 0
        self._prompt_left, self._t_pp, self._split_pp = len(items) * self._pp, None, None
        t0 = self._clock()
        for req in items:
            scheduler.add(req)
        while not scheduler.finished:
            scheduler.step()
        scheduler.end()
        t2 = self._clock()
        if not scheduler.stats.batching_enabled:
            raise BackendError(f"the raw bench lost its batch context: {self.disabled_reason}")
        t1 = self._t_pp if self._t_pp is not None else t2
        split = scheduler.stats.step_split
        self.split = split - (split if self._split_pp is None else self._split_pp)
        return t1 - t0, t2 - t1


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
    """One row per B of ``slots`` (in that order) and the batch context's limits: the
    context opened once on ``backend`` for ``max(slots)`` sequences of PP + TG tokens
    (rounded up to :data:`CTX_PAD`), a few untimed tokens, then each B measured once per
    round (:func:`~llamabatch.measure.rounds.run_rounds`) on fresh random prompts of
    ``seed``; ``progress(1)`` after each measurement.

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
        raise BatchUnavailable(f"the batch context could not be created: {engine.disabled_reason}")
    check_raw_sizes(limits, slots, prompt_tokens, gen_tokens)
    rng = random.Random(seed)
    warm = min(WARMUP_TOKENS, limits.n_batch, limits.n_ctx_seq - 1)
    engine.time(random_prompts(1, warm, engine.vocab.n_vocab, rng), 0)

    def measure(items: Sequence[Any], tick: Any) -> tuple[tuple[float, float], StepSplit]:
        return engine.time(items[0], gen_tokens), engine.split

    done = run_rounds(
        {str(b): measure for b in slots},
        lambda r, b: [random_prompts(int(b), prompt_tokens, engine.vocab.n_vocab, rng)],
        rounds,
        progress=progress,
    )
    rows = []
    for b in slots:
        results = [p.result for r in done if (p := r.get(str(b)))]
        split = sum((s for _, s in results), StepSplit())
        rows.append(raw_row(prompt_tokens, gen_tokens, b, [t for t, _ in results], split))
    return rows, limits


class _NoEog:
    """A vocabulary without end-of-generation ids: every sequence generates its
    ``max_tokens``."""

    eog_ids: frozenset[int] = frozenset()

    def __init__(self, vocab: Vocab) -> None:
        self.n_vocab = vocab.n_vocab
        self.tokenize, self.detokenize = vocab.tokenize, vocab.detokenize

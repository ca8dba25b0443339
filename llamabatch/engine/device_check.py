"""Batched equals alone, checked on the device: the probe of ``check_device``.

GPU backends have had defects in exactly the steps the slot engine makes, with every call
reporting success (docs/gpu.md lists the public reports). The probe runs each of those
shapes as a step on a batch context of its own and compares every row it reads with the
same tokens decoded one sequence at a time, on the same context. Sequence 0 joins late,
sequence 1 is refilled, the others decode beside them (:data:`PROBE_STEPS`, in this order):

1. ``prompts``: sequences ``1 ..`` prefill a prompt of :data:`PROBE_PROMPT_TOKENS` tokens
   (in as few calls as ``n_batch`` allows);
2. ``mixed step``: each of them decodes one token while sequence 0 prefills its prompt in
   the same call;
3. ``reply step``: every sequence decodes one token;
4. ``refill``: sequence 1 is removed and a new prompt is prefilled into its slot while the
   others decode one token;
5. ``long prefill``: sequence 0 is removed and a prompt longer than ``n_batch`` (which is
   ``n_ubatch``) is prefilled into its slot over several calls, beside one decoded token of
   each other sequence per call.

The steps run with 2, 4 and all of the context's sequences (:func:`probe_slot_counts`); each
sequence decodes the same tokens at every count, so its one-at-a-time rows are read once.
The context is opened with a small ``n_batch`` (:func:`probe_n_batch`) so that the long
prefill exceeds it at little cost.

A row is read as the ``log_softmax`` at :data:`PROBE_TARGETS` fixed token ids and the
row's maximum; the deviation is the largest absolute difference in nats. It passes up
to :data:`PROBE_TOLERANCE`: llama.cpp's logits move with the batch shape by up to ~0.2
nats on a CPU (design notes), a corrupted row by whole nats. Tokens are drawn from the
vocabulary (no end-of-generation ids) with a fixed seed, so the probe needs no tokenizer.

:func:`check_sampling` checks llama.cpp's backend (on-device) sampling on the same kind of
context: greedy tokens sampled on the device against the host chain's, and a seeded
sample against itself.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from ..params import SamplingParams
from .backend import Backend, BatchLimits
from .step import Span, StepResult

__all__ = [
    "PROBE_N_BATCH",
    "PROBE_PROMPT_TOKENS",
    "PROBE_TARGETS",
    "PROBE_TOLERANCE",
    "CHECKS",
    "PROBE_STEPS",
    "CheckMemo",
    "DeviceCheck",
    "ProbeStep",
    "SamplingCheck",
    "check_device",
    "check_sampling",
    "probe_n_batch",
    "probe_slot_counts",
]

#: Prompt tokens of each probe sequence (the long prefill: more than ``n_batch``).
PROBE_PROMPT_TOKENS = 12

#: Token ids whose log-probability each probe row compares (plus the row's maximum).
PROBE_TARGETS = 16

#: The largest deviation, in nats, that passes (module docstring).
PROBE_TOLERANCE = 1.0

#: ``n_batch`` (= ``n_ubatch``) of the probe's context, at least (:func:`probe_n_batch`).
PROBE_N_BATCH = 16

_SEED = 20261203
_GREEDY = SamplingParams(temperature=0.0)


@dataclass(frozen=True, slots=True)
class ProbeStep:
    """One defect shape the probe decodes.

    Attributes:
        name: as the verdict names it (``"long prefill"``).
        shape: what the step decodes.
        reports: the public reports of this shape (llama.cpp issues).
        remedy: what a user can try when it fails.
    """

    name: str
    shape: str
    reports: str
    remedy: str


_FLASH = "flash attention on or off (Llama(flash_attn=...))"

#: The probe's steps, in the order they run (module docstring).
PROBE_STEPS = (
    ProbeStep(
        "prompts",
        "prompts of several sequences in one call",
        "llama.cpp #25992 (HIP: other requests' replies)",
        f"{_FLASH}, fewer slots, another backend or driver",
    ),
    ProbeStep(
        "mixed step",
        "a prompt decoded in the same call as other sequences' reply steps",
        "llama.cpp #28537 (HIP), #15006 (Vulkan without flash attention)",
        f"{_FLASH}, another backend or driver",
    ),
    ProbeStep(
        "reply step",
        "one token of every sequence in one call",
        "llama.cpp #27579 (HIP: corruption once two slots are used)",
        "fewer slots, another backend or driver",
    ),
    ProbeStep(
        "refill",
        "a prompt into a slot whose sequence was just removed, beside other sequences' decode",
        "llama.cpp #28056 (one request's KV leaking into another)",
        f"fewer slots, {_FLASH}, another backend or driver",
    ),
    ProbeStep(
        "long prefill",
        "a prompt longer than n_ubatch, split over several ubatches, beside other "
        "sequences' decode",
        "llama.cpp #28211 (HIP), #28056 (a missing sync on integrated GPUs)",
        "another backend (Vulkan instead of HIP), fewer slots",
    ),
)

_BY_NAME = {s.name: s for s in PROBE_STEPS}


def probe_n_batch(slots: int, n_batch: int) -> int:
    """``n_batch`` to open the probe's context with: :data:`PROBE_N_BATCH`, at least
    ``2 * slots`` (every other sequence's token beside a prompt chunk), at most the
    generator's ``n_batch``."""
    return min(n_batch, max(PROBE_N_BATCH, 2 * slots))


def probe_slot_counts(n_seq_max: int) -> tuple[int, ...]:
    """The sequence counts the probe runs with: 2, 4 and ``n_seq_max`` (those <= it)."""
    return tuple(sorted({k for k in (2, 4, n_seq_max) if 2 <= k <= n_seq_max}))


@dataclass(frozen=True, slots=True)
class DeviceCheck:
    """The probe's verdict.

    Attributes:
        ok: every row agreed within ``tolerance``.
        deviation: the largest difference found, in nats of ``log_softmax``.
        tolerance: the bound it was held to.
        slots: the sequences of the context.
        rows: the rows compared.
        worst: where ``deviation`` was found (``"seq 2, mixed step, 4 sequences"``).
        failed: the first step (in the order they ran) with a row over ``tolerance``, or
            ``None``.
        counts: the sequence counts probed (:func:`probe_slot_counts`).
    """

    ok: bool
    deviation: float
    tolerance: float
    slots: int
    rows: int
    worst: str
    failed: ProbeStep | None = None
    failed_at: str = ""
    counts: tuple[int, ...] = ()

    def describe(self, device: str | None) -> str:
        """One sentence for the user: what was compared, on what, and the result; when it
        failed, the first step that did, the public reports of its shape and what to try."""
        on = device or "the CPU"
        counts = ", ".join(map(str, self.counts or (self.slots,)))
        over = f"over {self.rows} rows of {counts} sequences"
        if self.ok and self.deviation == 0.0:
            return f"batched and one-at-a-time logits on {on} agree: identical {over}"
        verdict, bound = ("agree", "within") if self.ok else ("disagree", "more than")
        out = (
            f"batched and one-at-a-time logits on {on} {verdict}: largest difference "
            f"{self.deviation:.3f} nats ({self.worst}) {over}, {bound} {self.tolerance:g}"
        )
        step = self.failed
        if step is not None:
            out += (
                f"; first failed step: {step.name} ({self.failed_at}): {step.shape}, "
                f"as {step.reports}; try {step.remedy}"
            )
        return out


def _tokens(rng: random.Random, n: int, n_vocab: int, eog: frozenset[int]) -> tuple[int, ...]:
    out: list[int] = []
    while len(out) < n:
        t = rng.randrange(n_vocab)
        if t not in eog:
            out.append(t)
    return tuple(out)


@dataclass(slots=True)
class _Phase:
    """One step of the probe: sequences removed first, then per sequence its spans, one
    per round (each round's spans are packed into calls of <= n_batch tokens)."""

    step: int  # index in PROBE_STEPS
    removed: tuple[int, ...]
    spans: dict[int, list[Span]]


def _phases(limits: BatchLimits, n_vocab: int, eog: frozenset[int]) -> list[_Phase]:
    """The probe's steps for ``limits.n_seq_max`` sequences; a run with fewer sequences
    takes the spans of its own (each sequence's tokens never depend on the count). A step
    that does not fit ``n_ctx_seq`` is left out."""
    s, nb, room = limits.n_seq_max, limits.n_batch, limits.n_ctx_seq
    rng = random.Random(_SEED)
    ids = tuple(sorted(set(_tokens(rng, PROBE_TARGETS, n_vocab, frozenset()))))
    others = range(1, s)
    pos = [0] * s
    n_prompt = max(1, min(PROBE_PROMPT_TOKENS, room - 2, nb - (s - 1)))

    def prompt(k: int, n: int) -> Span:
        t = _tokens(rng, n, n_vocab, eog)
        span = Span(k, pos[k], t, targets=((),) * (n - 1) + (ids,))
        pos[k] += n
        return span

    def step(k: int) -> Span:
        span = Span(k, pos[k], _tokens(rng, 1, n_vocab, eog), targets=(ids,), step=True)
        pos[k] += 1
        return span

    phases = [
        _Phase(0, (), {k: [prompt(k, n_prompt)] for k in others}),
        _Phase(1, (), {0: [prompt(0, n_prompt)], **{k: [step(k)] for k in others}}),
        _Phase(2, (), {k: [step(k)] for k in range(s)}),
    ]
    if max(pos) + 1 <= room:  # refill: seq 1 prefills anew beside the others' steps
        pos[1] = 0
        refill = {1: [prompt(1, n_prompt)], **{k: [step(k)] for k in range(s) if k != 1}}
        phases.append(_Phase(3, (1,), refill))
    chunk = nb - (s - 1)
    n_long = min(nb + chunk // 2 + 1, room - 1)
    n_calls = -(-n_long // chunk)
    if n_long > 1 and max(pos[1:]) + n_calls <= room:  # a prompt past n_ubatch, chunked
        pos[0] = 0
        long = _tokens(rng, n_long, n_vocab, eog)
        spans: dict[int, list[Span]] = {0: []}
        for c in range(n_calls):
            part = long[c * chunk : (c + 1) * chunk]
            targets = ((),) * (len(part) - 1) + (ids,)
            spans[0].append(Span(0, c * chunk, part, targets=targets))
            for k in others:
                spans.setdefault(k, []).append(step(k))
        phases.append(_Phase(4, (0,), spans))
    return phases


#: A row's key: (seq id, index of the span in the sequence's own spans).
_Key = tuple[int, int]


def _calls(phase: _Phase, seqs: range, n_batch: int) -> list[list[tuple[_Key, Span]]]:
    """``phase``'s calls for sequences ``seqs``: round by round, each packed into calls of
    at most ``n_batch`` tokens."""
    out: list[list[tuple[_Key, Span]]] = []
    rounds = max((len(phase.spans.get(k, ())) for k in seqs), default=0)
    for r in range(rounds):
        call: list[tuple[_Key, Span]] = []
        used = 0
        for k in seqs:
            spans = phase.spans.get(k, [])
            if r >= len(spans):
                continue
            if call and used + len(spans[r].tokens) > n_batch:
                out.append(call)
                call, used = [], 0
            call.append(((k, r), spans[r]))
            used += len(spans[r].tokens)
        if call:
            out.append(call)
    return out


def _rows(result: StepResult, spans: Sequence[Span]) -> dict[int, list[float]]:
    """seq id -> the numbers of its last row: the scores, then the row's maximum."""
    out: dict[int, list[float]] = {}
    for span in spans:
        o = result.outputs.get(span.seq_id)
        if o is None or o.scores is None or o.row_max is None:
            raise ValueError(f"the backend gave no scores for seq {span.seq_id}")
        best = o.row_max[-1]
        out[span.seq_id] = [*o.scores[-1], 0.0 if best is None else best]
    return out


def _run(
    backend: Backend, phases: list[_Phase], seqs: range, n_batch: int
) -> dict[tuple[int, int, int], list[float]]:
    """Run ``phases`` on sequences ``seqs`` of an emptied context; (phase, seq, round) ->
    the row read."""
    backend.clear()
    for k in seqs:  # a host chain: rows read as numbers
        backend.start_seq(k, _GREEDY, host=True)
    out: dict[tuple[int, int, int], list[float]] = {}
    for p, phase in enumerate(phases):
        for k in phase.removed:
            if k in seqs:
                backend.trim(k, 0)
                backend.start_seq(k, _GREEDY, host=True)
        for call in _calls(phase, seqs, n_batch):
            spans = [span for _, span in call]
            rows = _rows(backend.run(spans), spans)
            for (k, r), _ in call:
                out[(p, k, r)] = rows[k]
    return out


def check_device(backend: Backend, limits: BatchLimits) -> DeviceCheck:
    """Run the probe (module docstring) on ``backend``'s open batch context of ``limits``
    (best opened with :func:`probe_n_batch`); every sequence is empty again afterwards.

    Raises:
        ValueError: the backend cannot score rows (``info.can_score`` False), fewer than 2
            sequences or 3 tokens per sequence; as ``Backend.run``.
        DecodeError, BackendError: as ``Backend.run``: the check could not run (the caller
            reports that, never as wrong logits).
    """
    s = limits.n_seq_max
    if not backend.info.can_score or s < 2 or limits.n_ctx_seq < 3:
        raise ValueError(
            "the device check needs a backend that scores rows, 2+ sequences and 3+ tokens each"
        )
    vocab = backend.vocab
    phases = _phases(limits, vocab.n_vocab, vocab.eog_ids)
    counts = probe_slot_counts(s)
    nb = limits.n_batch
    try:
        batched = {k: _run(backend, phases, range(k), nb) for k in counts}
        alone: dict[tuple[int, int, int], list[float]] = {}
        for k in range(s):  # the same tokens, one sequence at a time
            alone.update(_run(backend, phases, range(k, k + 1), nb))
    finally:
        backend.clear()
    worst, deviation, rows = "", 0.0, 0
    failed: tuple[int, int, str] | None = None  # (count order, phase, where)
    for n, k_rows in batched.items():
        for key, row in k_rows.items():
            rows += 1
            d = max(abs(a - b) for a, b in zip(row, alone[key]))
            if d != d:  # NaN counts as the worst
                d = float("inf")
            where = f"seq {key[1]}, {PROBE_STEPS[phases[key[0]].step].name}, {n} sequences"
            if d > deviation:
                worst, deviation = where, d
            order = (counts.index(n), key[0], where)
            if d > PROBE_TOLERANCE and (failed is None or order[:2] < failed[:2]):
                failed = order
    return DeviceCheck(
        ok=failed is None,
        deviation=deviation,
        tolerance=PROBE_TOLERANCE,
        slots=s,
        rows=rows,
        worst=worst or f"seq 0, {PROBE_STEPS[0].name}, {counts[0]} sequences",
        failed=None if failed is None else PROBE_STEPS[phases[failed[1]].step],
        failed_at="" if failed is None else failed[2],
        counts=counts,
    )


#: Reply steps of each sequence in :func:`check_sampling`.
SAMPLING_STEPS = 3


@dataclass(frozen=True, slots=True)
class SamplingCheck:
    """:func:`check_sampling`'s verdict.

    Attributes:
        ok: greedy tokens sampled on the device equal the host chain's and a seeded sample
            repeated, on every sequence.
        detail: one sentence saying what was compared and where it differed.
    """

    ok: bool
    detail: str


def _sample(
    backend: Backend,
    limits: BatchLimits,
    prompts: Sequence[tuple[int, ...]],
    chains: Sequence[SamplingParams],
    host: bool,
) -> tuple[list[list[int | None]], int]:
    """Prefill ``prompts`` (sequence ``k`` sampled by ``chains[k]``) then decode
    :data:`SAMPLING_STEPS` reply steps feeding each sampled token back; the tokens of each
    sequence and the rows sampled on the device."""
    backend.clear()
    n = len(prompts)
    for k in range(n):
        backend.start_seq(k, chains[k], host=host)
    tokens: list[list[int | None]] = [[] for _ in range(n)]
    on_device = 0
    call: list[Span] = []
    for k, p in enumerate(prompts):  # the prompts, packed into calls of <= n_batch tokens
        if call and sum(len(s.tokens) for s in call) + len(p) > limits.n_batch:
            result = backend.run(call)
            on_device += result.backend_sampled
            for s in call:
                tokens[s.seq_id].append(result.outputs[s.seq_id].token)
            call = []
        call.append(Span(k, 0, p, logits=True))
    result = backend.run(call)
    on_device += result.backend_sampled
    for s in call:
        tokens[s.seq_id].append(result.outputs[s.seq_id].token)
    for r in range(SAMPLING_STEPS):
        if any(t[-1] is None or t[-1] in backend.vocab.eog_ids for t in tokens):
            break  # a sequence ended (or failed): compare what was sampled
        steps = [
            Span(k, len(prompts[k]) + r, (tokens[k][-1],), logits=True, step=True)  # type: ignore[arg-type]
            for k in range(n)
        ]
        result = backend.run(steps)
        on_device += result.backend_sampled
        for k in range(n):
            tokens[k].append(result.outputs[k].token)
    return tokens, on_device


def check_sampling(
    backend: Backend, limits: BatchLimits, reopen: Callable[[], BatchLimits] | None = None
) -> SamplingCheck:
    """Check backend (on-device) sampling on ``backend``'s open batch context of ``limits``,
    with all its sequences: even sequences greedy, odd ones seeded (temperature 1). The
    chains are attached to the device before the context's first decode; the same run is
    repeated (no new attach: only the seed is set again), then run with host chains:

    - every sampled row must have been sampled on the device;
    - the repeated run must give the same tokens (a seeded sample repeats);
    - greedy sequences must give the host chain's tokens (its argmax).

    Every sequence is empty again afterwards. ``reopen`` (closes the context and opens a
    fresh one of the same size) runs before the host pass: on the software Vulkan device a
    sequence whose device chain is replaced by a host chain after device-sampled decodes
    aborts the process in its next decode, so the host pass takes a context of its own.

    Raises:
        ValueError: fewer than 2 sequences or too few tokens per sequence; as ``Backend.run``.
        DecodeError, BackendError: as ``Backend.run`` (the check could not run).
    """
    s = limits.n_seq_max
    n_prompt = min(PROBE_PROMPT_TOKENS, limits.n_ctx_seq - SAMPLING_STEPS - 1, limits.n_batch)
    if s < 2 or n_prompt < 1:
        raise ValueError("the sampling check needs 2+ sequences and 5+ tokens each")
    vocab = backend.vocab
    rng = random.Random(_SEED + 1)
    prompts = [_tokens(rng, n_prompt, vocab.n_vocab, vocab.eog_ids) for _ in range(s)]
    chains = [
        _GREEDY if k % 2 == 0 else SamplingParams(temperature=1.0, seed=_SEED + k) for k in range(s)
    ]
    try:
        first, on_device = _sample(backend, limits, prompts, chains, host=False)
        again, _ = _sample(backend, limits, prompts, chains, host=False)
        if reopen is not None:
            limits = reopen()
        host, _ = _sample(backend, limits, prompts, chains, host=True)
    finally:
        backend.clear()
    rows = sum(len(t) for t in first)
    if on_device < rows:
        return SamplingCheck(
            False, f"{on_device} of {rows} rows were sampled on the device (chains not attached)"
        )
    for k in range(s):
        if again[k] != first[k]:
            return SamplingCheck(
                False, f"seq {k}: the same seeded chain sampled {first[k]}, then {again[k]}"
            )
        if k % 2 == 0 and host[k] != first[k]:
            return SamplingCheck(
                False,
                f"seq {k}: greedy on the device sampled {first[k]}, the host chain {host[k]}",
            )
    return SamplingCheck(
        True,
        f"greedy tokens sampled on the device equal the host chain's and seeded samples "
        f"repeat, over {rows} rows of {s} sequences",
    )


class CheckMemo:
    """The verdicts of the device check (and of :func:`check_sampling`) made in this
    process, by what decides them: the backend's ``info.compute_key`` (model, device, the
    settings that choose the kernels), the context's size and ``n_batch``. A generator that
    finds its key here reuses the verdict instead of probing again (on a slow device the
    probe takes minutes). A check that could not run is not kept."""

    def __init__(self) -> None:
        self._verdicts: dict[Hashable, tuple[DeviceCheck, SamplingCheck | None]] = {}

    def get(self, key: Hashable | None) -> tuple[DeviceCheck, SamplingCheck | None] | None:
        """The verdicts kept for ``key`` (``None``: never kept), or ``None``."""
        return None if key is None else self._verdicts.get(key)

    def put(self, key: Hashable | None, check: DeviceCheck, sampling: SamplingCheck | None) -> None:
        """Keep ``check`` and ``sampling`` for ``key`` (``None``: nothing is kept)."""
        if key is not None:
            self._verdicts[key] = (check, sampling)

    def clear(self) -> None:
        """Forget every verdict: the next generator checks its device again."""
        self._verdicts.clear()


#: The checks made in this process (:class:`CheckMemo`); ``CHECKS.clear()`` forgets them.
CHECKS = CheckMemo()

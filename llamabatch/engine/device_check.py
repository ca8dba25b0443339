"""Batched equals alone, checked on the device: the probe of ``check_device``.

GPU backends have had defects in exactly the steps the slot engine makes, where one
sequence's prompt is decoded in the same call as other sequences' reply steps, with every
call reporting success (llama.cpp #28537 on HIP, #15006 on Vulkan; docs/gpu.md). The probe
runs such steps on a fresh batch context and compares every row it reads with the same
tokens decoded one sequence at a time, on the same context:

1. sequences ``0 .. S-2`` prefill a prompt of :data:`PROBE_PROMPT_TOKENS` tokens
   (together, in as few calls as ``n_batch`` allows);
2. the mixed step: each of them decodes one token while sequence ``S-1`` prefills its
   prompt in the same call;
3. a reply step: every sequence decodes one more token.

A row is read as the ``log_softmax`` at :data:`PROBE_TARGETS` fixed token ids and the
row's maximum; the deviation is the largest absolute difference in nats. It passes up
to :data:`PROBE_TOLERANCE`: llama.cpp's logits move with the batch shape by up to ~0.2
nats on a CPU (design notes), a corrupted row by whole nats. Tokens are drawn from the
vocabulary (no end-of-generation ids) with a fixed seed, so the probe needs no tokenizer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..params import SamplingParams
from .backend import Backend, BatchLimits
from .step import Span, StepResult

__all__ = [
    "PROBE_PROMPT_TOKENS",
    "PROBE_TARGETS",
    "PROBE_TOLERANCE",
    "DeviceCheck",
    "check_device",
]

#: Prompt tokens of each probe sequence.
PROBE_PROMPT_TOKENS = 12

#: Token ids whose log-probability each probe row compares (plus the row's maximum).
PROBE_TARGETS = 16

#: The largest deviation, in nats, that passes (module docstring).
PROBE_TOLERANCE = 1.0

_SEED = 20261203
_GREEDY = SamplingParams(temperature=0.0)


@dataclass(frozen=True, slots=True)
class DeviceCheck:
    """The probe's verdict.

    Attributes:
        ok: every row agreed within ``tolerance``.
        deviation: the largest difference found, in nats of ``log_softmax``.
        tolerance: the bound it was held to.
        slots: the sequences of the mixed step.
        rows: the rows compared.
        worst: where ``deviation`` was found (``"seq 2, mixed step"``).
    """

    ok: bool
    deviation: float
    tolerance: float
    slots: int
    rows: int
    worst: str

    def describe(self, device: str | None) -> str:
        """One sentence for the user: what was compared, on what, and the result."""
        on = device or "the CPU"
        over = f"over {self.rows} rows of {self.slots} sequences"
        if self.ok and self.deviation == 0.0:
            return f"batched and one-at-a-time logits on {on} agree: identical {over}"
        verdict, bound = ("agree", "within") if self.ok else ("disagree", "more than")
        return (
            f"batched and one-at-a-time logits on {on} {verdict}: largest difference "
            f"{self.deviation:.3f} nats ({self.worst}) {over}, {bound} {self.tolerance:g}"
        )


def _tokens(rng: random.Random, n: int, n_vocab: int, eog: frozenset[int]) -> tuple[int, ...]:
    out: list[int] = []
    while len(out) < n:
        t = rng.randrange(n_vocab)
        if t not in eog:
            out.append(t)
    return tuple(out)


def _targets(n: int, ids: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    return ((),) * (n - 1) + (ids,)


#: The probe's steps, as the index in each row's key.
_STEP_NAMES = ("prompt", "mixed step", "reply step")


def _plan(limits: BatchLimits, n_vocab: int, eog: frozenset[int]) -> list[tuple[int, list[Span]]]:
    """The probe's calls in order, each with its step's index in :data:`_STEP_NAMES`; every
    span reads its last row."""
    s, nb = limits.n_seq_max, limits.n_batch
    rng = random.Random(_SEED)
    ids = tuple(sorted(set(_tokens(rng, PROBE_TARGETS, n_vocab, frozenset()))))
    n_prompt = max(1, min(PROBE_PROMPT_TOKENS, limits.n_ctx_seq - 2, nb))
    last_prompt = max(1, min(n_prompt, nb - (s - 1)))
    prompts = [_tokens(rng, n_prompt, n_vocab, eog) for _ in range(s - 1)]
    prompts.append(_tokens(rng, last_prompt, n_vocab, eog))
    steps = [_tokens(rng, 2, n_vocab, eog) for _ in range(s)]
    calls: list[tuple[int, list[Span]]] = []
    call: list[Span] = []
    room = nb
    for k in range(s - 1):  # 1: the prompts, packed into calls of <= n_batch tokens
        if call and room < n_prompt:
            calls.append((0, call))
            call, room = [], nb
        call.append(Span(k, 0, prompts[k], targets=_targets(n_prompt, ids)))
        room -= n_prompt
    if call:
        calls.append((0, call))
    mixed = [  # 2: reply steps beside a prompt
        Span(k, n_prompt, steps[k][:1], targets=(ids,), step=True) for k in range(s - 1)
    ]
    mixed.append(Span(s - 1, 0, prompts[-1], targets=_targets(last_prompt, ids)))
    calls.append((1, mixed))
    reply = [Span(k, n_prompt + 1, steps[k][1:], targets=(ids,), step=True) for k in range(s - 1)]
    reply.append(Span(s - 1, last_prompt, steps[-1][:1], targets=(ids,), step=True))
    calls.append((2, reply))  # 3: a reply step of every sequence
    return calls


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


def check_device(backend: Backend, limits: BatchLimits) -> DeviceCheck:
    """Run the probe (module docstring) on ``backend``'s open batch context of ``limits``;
    every sequence is empty again afterwards.

    Raises:
        ValueError: the backend cannot score rows (``info.can_score`` False), fewer than 2
            sequences or 3 tokens per sequence; as ``Backend.run``.
        DecodeError, BackendError: as ``Backend.run`` (the caller treats them as the
            device failing the check).
    """
    s = limits.n_seq_max
    if not backend.info.can_score or s < 2 or limits.n_ctx_seq < 3:
        raise ValueError(
            "the device check needs a backend that scores rows, 2+ sequences and 3+ tokens each"
        )
    vocab = backend.vocab
    plan = _plan(limits, vocab.n_vocab, vocab.eog_ids)
    batched: dict[tuple[int, int], list[float]] = {}
    alone: dict[tuple[int, int], list[float]] = {}
    backend.clear()
    try:
        for k in range(s):  # a host chain: rows read as numbers
            backend.start_seq(k, _GREEDY, host=True)
        for step, call in plan:
            for seq, row in _rows(backend.run(call), call).items():
                batched[(seq, step)] = row
        for k in range(s):  # the same tokens, one sequence at a time
            backend.clear()
            backend.start_seq(k, _GREEDY, host=True)
            for step, call in plan:
                own = [span for span in call if span.seq_id == k]
                if own:
                    alone[(k, step)] = _rows(backend.run(own), own)[k]
    finally:
        backend.clear()
    worst, deviation = (0, 0), 0.0
    for key, row in batched.items():
        d = max(abs(a - b) for a, b in zip(row, alone[key]))
        if d > deviation or d != d:  # NaN counts as the worst
            worst, deviation = key, (float("inf") if d != d else d)
    return DeviceCheck(
        ok=deviation <= PROBE_TOLERANCE,
        deviation=deviation,
        tolerance=PROBE_TOLERANCE,
        slots=s,
        rows=len(batched),
        worst=f"seq {worst[0]}, {_STEP_NAMES[worst[1]]}",
    )

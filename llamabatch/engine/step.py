"""One step of the slot engine as plain data both ways: the :class:`Span` list the
engine plans (:func:`plan_step`) and the :class:`StepResult` a backend returns. They are
made for every sequence of every step, so they are plain (not frozen) slotted classes: a
backend reads them and never changes them.

Facts respected by :func:`plan_step` (llama.h, ``llama_decode``): at most ``n_batch``
tokens per call, one seq id per token, positions without gaps, logits only where a row
is read. Reply steps go first, then prompt chunks fill the rest of the budget, as
llama-server's slot loop does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

__all__ = ["SeqOutput", "Span", "StepResult", "Targets", "TokenLogprobs"]

#: One token's log-probabilities: ``(token_id, logprob)`` pairs, likeliest first.
TokenLogprobs = tuple[tuple[int, float], ...]

#: Per row of a span, the ids whose ``log_softmax`` is wanted (empty: none).
Targets = tuple[tuple[int, ...], ...]


@dataclass(slots=True)
class Span:
    """Consecutive tokens of one sequence in one step.

    Attributes:
        seq_id: the sequence (slot), in [0, n_seq_max).
        pos: position of ``tokens[0]``; the rest follow without gaps.
        tokens: token ids, at least one.
        logits: the sequence's chain samples its next token from the last row.
        targets: one tuple per token: the ids whose log-softmax that row reports
            (``StepResult`` scores), or ``None``.
        precise: the sequence's rows are read as numbers (scores): the backend may
            shorten the span (never to zero tokens, never one with ``logits``) to keep
            its tokens out of batch shapes that change them.
        step: a reply step (the sequence's last sampled token fed back).
    """

    seq_id: int
    pos: int
    tokens: Sequence[int]
    logits: bool = False
    targets: Targets | None = None
    precise: bool = False
    step: bool = False


@dataclass(slots=True)
class SeqOutput:
    """What one sequence's rows gave in a step (or one token of an item run alone).

    Attributes:
        token: the sampled token, or ``None`` (nothing sampled, or ``error``).
        logprobs: the sampled token's log-probabilities when its sampling asks for them.
        scores: per row of its span, ``log_softmax`` at each target id.
        row_max: per row of its span, the row's largest ``log_softmax`` where the row
            has targets, else ``None`` (a target scoring it is the greedy pick).
        error: the sequence's own failure (a grammar with no way forward: nothing was
            accepted); the step itself succeeded.
        grammar_complete: nothing sampled: the sequence's grammar holds a complete sentence
            and allows no further token, with no end-of-generation token in the vocabulary
            to end it there; its reply ends (``"stop"``) as at one.
    """

    token: int | None = None
    logprobs: TokenLogprobs | None = None
    scores: tuple[tuple[float, ...], ...] | None = None
    row_max: tuple[float | None, ...] | None = None
    error: str | None = None
    grammar_complete: bool = False


@dataclass(slots=True)
class StepTimes:
    """Where a backend's ``run`` spent its time, in seconds (``time.perf_counter``); the
    rest of a step is the host's own work (``Stats.step_split``).

    Attributes:
        decode: computing the step (for llama.cpp: ``llama_decode`` and
            ``llama_synchronize``, the logits' copy to the host included).
        logits: reading rows as numbers (log-probabilities, label scores).
        sampling: sampler chains picking each sampled row's token.
    """

    decode: float = 0.0
    logits: float = 0.0
    sampling: float = 0.0


@dataclass(slots=True)
class StepResult:
    """What a backend's ``run`` gives back.

    Attributes:
        decoded: per span, how many of its tokens were decoded (a prefix, >= 1; all of
            them unless the backend shortened a ``precise`` span).
        outputs: seq id -> its :class:`SeqOutput` (every sequence that sampled or scored).
        times: where the call spent its time, or ``None`` (not measured).
        backend_sampled: rows whose token a sampler chain chose on the model's own
            device (llama.cpp's backend sampling) instead of the host.
    """

    decoded: tuple[int, ...]
    outputs: dict[int, SeqOutput] = field(default_factory=dict)
    times: StepTimes | None = None
    backend_sampled: int = 0


@dataclass(frozen=True, slots=True)
class PrefillTokens:
    """A sequence's tokens still to prefill: ``tokens`` at ``pos``; ``stop_at`` caps one
    call."""

    seq_id: int
    pos: int
    tokens: Sequence[int]
    logits: bool = False
    stop_at: int | None = None


_SEQ_ID = attrgetter("seq_id")


def plan_step(steps: Sequence[Span], prefills: Sequence[PrefillTokens], n_batch: int) -> list[Span]:
    """The spans of one call: reply ``steps`` first (one-token spans, at most ``n_batch``,
    in order), then ``prefills`` fill the remaining budget in order, one cut where it does
    not fit (``logits`` kept only on a whole one). Returned by ascending seq id (llama.cpp
    puts consecutive seq ids in one ubatch).

    Raises:
        ValueError: ``n_batch`` < 1, or a prefill without tokens.
    """
    if n_batch < 1:
        raise ValueError(f"n_batch={n_batch} is out of range: valid is an integer >= 1")
    spans = list(steps[:n_batch])
    room = n_batch - len(spans)
    for p in prefills:
        if room == 0:
            break
        n = len(p.tokens)
        if n == 0:
            raise ValueError(f"seq {p.seq_id} has no tokens left to feed")
        take = min(room, n if p.stop_at is None else min(n, p.stop_at))
        spans.append(Span(p.seq_id, p.pos, p.tokens[:take], p.logits and take == n))
        room -= take
    spans.sort(key=_SEQ_ID)
    return spans

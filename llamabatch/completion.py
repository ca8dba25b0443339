"""What one input item becomes: a :class:`Completion` (its ``n`` replies: :class:`Sample`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

FinishReason = Literal["stop", "length", "error"]
CompletionPath = Literal["batch", "alone", "remote"]


@dataclass(frozen=True, slots=True)
class Sample:
    """One of the ``n`` replies of a prompt (``SamplingParams(n=K)``).

    Attributes:
        text, token_ids, finish_reason, logprobs: as on :class:`Completion`; a sample
            that failed has ``finish_reason == "error"`` and its message in ``error``.
        error: what went wrong, else ``None``.
    """

    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    error: str | None = None
    logprobs: tuple[tuple[tuple[int, float], ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """The result of one input item.

    Attributes:
        index: position of the item in the input (0-based).
        text: the reply, decoded from all of its token bytes at once (UTF-8, invalid
            bytes replaced); the end-of-generation token is not part of it.
        token_ids: the reply's token ids, end-of-generation token excluded.
        finish_reason: ``"stop"`` (an end-of-generation token, ``llama_vocab_is_eog``),
            ``"length"`` (``max_tokens`` reached, or the context is full) or ``"error"``.
        error: what went wrong when ``finish_reason == "error"``, else ``None``.
        n_prompt_tokens: tokens of the prompt (0 when it could not be tokenized).
        path: ``"batch"`` when decoded in the batch context, ``"alone"`` when completed one
            at a time through the ``Llama`` object (or when it failed before any decode),
            ``"remote"`` when a server of a pool made it (:mod:`llamabatch.remote`).
        logprobs: with ``SamplingParams(logprobs=N)``, one entry per token of
            ``token_ids``: a tuple of ``(token_id, logprob)`` pairs, the N likeliest
            tokens of that step (natural log of the model's softmax over the raw
            logits, before any sampler stage, as ``create_completion(logprobs=N)``
            reports them), likeliest first, then the chosen token if it is not among
            them; ``None`` when not asked for (or with a backend that offers none).
        choice_logprobs: with ``SamplingParams(score_choices=True)``, label ->
            log P(label | prompt) in nats (the natural log of the model's softmax,
            summed over the label's tokens; with ``choice_leading_space`` the
            probabilities of the label as written and with one leading space are
            added, a form that cannot move the sum by more than
            :data:`~llamabatch.engine.features.labels.SKIP_NATS` left out, so a value is at
            most that below the full sum, never above), in the order of ``choices``;
            else ``None``.
        choice_probs: the same normalised over the labels (they sum to 1; with forms
            left out a value can move either way by about ``SKIP_NATS``); ``text`` is
            the label with the highest one (the first of equal ones).
        choice_greedy: with ``score_choices``, label -> True when each token of its
            likeliest written form is the likeliest at its place (greedy decoding writes
            it); ``None`` with a backend that reports no row maxima.
        prompt_logprobs: with ``SamplingParams(score_prompt=True)``, log P(prompt token
            j | the tokens before it) in nats for j = 1 … ``n_prompt_tokens`` - 1 (the
            first token has no context); else ``None``.
        samples: with ``SamplingParams(n=K)``, K > 1, the K replies (:class:`Sample`),
            reply j drawn with seed ``seed + j``; ``text``, ``token_ids``,
            ``finish_reason`` and ``logprobs`` are reply 0's. Else ``None``.
        votes: with ``n`` > 1 and ``choices``, label -> how many replies are that label
            (every label present, 0 included; replies that are no label are not
            counted); else ``None``.
    """

    index: int
    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    error: str | None
    n_prompt_tokens: int
    path: CompletionPath
    logprobs: tuple[tuple[tuple[int, float], ...], ...] | None = None
    choice_logprobs: dict[str, float] | None = None
    choice_probs: dict[str, float] | None = None
    choice_greedy: dict[str, bool] | None = None
    prompt_logprobs: tuple[float, ...] | None = None
    samples: tuple[Sample, ...] | None = None
    votes: dict[str, int] | None = None

    @property
    def n_tokens(self) -> int:
        """Generated tokens (``len(token_ids)``)."""
        return len(self.token_ids)

    @property
    def completion_tokens(self) -> int:
        """Generated tokens of every reply (OpenAI's ``usage.completion_tokens``): with
        ``samples``, theirs summed; else :attr:`n_tokens`."""
        if self.samples is None:
            return self.n_tokens
        return sum(len(s.token_ids) for s in self.samples)

    @property
    def ok(self) -> bool:
        """True unless ``finish_reason == "error"``."""
        return self.error is None


def cut_off_choice(choices: Sequence[str] | None, text: str, n_tokens: int) -> str | None:
    """The error of a reply of ``n_tokens`` that ``max_tokens`` cut off before it was one
    of ``choices`` (``SamplingParams.choices``), or ``None`` when it is one or there are
    none. The one rule of every path: alone, batched, a pool."""
    if choices is None or text in choices:
        return None
    return (
        f"max_tokens ended the reply after {n_tokens} token{'s' * (n_tokens != 1)} "
        f"({text!r}) before it was one of the choices; a choices reply needs as many "
        "tokens as the model takes to spell its longest choice: raise max_tokens"
    )

"""What one input item becomes: a :class:`Completion`, and the generator's :class:`Stats`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FinishReason = Literal["stop", "length", "error"]
Path = Literal["batch", "alone"]


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
        path: ``"batch"`` when decoded in a group, ``"alone"`` when completed one at a
            time through the ``Llama`` object (or when it failed before any decode).
        logprobs: with ``SamplingParams(logprobs=N)``, one entry per token of
            ``token_ids``: a tuple of ``(token_id, logprob)`` pairs, the N likeliest
            tokens of that step (natural log of the model's softmax over the raw
            logits, before any sampler stage, as ``create_completion(logprobs=N)``
            reports them), likeliest first, then the chosen token if it is not among
            them; ``None`` when not asked for (or with a backend that offers none).
    """

    index: int
    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    error: str | None
    n_prompt_tokens: int
    path: Path
    logprobs: tuple[tuple[tuple[int, float], ...], ...] | None = None

    @property
    def n_tokens(self) -> int:
        """Generated tokens (``len(token_ids)``)."""
        return len(self.token_ids)

    @property
    def ok(self) -> bool:
        """True unless ``finish_reason == "error"``."""
        return self.error is None


@dataclass(slots=True)
class Stats:
    """Counters of one :class:`~llamabatch.BatchGenerator`, updated as groups finish.

    Attributes:
        groups_batched: groups decoded together in the batch context.
        items_batched: items completed in those groups.
        items_alone: items completed one at a time (including failed ones).
        items_failed: items whose ``finish_reason`` is ``"error"``.
        prompt_tokens: prompt tokens of all items.
        generated_tokens: reply tokens of all items.
        decode_calls: successful ``llama_decode`` calls in the batch context.
        batch_disabled_reason: why batching was turned off, or ``None`` while it is on.
    """

    groups_batched: int = 0
    items_batched: int = 0
    items_alone: int = 0
    items_failed: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    decode_calls: int = 0
    batch_disabled_reason: str | None = field(default=None)

    @property
    def batching_enabled(self) -> bool:
        """False once batching was turned off for good."""
        return self.batch_disabled_reason is None

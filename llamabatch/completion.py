"""What one input item becomes: a :class:`Completion`; and the generator's :class:`Stats`
and memory estimate (:class:`KvEstimate`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length", "error"]
Path = Literal["batch", "alone", "remote"]


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
    path: Path
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


@dataclass(slots=True)
class Stats:
    """Counters of one :class:`~llamabatch.BatchGenerator`: items as they are given back,
    the work of the batch context as it runs.

    Attributes:
        items_batched: items completed in the batch context (the slot engine).
        items_alone: items completed one at a time, and items that failed before any of
            their prompt ran (counted in ``alone_reasons`` too).
        items_failed: items whose ``finish_reason`` is ``"error"``.
        prompt_tokens: prompt tokens of the items whose prompt ran (not of those refused
            before it did: a prompt the context cannot hold, a bad grammar).
        generated_tokens: reply tokens of all items.
        prompt_tokens_cached: prompt tokens of batched items that a slot's cache (its
            own, or one copied from another slot) already held, so were not prefilled.
        prompt_tokens_prefilled: prompt tokens decoded in the batch context.
        prefix_copies: caches copied from one slot to another to share a prefix.
        cache_ram_saves: sequence states saved in host memory before a slot's cache was
            mostly thrown away (``BatchGenerator(cache_ram_mib=...)``).
        cache_ram_loads: saved states loaded into a slot for a prompt sharing their
            prefix (the tokens they saved count in ``prompt_tokens_cached``).
        labels_scored: items whose labels were scored (``score_choices``).
        label_tokens_decoded: tokens decoded in the batch context beyond the prompts
            to score labels of more than one token.
        decode_calls: successful ``llama_decode`` calls in the batch context.
        batch_disabled_reason: why batching was turned off, or ``None`` while it is on.
        batch_failures: failures of the batch path (a decode, a cache copy, a state
            save or load); each cost the items in flight one retry alone, and batching
            went on until ``max_batch_failures`` of them came in a row.
        items_retried: items in flight at those failures, each completed alone once.
        last_batch_failure: the reason of the last of them, or ``None``.
        batch_slots, batch_n_ctx_seq: sequences and tokens per sequence the batch
            context allocated (maybe fewer than asked: a context that cannot be created
            is tried smaller); 0 until it exists, and when it could not be created.
        alone_reasons: items completed alone for a reason the user can change, counted
            by reason (``"n_prompt_tokens + max_tokens > n_ctx_seq"``: the item does not
            fit a slot, also logged once as a warning; ``"refused before it ran (its
            Completion.error says why)"``: an item whose own error ended it before any of
            its prompt was decoded).
        kv_bytes: bytes of KV cache the batch context allocated (0 before it exists, and
            for backends without one); see ``BatchGenerator.estimate_memory``.
        step_seconds: wall seconds of the ``decode_calls`` steps of the batch context
            (planning, the backend's call, taking its outputs, cache copies);
            :attr:`step_split` tells where they went.
        decode_seconds, logits_seconds, sampling_seconds: the parts of them the backend
            spent computing, reading rows as numbers and sampling
            (:class:`~llamabatch.engine.step.StepTimes`; 0 where it does not say).
        backend_sampled_rows: rows whose token a sampler chain chose on the model's own
            device (llama.cpp's backend sampling, ``BatchGenerator(backend_sampling=)``).
        device_check: the result of the check that batched logits equal one-at-a-time
            ones on the device (``BatchGenerator(check_device=)``), one sentence; ``None``
            when it did not run.
        backend_sampling: whether plain chains sample on the model's device and why, one
            sentence (``"on: ..."`` or ``"off: ..."``; on a GPU it is on only once the device
            check showed that greedy tokens sampled there equal the host chain's and a
            seeded sample repeats); ``None`` where the backend samples on the host only.
    """

    items_batched: int = 0
    items_alone: int = 0
    items_failed: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    prompt_tokens_cached: int = 0
    prompt_tokens_prefilled: int = 0
    prefix_copies: int = 0
    cache_ram_saves: int = 0
    cache_ram_loads: int = 0
    labels_scored: int = 0
    label_tokens_decoded: int = 0
    decode_calls: int = 0
    batch_disabled_reason: str | None = field(default=None)
    batch_failures: int = 0
    items_retried: int = 0
    last_batch_failure: str | None = None
    batch_slots: int = 0
    batch_n_ctx_seq: int = 0
    kv_bytes: int = 0
    alone_reasons: dict[str, int] = field(default_factory=dict)
    step_seconds: float = 0.0
    decode_seconds: float = 0.0
    logits_seconds: float = 0.0
    sampling_seconds: float = 0.0
    backend_sampled_rows: int = 0
    device_check: str | None = None
    backend_sampling: str | None = None

    @property
    def batching_enabled(self) -> bool:
        """False once batching was turned off for good."""
        return self.batch_disabled_reason is None

    @property
    def step_split(self) -> StepSplit:
        """Where the batch context's steps spent their time so far."""
        parts = self.decode_seconds + self.logits_seconds + self.sampling_seconds
        return StepSplit(
            self.decode_calls,
            self.decode_seconds,
            self.logits_seconds,
            self.sampling_seconds,
            max(0.0, self.step_seconds - parts),
            self.backend_sampled_rows,
        )


#: The parts of :class:`StepSplit`, in order.
SPLIT_PARTS = ("decode", "logits", "sampling", "other")


@dataclass(frozen=True, slots=True)
class StepSplit:
    """Where ``steps`` steps of a batch context spent their time, in seconds summed over
    them: ``decode`` (computing them, the logits' copy to the host included), ``logits``
    (reading rows as numbers: log-probabilities, label scores), ``sampling`` (sampler
    chains picking tokens) and ``other`` (the rest: the engine's and the backend's own
    Python, cache copies); ``backend_sampled_rows`` of the sampled rows were sampled on the
    model's device. On a GPU, ``other`` and ``sampling`` are the host's share of a step.
    ``b - a`` is the split of the steps between two readings, ``a + b`` of both."""

    steps: int = 0
    decode: float = 0.0
    logits: float = 0.0
    sampling: float = 0.0
    other: float = 0.0
    backend_sampled_rows: int = 0
    device_check: str | None = None

    @property
    def seconds(self) -> float:
        """The steps' wall seconds."""
        return self.decode + self.logits + self.sampling + self.other

    def __sub__(self, before: StepSplit) -> StepSplit:
        return StepSplit(*(a - b for a, b in zip(self._values(), before._values())))

    def __add__(self, other: StepSplit) -> StepSplit:
        return StepSplit(*(a + b for a, b in zip(self._values(), other._values())))

    def _values(self) -> tuple[Any, ...]:
        return (self.steps, *(getattr(self, p) for p in SPLIT_PARTS), self.backend_sampled_rows)

    def per_step_ms(self) -> dict[str, float]:
        """Milliseconds per step of each part (:data:`SPLIT_PARTS`); zeros without steps."""
        n = max(self.steps, 1)
        return {part: getattr(self, part) * 1e3 / n for part in SPLIT_PARTS}

    def to_json(self) -> dict[str, float | int]:
        """``steps``, ``<part>_s`` (seconds summed) and ``backend_sampled_rows``."""
        doc: dict[str, float | int] = {"steps": self.steps}
        doc.update({f"{part}_s": getattr(self, part) for part in SPLIT_PARTS})
        doc["backend_sampled_rows"] = self.backend_sampled_rows
        return doc


@dataclass(frozen=True, slots=True)
class KvEstimate:
    """KV cache size of a batch context: ``bytes_per_token`` (K and V over all layers),
    ``n_ctx_seq`` (padded to 256, as allocated), ``bytes_per_slot``, ``slots``,
    ``total_bytes``; ``exact`` is False for sliding-window (upper bound), recurrent or hybrid
    models."""

    bytes_per_token: int
    n_ctx_seq: int
    bytes_per_slot: int
    slots: int
    total_bytes: int
    exact: bool

    @property
    def total_mib(self) -> float:
        """``total_bytes`` in MiB (2**20 bytes), as llama.cpp logs it."""
        return self.total_bytes / 2**20

"""A generator's counters (:class:`Stats`, ``BatchGenerator.stats``) and where its batch
context's steps spent their time (:class:`StepSplit`, ``Stats.step_split``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
            sentence (``"on: ..."`` or ``"off: ..."``; off unless asked for, and on a GPU on
            only once the device check showed that greedy tokens sampled there equal the
            host chain's and a seeded sample repeats); ``None`` where the backend samples
            on the host only.
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

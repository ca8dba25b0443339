"""The fake backend's call log: one record per call, and each item's run read back from it."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..engine.backend import BatchLimits
from ..engine.step import Span
from ..llamacpp.ubatch import split_equal
from ..params import SamplingParams

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # typing_extensions is a dependency of llama-cpp-python
    from typing_extensions import dataclass_transform

Tokens = tuple[int, ...]

__all__ = [
    "AloneCall",
    "Call",
    "ClearCall",
    "CloseCall",
    "CopyCall",
    "DecodeCall",
    "Expected",
    "LoadSeqCall",
    "OpenBatchCall",
    "SeqLog",
    "StartSeqCall",
    "TrimCall",
    "read_seqs",
]


@dataclass_transform(frozen_default=True)
class Call:
    """One entry of :attr:`FakeBackend.log <llamabatch.testing.FakeBackend.log>`: a call's
    arguments and what it saw or returned. Each subclass is a dataclass of its fields, frozen
    unless declared ``frozen=False``."""

    def __init_subclass__(cls, frozen: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(frozen=frozen)(cls)


class OpenBatchCall(Call):
    """``open(slots, n_ctx_seq, n_batch)``; ``limits`` is ``None`` when it failed."""

    slots: int
    n_ctx_seq: int
    n_batch: int
    limits: BatchLimits | None


class StartSeqCall(Call):
    """``start_seq(seq_id, sampling)``; ``kv_before`` is the tokens its cache held."""

    seq_id: int
    sampling: SamplingParams
    kv_before: Tokens


class TrimCall(Call):
    """``trim(seq_id, n_keep)`` and what it returned (``False``: refused)."""

    seq_id: int
    n_keep: int
    ok: bool


class CopyCall(Call):
    """``copy_seq(src, dst)``; ``n_tokens`` is the length of ``src``'s cache copied."""

    src: int
    dst: int
    n_tokens: int


class LoadSeqCall(Call):
    """``load_seq(seq_id, state)``; ``tokens`` is the cache the state holds."""

    seq_id: int
    tokens: Tokens


class DecodeCall(Call):
    """One ``run``: its 1-based ``call`` number, spans, sampled tokens (one per span with logits,
    in span order) and the injected ``error_code`` (``None`` when it worked)."""

    call: int
    spans: tuple[Span, ...]
    sampled: Tokens
    error_code: int | None

    @property
    def n_tokens(self) -> int:
        """Tokens decoded in this call."""
        return sum(len(s.tokens) for s in self.spans)

    @property
    def ubatches(self) -> int:
        """How many ubatches llama.cpp makes of this call (non-unified KV cache,
        ``n_ubatch >= n_tokens``): :func:`~llamabatch.llamacpp.ubatch.split_equal`."""
        return len(split_equal(self.spans))


class ClearCall(Call):
    """``clear()``: every sequence emptied."""


class AloneCall(Call, frozen=False):
    """``run_alone(tokens, sampling)``, updated while the caller pulls tokens: ``n_pulled``
    tokens handed out, the ``error`` message it raised, ``closed`` by the caller."""

    tokens: Tokens
    sampling: SamplingParams
    n_pulled: int = 0
    error: str | None = None
    closed: bool = False


class CloseCall(Call):
    """``close()``."""


@dataclass(frozen=True, slots=True)
class SeqLog:
    """One item's run in a slot, read back from the log (:meth:`FakeBackend.seqs`).

    Attributes:
        seq_id: its slot.
        start: index in the log of its :class:`StartSeqCall`.
        cached: tokens its cache held when its first prompt token was decoded (reused or
            copied; the prompt's rest was prefilled after them).
        prompt: ``cached`` plus the tokens fed up to its first span with logits.
        outputs: every token sampled for it (EOG included).
        prompt_end: the decode call whose logits gave its first token (``None``: none).
        decode_calls: the 1-based numbers of the decode calls it took part in.
        error_code: the injected ``DecodeError`` code, if one of those failed.
    """

    seq_id: int
    start: int
    sampling: SamplingParams
    cached: Tokens
    prompt: Tokens
    outputs: Tokens
    prompt_end: int | None
    decode_calls: tuple[int, ...]
    error_code: int | None


@dataclass(frozen=True, slots=True)
class Expected:
    """What an item should become when completed alone (:meth:`FakeBackend.expected`)."""

    token_ids: Tokens
    finish_reason: str
    text: str


@dataclass(slots=True)
class _OpenSeq:
    seq_id: int
    start: int
    sampling: SamplingParams
    kv: list[int]
    cached: Tokens | None = None
    outputs: list[int] = field(default_factory=list)
    end: int | None = None
    calls: list[int] = field(default_factory=list)
    error_code: int | None = None

    prompt: Tokens | None = None

    def close(self) -> SeqLog:
        cached = tuple(self.kv) if self.cached is None else self.cached
        prompt = tuple(self.kv) if self.prompt is None else self.prompt
        return SeqLog(
            self.seq_id,
            self.start,
            self.sampling,
            cached,
            prompt,
            tuple(self.outputs),
            self.end,
            tuple(self.calls),
            self.error_code,
        )


def read_seqs(log: Iterable[object]) -> list[SeqLog]:
    """Every item's run in a slot (one per :class:`StartSeqCall`, in order), the caches replayed
    from the log."""
    kv: dict[int, list[int]] = {}
    open_: dict[int, _OpenSeq] = {}
    done: list[_OpenSeq] = []
    for k, call in enumerate(log):
        if isinstance(call, StartSeqCall):
            if call.seq_id in open_:
                done.append(open_.pop(call.seq_id))
            kv[call.seq_id] = list(call.kv_before)
            open_[call.seq_id] = _OpenSeq(call.seq_id, k, call.sampling, kv[call.seq_id])
        elif isinstance(call, TrimCall):
            cache = kv.setdefault(call.seq_id, [])
            del cache[call.n_keep if call.ok else 0 :]
        elif isinstance(call, CopyCall):
            cache = kv.setdefault(call.dst, [])
            cache[:] = kv.get(call.src, [])[: call.n_tokens]
        elif isinstance(call, LoadSeqCall):
            kv.setdefault(call.seq_id, [])[:] = call.tokens
        elif isinstance(call, ClearCall):
            for cache in kv.values():
                cache.clear()
        elif isinstance(call, DecodeCall):
            sampled = iter(call.sampled)
            for span in call.spans:
                seq = open_.get(span.seq_id)
                cache = kv.setdefault(span.seq_id, [])
                if seq is not None:
                    seq.calls.append(call.call)
                    if seq.error_code is None:
                        seq.error_code = call.error_code
                    if seq.cached is None:
                        seq.cached = tuple(cache)
                if call.error_code is None or call.error_code == 2 or call.error_code < -1:
                    cache.extend(span.tokens)
                if seq is None or not span.logits or call.error_code is not None:
                    continue
                if seq.end is None:
                    seq.end, seq.prompt = call.call, tuple(cache)
                seq.outputs.append(next(sampled))
    done.extend(open_.values())
    done.sort(key=lambda s: s.start)
    return [s.close() for s in done]

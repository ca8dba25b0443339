"""The fake backend's call log: one record per call, and groups read back from it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..backend import BatchLimits
from ..params import SamplingParams

Tokens = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OpenBatchCall:
    """``open_batch(slots, n_ctx_seq, n_batch)``; ``limits`` is ``None`` when it failed."""

    slots: int
    n_ctx_seq: int
    n_batch: int
    limits: BatchLimits | None


@dataclass(frozen=True, slots=True)
class StartGroupCall:
    """``start_group(n_seqs, sampling)``; ``kv_before`` is each slot's KV length before."""

    n_seqs: int
    sampling: SamplingParams
    kv_before: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One span of a decode: ``tokens`` of ``seq_id`` from ``pos``; ``logits`` on the last."""

    seq_id: int
    pos: int
    tokens: Tokens
    logits: bool


@dataclass(frozen=True, slots=True)
class DecodeCall:
    """One ``decode``: its 1-based ``call`` number, spans, sampled tokens (one per span
    with logits, in span order) and the injected ``error_code`` (``None`` when it worked).
    """

    call: int
    spans: tuple[SpanRecord, ...]
    sampled: Tokens
    error_code: int | None

    @property
    def n_tokens(self) -> int:
        """Tokens decoded in this call, all spans together."""
        return sum(len(s.tokens) for s in self.spans)


@dataclass(frozen=True, slots=True)
class ClearCall:
    """``clear(n_seqs)``."""

    n_seqs: int


@dataclass(slots=True)
class AloneCall:
    """``generate_alone(tokens, sampling)``, updated while the caller pulls tokens.

    Attributes:
        n_pulled: tokens handed out so far.
        error: the ``BackendError`` message it raised, or ``None``.
        closed: the caller closed the iterator (or it was garbage collected).
    """

    tokens: Tokens
    sampling: SamplingParams
    n_pulled: int = 0
    error: str | None = None
    closed: bool = False


@dataclass(frozen=True, slots=True)
class CloseCall:
    """``close()``."""


@dataclass(frozen=True, slots=True)
class GroupLog:
    """One batched group read back from the log (see :meth:`FakeBackend.groups`).

    Attributes:
        n_seqs: sequences of the group (``start_group``).
        prompts: per sequence, the tokens it was fed up to and including its first span
            with logits (its prompt, if the scheduler put the logits in the right place).
        outputs: per sequence, every token sampled for it (EOG included).
        prompt_ends: per sequence, the decode call whose logits gave its first token
            (``None`` if none did).
        decode_calls: the 1-based numbers of the group's decode calls.
        error_code: the injected ``DecodeError`` code, if a decode of the group failed.
        cleared: a ``clear(n >= n_seqs)`` ended the group.
    """

    n_seqs: int
    prompts: tuple[Tokens, ...]
    outputs: tuple[Tokens, ...]
    prompt_ends: tuple[int | None, ...]
    decode_calls: tuple[int, ...]
    error_code: int | None
    cleared: bool


@dataclass(frozen=True, slots=True)
class Expected:
    """What an item should become when completed alone (see :meth:`FakeBackend.expected`)."""

    token_ids: Tokens
    finish_reason: str
    text: str


@dataclass(slots=True)
class _OpenGroup:
    """A group being read back from the log."""

    n_seqs: int
    prompts: list[list[int]]
    outputs: list[list[int]]
    ends: list[int | None]
    calls: list[int] = field(default_factory=list)
    error_code: int | None = None

    @classmethod
    def start(cls, n: int) -> _OpenGroup:
        return cls(n, [[] for _ in range(n)], [[] for _ in range(n)], [None] * n)

    def add(self, call: DecodeCall) -> None:
        self.calls.append(call.call)
        if self.error_code is None:
            self.error_code = call.error_code
        sampled = iter(call.sampled)
        for span in call.spans:
            s = span.seq_id
            if not 0 <= s < self.n_seqs:
                continue
            if self.ends[s] is None:
                self.prompts[s].extend(span.tokens)
                if span.logits:
                    self.ends[s] = call.call
            if span.logits and call.error_code is None:
                self.outputs[s].append(next(sampled))

    def end(self, cleared: bool) -> GroupLog:
        return GroupLog(self.n_seqs, tuple(map(tuple, self.prompts)),
                        tuple(map(tuple, self.outputs)), tuple(self.ends),
                        tuple(self.calls), self.error_code, cleared)


def read_groups(log: Iterable[object]) -> list[GroupLog]:
    """The batched groups of a call log, in order: one per :class:`StartGroupCall`,
    ended by a :class:`ClearCall` of all its sequences (or by the next group)."""
    done: list[GroupLog] = []
    group: _OpenGroup | None = None
    for call in log:
        if isinstance(call, StartGroupCall):
            if group is not None:
                done.append(group.end(False))
            group = _OpenGroup.start(call.n_seqs)
        elif isinstance(call, DecodeCall) and group is not None:
            group.add(call)
        elif isinstance(call, ClearCall) and group is not None and call.n_seqs >= group.n_seqs:
            done.append(group.end(True))
            group = None
    if group is not None:
        done.append(group.end(False))
    return done

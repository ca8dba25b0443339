"""The rules of llama.cpp the fake backend checks on every call: what llama.cpp would assert
on, refuse, or silently get wrong (llama.h; ``llama_batch_allocr::init``,
``src/llama-batch.cpp``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..engine.backend import BatchLimits
from ..engine.step import Span
from .memory import SlotState


class FakeBackendViolation(BaseException):
    """The scheduler broke a rule that llama.cpp enforces (or crashes on). A ``BaseException``,
    as pytest's outcomes are, so that the engine's failure isolation never takes it for a
    backend failure; also listed in :attr:`FakeBackend.violations
    <llamabatch.testing.FakeBackend>`."""


class Rules:
    """Checks against llama.cpp's rules; keeps the message of every violation."""

    def __init__(self) -> None:
        self.violations: list[str] = []

    def violation(self, message: str) -> FakeBackendViolation:
        """Record ``message`` and return the exception to raise."""
        self.violations.append(message)
        return FakeBackendViolation(message)

    def require(self, ok: bool, message: str) -> None:
        """Raise a violation with ``message`` unless ``ok``."""
        if not ok:
            raise self.violation(message)

    def require_open(self, closed: bool, limits: BatchLimits | None, what: str) -> BatchLimits:
        """A batch context is open (and the backend not closed); return its limits."""
        self.require(not closed, f"{what} after close()")
        if limits is None:
            raise self.violation(f"{what} without a batch context")
        return limits

    def require_seq_id(self, seq_id: object, limits: BatchLimits, what: str) -> None:
        """``seq_id`` is in [0, n_seq_max)."""
        n = limits.n_seq_max
        self.require(
            isinstance(seq_id, int) and 0 <= seq_id < n,
            f"{what}: seq id {seq_id} outside [0, {n})",
        )

    def check_plan(
        self, spans: Sequence[Span], limits: BatchLimits, slots: list[SlotState], n_vocab: int
    ) -> None:
        """One decode: 1 to n_batch tokens; each span's seq id in range, started, its cache known,
        not finished, not again after its logits in this call; positions continuing the cache,
        within n_ctx_seq; tokens in [0, n_vocab); after the prompt, exactly the token just
        sampled, with logits."""
        n_tokens = sum(len(s.tokens) for s in spans)
        self.require(n_tokens > 0, "decode of zero tokens")
        self.require(
            n_tokens <= limits.n_batch,
            f"decode of {n_tokens} tokens > n_batch={limits.n_batch}",
        )
        kv: dict[int, int] = {}
        waiting: set[int] = set()  # sampled in this call: not yet known
        n_seq_max = limits.n_seq_max
        for span in spans:
            s = span.seq_id
            self.require(
                isinstance(s, int) and 0 <= s < n_seq_max, f"seq id {s} outside [0, {n_seq_max})"
            )
            seq = slots[s]
            self.require(seq.started, f"seq {s} decoded without start_seq")
            self.require(
                not seq.corrupt,
                f"seq {s} decoded while its cache is unknown (a refused trim or a failed copy)",
            )
            self.require(not seq.is_done, f"seq {s} decoded after it finished")
            self.require(
                s not in waiting, f"seq {s} decoded again after its logits in the same call"
            )
            self.require(len(span.tokens) > 0, f"an empty span of seq {s}")
            pos = kv.get(s, len(seq.kv))
            self.require(span.pos == pos, f"seq {s}: position {span.pos}, expected {pos}")
            kv[s] = pos + len(span.tokens)
            self.require(
                kv[s] <= limits.n_ctx_seq,
                f"seq {s}: {kv[s]} tokens > n_ctx_seq={limits.n_ctx_seq}",
            )
            self.require(
                all(0 <= t < n_vocab for t in span.tokens),
                f"seq {s}: a token outside [0, {n_vocab})",
            )
            if seq.reply is not None:
                self.require(
                    len(span.tokens) == 1 and span.logits,
                    f"seq {s}: after its prompt, one token with logits per call",
                )
                self.require(
                    span.tokens[0] == seq.last,
                    f"seq {s}: decoded {span.tokens[0]}, sampled {seq.last}",
                )
            if span.logits:
                waiting.add(s)

    def check_alone_pull(
        self,
        last: int | None,
        n_pulled: int,
        n_prompt: int,
        eog_ids: Collection[int],
        max_tokens: int | None,
        n_ctx: int,
    ) -> None:
        """One more token pulled alone: not after an EOG, not past ``max_tokens``, not past the
        context."""
        self.require(last not in eog_ids, "alone: pulled after an EOG")
        self.require(
            max_tokens is None or n_pulled < max_tokens,
            f"alone: pulled token {n_pulled + 1} > max_tokens",
        )
        self.require(
            n_prompt + n_pulled <= n_ctx,
            f"alone: pulled token {n_pulled + 1} past n_ctx={n_ctx}",
        )

"""The scheduler: groups, lockstep decode, stop rule, fallback to one at a time.

Pure Python over a :class:`~llamabatch.backend.Backend`; never imports ``_ffi``. One call
of :meth:`Scheduler.run_group` turns a group of prepared items into their completions,
in input order, whatever fails.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from .backend import Backend, BatchLimits, Span
from .completion import Completion, Stats
from .errors import BackendError, BatchUnavailable, DecodeError, GrammarError, decode_meaning
from .params import BatchConfig, SamplingParams
from .plan import plan_prefill
from .prompts import Item
from .stop import Reply

log = logging.getLogger("llamabatch")


class Status(IntEnum):
    """Where a sequence stands; ordered so ``status >= FINISHED`` means done."""

    PREFILL = 0
    DECODE = 1
    FINISHED = 2


@dataclass(slots=True)
class SeqState:
    """One item decoded in a slot of the batch context."""

    item: Item
    seq_id: int
    reply: Reply
    last: int = -1
    status: Status = Status.PREFILL
    n_sampled: int = field(default=0)

    @property
    def pos(self) -> int:
        """Position of the last sampled token (the next one to decode)."""
        return len(self.item.tokens) + self.n_sampled - 1

    @property
    def is_finished(self) -> bool:
        return self.status >= Status.FINISHED


class Scheduler:
    """Runs groups of items on a backend, batched when it can, alone when it must.

    Args:
        backend: the backend to drive.
        config: slots, n_ctx_seq, n_batch, max_tokens.
        sampling: the sampler chain parameters of every item.
    """

    def __init__(self, backend: Backend, config: BatchConfig, sampling: SamplingParams):
        self.backend = backend
        self.config = config
        self.sampling = sampling
        self.stats = Stats()
        self.limits: BatchLimits | None = None
        if config.slots < 2:
            self.stats.batch_disabled_reason = "slots=1: every item is completed alone"

    # -- batch context -----------------------------------------------------------------
    def _disable(self, reason: str) -> None:
        log.warning("llamabatch: batching turned off, completing items one at a time: %s",
                    reason)
        self.stats.batch_disabled_reason = reason

    def _can_batch(self) -> bool:
        if not self.stats.batching_enabled:
            return False
        if self.limits is None:
            cfg = self.config
            try:
                self.limits = self.backend.open_batch(cfg.slots, cfg.n_ctx_seq, cfg.n_batch)
            except BatchUnavailable as exc:
                self._disable(f"the batch context could not be created: {exc}")
                return False
            lim = self.limits
            log.info("llamabatch: batch context of %d sequences x %d tokens (n_ctx_seq=%d "
                     "requested), n_batch %d, n_ctx %d", lim.n_seq_max, lim.n_ctx_seq,
                     cfg.n_ctx_seq, lim.n_batch, lim.n_ctx)
        return True

    def _fits(self, item: Item) -> bool:
        return item.n_prompt_tokens + self.max_tokens <= self.limits.n_ctx_seq

    # -- groups -------------------------------------------------------------------------
    def run_group(self, items: Sequence[Item]) -> list[Completion]:
        """Complete ``items`` (at most ``slots``); the result is in the items' order."""
        results: dict[int, Completion] = {}
        batchable: list[Item] = []
        if len(items) > 1 and self._can_batch():
            batchable = [it for it in items if it.error is None and self._fits(it)]
        if len(batchable) >= 2:
            results.update(self._run_batched(batchable))
        for item in items:
            if item.index not in results:
                results[item.index] = self.run_alone(item)
        done = [results[item.index] for item in items]
        for c in done:
            self.stats.prompt_tokens += c.n_prompt_tokens
            self.stats.generated_tokens += c.n_tokens
            self.stats.items_failed += c.error is not None
        return done

    def _run_batched(self, items: list[Item]) -> dict[int, Completion]:
        backend, n = self.backend, len(items)
        seqs = [SeqState(item, seq_id, self._reply(item)) for seq_id, item in enumerate(items)]
        try:
            backend.start_group(n, self.sampling)
            for spans in plan_prefill([s.item.tokens for s in seqs], self.limits.n_batch):
                self._decode(spans, seqs)
            running = [s for s in seqs if not s.is_finished]
            while running:
                step = [Span(s.seq_id, s.pos, (s.last,), True) for s in running]
                for start in range(0, len(step), self.limits.n_batch):
                    self._decode(step[start:start + self.limits.n_batch], seqs)
                running = [s for s in running if not s.is_finished]
        except GrammarError as exc:  # the items' own error; batching stays on
            return {s.item.index: self._error(s.item, str(exc)) for s in seqs}
        except DecodeError as exc:
            self._disable(f"llama_decode returned {exc.code} "
                          f"({decode_meaning(exc.code)}) in a batch of {n}: {exc}")
            return {}
        except BackendError as exc:
            self._disable(f"the batch backend failed in a batch of {n}: {exc}")
            return {}
        finally:  # whatever happened (even KeyboardInterrupt), no slot stays filled
            backend.clear(n)
        self.stats.groups_batched += 1
        self.stats.items_batched += n
        return {s.item.index: self._completion(s.item, s.reply, "batch") for s in seqs}

    def _decode(self, spans: list[Span], seqs: list[SeqState]) -> None:
        sampled = self.backend.decode(spans)
        self.stats.decode_calls += 1
        it = iter(zip(sampled, self._take_logprobs(len(sampled))))
        for span in spans:
            if not span.logits:
                continue
            seq = seqs[span.seq_id]
            token, logprobs = next(it)
            seq.last, seq.n_sampled = token, seq.n_sampled + 1
            seq.status = Status.FINISHED if seq.reply.add(token, logprobs) else Status.DECODE

    def _take_logprobs(self, n: int) -> list:
        """The backend's logprobs of its last ``n`` tokens (``Backend.take_logprobs``, an
        optional method), or ``None`` each when not asked for or not offered."""
        take = getattr(self.backend, "take_logprobs", None)
        if self.sampling.logprobs is None or take is None:
            return [None] * n
        taken = list(take())
        return taken + [None] * (n - len(taken)) if len(taken) < n else taken[:n]

    # -- one at a time ------------------------------------------------------------------
    def run_alone(self, item: Item) -> Completion:
        """Complete one item outside the batch context; failures become its error."""
        self.stats.items_alone += 1
        if item.error is not None:
            return self._error(item, item.error)
        reply = self._reply(item)
        tokens = iter(())
        try:
            tokens = self.backend.generate_alone(item.tokens, self.sampling)
            for token in tokens:
                if reply.add(token, self._take_logprobs(1)[0]):
                    break
        except GrammarError as exc:
            return self._error(item, str(exc))
        except BackendError as exc:
            return self._error(item, f"failed even alone: {exc}")
        finally:
            close = getattr(tokens, "close", None)
            if close is not None:
                close()
        if not reply.is_finished:
            return self._error(item, "the backend stopped generating without a reason")
        return self._completion(item, reply, "alone")

    @property
    def max_tokens(self) -> int:
        """Most reply tokens per item: ``sampling.max_tokens``, else ``config.max_tokens``."""
        return self.sampling.max_tokens or self.config.max_tokens

    def _reply(self, item: Item) -> Reply:
        """The stop rule of ``item``: at most ``max_tokens``, or fewer when the
        one-at-a-time context (``n_ctx``) is shorter, so a reply never depends on its
        path; EOG, ``stop_token_ids`` and ``stop`` strings from the sampling params."""
        budget = min(self.max_tokens, self.backend.n_ctx - len(item.tokens))
        return Reply(budget, self.backend.eog_ids, self.backend.detokenize,
                     self.sampling.stop, self.sampling.stop_token_ids)

    # -- results ------------------------------------------------------------------------
    def _completion(self, item: Item, reply: Reply, path: str) -> Completion:
        logprobs = tuple(reply.logprobs) if self.sampling.logprobs is not None else None
        return Completion(item.index, reply.text, tuple(reply.token_ids), reply.finish_reason,
                          None, len(item.tokens), path, logprobs)

    def _error(self, item: Item, message: str) -> Completion:
        return Completion(item.index, "", (), "error", message, item.n_prompt_tokens, "alone")

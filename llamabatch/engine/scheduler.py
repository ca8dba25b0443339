"""The scheduler: which items go to the slot engine, which are completed alone, and the
fallback to one at a time.

Pure Python over a :class:`~llamabatch.engine.backend.Backend`; never imports ``_ffi``.
:meth:`Scheduler.iter_steps` turns a stream of prepared items into their completions, in the
order they finish (the generator puts them back in input order), whatever fails:

- an item whose prompt is an error completes as that error, at once;
- an item that cannot fit a slot (``n_prompt + budget > n_ctx_seq``) is completed alone
  through the backend's one-at-a-time path, in its place;
- the others run in the :class:`~llamabatch.engine.slot_engine.SlotEngine`; the batch context is
  opened once two valid items are waiting. If it cannot be opened, or any backend call
  of the batch path fails, batching is turned off for good with one logged reason,
  every cache is emptied, and the items in flight and all later ones run one at a time.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..completion import Completion, Path, Stats
from ..errors import BackendError, BatchUnavailable, GrammarError
from ..params import BatchConfig
from .backend import Backend, BackendCapabilities, BatchLimits
from .items import Item
from .slot_engine import BatchFailed, Seq, SlotEngine
from .stop import StopRule

log = logging.getLogger("llamabatch")

#: Key of :attr:`Stats.alone_reasons`: the prompt plus ``max_tokens`` exceed a slot.
TOO_LONG_FOR_A_SLOT = "n_prompt_tokens + max_tokens > n_ctx_seq"


class Scheduler:
    """Runs items on a backend, batched when it can, alone when it must.

    Args:
        backend: the backend to drive.
        config: slots, n_ctx_seq, n_batch, max_tokens, lookahead.
        min_copy_tokens, cache_ram_bytes: see :class:`~llamabatch.engine.slot_engine.SlotEngine`.
        capabilities: what the backend can do (default: ``backend.capabilities()``, read
            here once).
    """

    def __init__(
        self,
        backend: Backend,
        config: BatchConfig,
        min_copy_tokens: int = 32,
        cache_ram_bytes: int = 0,
        capabilities: BackendCapabilities | None = None,
    ):
        self.backend = backend
        self.capabilities = backend.capabilities() if capabilities is None else capabilities
        self.config = config
        self.min_copy_tokens = min_copy_tokens
        self.cache_ram_bytes = cache_ram_bytes
        self.stats = Stats()
        self.limits: BatchLimits | None = None
        self.engine: SlotEngine | None = None
        self._open_tried = False
        if config.slots < 2:
            self.stats.batch_disabled_reason = "slots=1: every item is completed alone"

    # -- the batch context -------------------------------------------------------------
    def _disable(self, reason: str) -> None:
        log.warning("llamabatch: batching turned off, completing items one at a time: %s", reason)
        self.stats.batch_disabled_reason = reason

    def _open(self) -> bool:
        if self.engine is not None:
            return True
        if self._open_tried or not self.stats.batching_enabled:
            return False
        self._open_tried = True
        cfg = self.config
        try:
            self.limits = self.backend.open_batch(cfg.slots, cfg.n_ctx_seq, cfg.n_batch)
        except AssertionError:  # a broken rule (FakeBackendViolation), not a failure
            raise
        except Exception as exc:  # noqa: BLE001 - BatchUnavailable, MemoryError, ...
            what = "" if isinstance(exc, BatchUnavailable) else f"{type(exc).__name__}: "
            self.limits = None
            self._disable(f"the batch context could not be created: {what}{exc}")
            return False
        lim = self.limits
        log.info(
            "llamabatch: batch context of %d sequences x %d tokens (n_ctx_seq=%d "
            "requested), n_batch %d, n_ctx %d",
            lim.n_seq_max,
            lim.n_ctx_seq,
            cfg.n_ctx_seq,
            lim.n_batch,
            lim.n_ctx,
        )
        self.engine = SlotEngine(
            self.backend,
            lim,
            self.stats,
            self.min_copy_tokens,
            self.cache_ram_bytes,
            self.capabilities,
        )
        return True

    def open(self) -> BatchLimits | None:
        """Open the batch context now (else it opens when two valid items wait).

        Returns:
            its limits, or ``None`` when batching is off (the reason is in
            :attr:`stats`).
        """
        return self.limits if self._open() else None

    @property
    def batching(self) -> bool:
        """True while the batch path may be used (it may not be open yet)."""
        return self.stats.batching_enabled

    # -- items -------------------------------------------------------------------------
    def budget(self, item: Item) -> int:
        """Most tokens ``item`` may generate: its ``max_tokens`` (else the generator's),
        or less when the one-at-a-time context (``n_ctx``) is shorter, so a reply never
        depends on its path."""
        cap = item.sampling.max_tokens or self.config.max_tokens
        return min(cap, self.backend.n_ctx - len(item.tokens))

    def _alone_because(self, reason: str) -> None:
        """Count an item sent alone for a reason the user can change; say so once."""
        counts = self.stats.alone_reasons
        if reason not in counts:
            n_ctx_seq = self.limits.n_ctx_seq if self.limits else self.config.n_ctx_seq
            log.warning(
                "llamabatch: items are completed alone because %s (n_ctx_seq=%d "
                "allocated, max_tokens=%d): raise n_ctx_seq or lower max_tokens "
                "to batch them",
                reason,
                n_ctx_seq,
                self.config.max_tokens,
            )
        counts[reason] = counts.get(reason, 0) + 1

    def fits(self, item: Item) -> bool:
        """True when ``item`` can run in a slot (``n_prompt + budget <= n_ctx_seq``,
        the allocated size once the context is open, the requested one before)."""
        if item.error is not None:
            return False
        n_ctx_seq = self.limits.n_ctx_seq if self.limits else self.config.n_ctx_seq
        return item.n_prompt_tokens + self.budget(item) <= n_ctx_seq

    def iter_steps(
        self, items: Iterator[Item], hold: Callable[[], Any], lookahead: int
    ) -> Iterator[list[Completion]]:
        """Complete ``items``, one step (at most one decode, as
        :meth:`SlotEngine.step <llamabatch.engine.slot_engine.SlotEngine.step>`) at a time.

        Args:
            items: prepared items in input order, read lazily (inside a step).
            hold: a context manager factory held around each step (the lock).
            lookahead: an item is started only while it is fewer than ``lookahead``
                places after the oldest unfinished one (bounds what waits to be
                reordered).

        Yields:
            the completions of each step (maybe none), in finishing order.
        """
        queue: deque[Item] = deque()
        open_: set[int] = set()
        state = {"next": 0, "exhausted": False}

        def pull(n_wanted: int) -> None:
            while len(queue) < n_wanted and not state["exhausted"]:
                oldest = min(open_) if open_ else state["next"]
                if state["next"] >= oldest + lookahead:
                    return
                item = next(items, None)
                if item is None:
                    state["exhausted"] = True
                    return
                state["next"] = item.index + 1
                open_.add(item.index)
                queue.append(item)

        try:
            while True:
                with hold():
                    done = self._step(queue, pull)
                if done is None:
                    return
                for c in done:
                    open_.discard(c.index)
                yield done
        finally:
            self._end_run()

    def release_alone(self) -> None:
        """Give the caller's ``Llama`` back as it was before the items completed alone
        since the last call (``Backend.release_alone``; until then its KV cache keeps
        the last such item, so the next one reuses their shared prefix)."""
        self.backend.release_alone()

    def _end_run(self) -> None:
        self.release_alone()
        engine = self.engine
        if engine is None:
            return
        if engine.dirty:  # interrupted inside a backend call
            engine.reset()
        else:
            engine.release()  # stopped early: caches stay valid

    def _step(self, queue: deque[Item], pull: Callable[[int], None]) -> list | None:
        engine = self.engine
        if engine is None and self.batching:
            # open it once two valid items wait (what fits is known once it is open)
            while sum(it.error is None for it in queue) < 2:
                n = len(queue)
                pull(n + 1)
                if len(queue) == n:
                    break
            if sum(it.error is None for it in queue) >= 2:
                self._open()
            engine = self.engine
        if engine is None or not self.batching:
            pull(1)
            return [self.run_alone(queue.popleft())] if queue else None
        done: list[Completion] = []
        while engine.has_free_slot:
            pull(1)
            if not queue:
                break
            item = queue.popleft()
            if item.error is not None:
                done.append(self._error(item, item.error))
            elif not self.fits(item):
                self._alone_because(TOO_LONG_FOR_A_SLOT)
                done.append(self.run_alone(item))
                return done
            else:
                try:
                    engine.place(item, self.reply(item))
                except GrammarError as exc:  # the item's own error; batching goes on
                    done.append(self._error(item, str(exc)))
                except BatchFailed as exc:
                    return done + self._fail(exc, queue)
        if not engine.running:
            return done if done or queue else None
        try:
            finished = engine.step()
        except BatchFailed as exc:
            return done + self._fail(exc, queue)
        return done + [self._batched(seq) for seq in finished]

    def _fail(self, exc: BatchFailed, queue: deque[Item]) -> list[Completion]:
        engine = self.engine
        n = len(engine.running) if engine is not None else 0
        self._disable(f"{exc.reason} (with {n} sequence(s) running)")
        for item in reversed(engine.reset() if engine is not None else []):
            queue.appendleft(item)
        return []

    # -- one at a time -----------------------------------------------------------------
    def run_alone(self, item: Item) -> Completion:
        """Complete one item outside the batch context; failures become its error."""
        if item.error is not None:
            return self._error(item, item.error)
        reply = self.reply(item)
        take = self._logprobs_taker(item)
        tokens: Iterator[int] = iter(())
        try:
            tokens = self.backend.generate_alone(item.tokens, item.sampling)
            for token in tokens:
                if reply.add(token, take()[0] if take is not None else None):
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

    def reply(self, item: Item) -> StopRule:
        """The stop rule of ``item`` (:class:`~llamabatch.engine.stop.StopRule`): at most
        :meth:`budget` tokens; EOG, ``stop_token_ids`` and ``stop`` strings from its
        sampling params."""
        sampling = item.sampling
        return StopRule(
            self.budget(item),
            self.backend.eog_ids,
            self.backend.detokenize,
            sampling.stop,
            sampling.stop_token_ids,
        )

    def _logprobs_taker(self, item: Item) -> Callable[[], list] | None:
        """``backend.take_logprobs`` when ``item`` asks for logprobs."""
        if item.sampling.logprobs is None:
            return None
        return self.backend.take_logprobs

    # -- results -----------------------------------------------------------------------
    def count(self, c: Completion) -> None:
        """Add a completion given back to the caller to :attr:`stats`."""
        s = self.stats
        s.prompt_tokens += c.n_prompt_tokens
        s.generated_tokens += c.n_tokens
        s.items_failed += c.error is not None
        if c.path == "batch":
            s.items_batched += 1
        else:
            s.items_alone += 1

    def _batched(self, seq: Seq) -> Completion:
        return self._completion(seq.item, seq.reply, "batch")

    def _completion(self, item: Item, reply: StopRule, path: Path) -> Completion:
        logprobs = tuple(reply.logprobs) if item.sampling.logprobs is not None else None
        return Completion(
            item.index,
            reply.text,
            tuple(reply.token_ids),
            reply.finish_reason or "length",  # finished: never None here
            None,
            len(item.tokens),
            path,
            logprobs,
        )

    def _error(self, item: Item, message: str) -> Completion:
        return Completion(item.index, "", (), "error", message, item.n_prompt_tokens, "alone")

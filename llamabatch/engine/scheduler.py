"""The scheduler: which items go to the slot engine, which are completed alone, and the
fallback to one at a time.

Pure Python over a :class:`~llamabatch.engine.backend.Backend`; never imports ``_ffi``.
:meth:`Scheduler.iter_steps` turns a stream of prepared items into their completions, in the
order they finish (the generator puts them back in input order), whatever fails:

- an item whose prompt is an error completes as that error, at once;
- an item that cannot fit a slot (``n_prompt + budget > n_ctx_seq``; for label scores the
  prompt + the longest label's tokens, :meth:`Scheduler.need`) is completed alone
  through the backend's one-at-a-time path, in its place;
- the others run in the :class:`~llamabatch.engine.slot_engine.SlotEngine`; the batch context is
  opened once two valid items are waiting. If it cannot be created, it is tried smaller
  (:func:`smaller_tries`: half the slots down to 2, then half ``n_ctx_seq``, first cut to
  at most the one-at-a-time ``n_ctx``, down to what the longest waiting item needs), one
  log line per try; if no size can be created, batching is off for good.
- failure isolation: when a backend call of the batch path fails (a decode, a cache
  copy, a state save or load), every cache is emptied and the items in flight are each
  completed alone once (a failure there is that item's error); batching goes on with
  the next items. After ``max_batch_failures`` such failures with no item completed in
  the batch in between, batching is turned off for good with one logged reason
  (``Stats.batch_disabled_reason``). A grammar error (refused, or a dead end) is the
  item's own error and never counts.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..completion import Completion, Path, Stats, cut_off_choice
from ..errors import BackendError, BatchUnavailable, GrammarError, LibraryError
from ..params import BatchConfig
from .backend import Backend, BackendCapabilities, BatchLimits
from .items import Item
from .label_tokens import TailTokens
from .samples import SampleGroups
from .scoring import LabelScores, ScoreJob, job_for, score_alone
from .seq_errors import GrammarDeadEnd
from .slot_engine import BatchFailed, Seq, SlotEngine, dead_end_message
from .stop import StopRule

log = logging.getLogger("llamabatch")

#: Key of :attr:`Stats.alone_reasons`: the prompt plus ``max_tokens`` exceed a slot.
TOO_LONG_FOR_A_SLOT = "n_prompt_tokens + max_tokens > n_ctx_seq"

#: Key of :attr:`Stats.alone_reasons`: the prompt plus its longest label exceed a slot.
LABELS_TOO_LONG_FOR_A_SLOT = "n_prompt_tokens + label tokens > n_ctx_seq"

#: Default of ``max_batch_failures``: consecutive failures of the batch path before
#: batching is turned off for good.
MAX_BATCH_FAILURES = 3


def smaller_tries(
    slots: int, n_ctx_seq: int, min_n_ctx_seq: int, max_n_ctx_seq: int | None = None
) -> list[tuple[int, int]]:
    """The sizes ``(slots, n_ctx_seq)`` to try, in order, when a batch context cannot be
    created: as asked; then half the slots (integer halving) down to 2; then, at 2
    slots, half ``n_ctx_seq`` (the first cut goes straight to ``max_n_ctx_seq`` when
    that is smaller: no item can use more) while it stays above ``min_n_ctx_seq``; last
    ``min_n_ctx_seq`` itself (the longest waiting item's need). Fewer than 2 slots is
    no batch, so ``slots < 2`` gives only the size asked.

    Args:
        slots, n_ctx_seq: the size asked for.
        min_n_ctx_seq: the smallest useful ``n_ctx_seq`` (clamped to [1, n_ctx_seq]).
        max_n_ctx_seq: the most tokens one item can use (the one-at-a-time context's
            ``n_ctx``), or ``None``.

    Returns:
        distinct sizes, the one asked first.
    """
    tries = [(slots, n_ctx_seq)]
    if slots < 2:
        return tries
    floor = max(1, min(min_n_ctx_seq, n_ctx_seq))
    s, c = slots, n_ctx_seq
    while s > 2:
        s = max(2, s // 2)
        tries.append((s, c))
    while c > floor:
        c = c // 2 if max_n_ctx_seq is None else min(c // 2, max(max_n_ctx_seq, floor))
        c = max(floor, c)
        tries.append((s, c))
    return tries


def check_max_batch_failures(max_batch_failures: object) -> None:
    """Raise ``ValueError`` unless ``max_batch_failures`` is an integer >= 1."""
    if (
        not isinstance(max_batch_failures, int)
        or isinstance(max_batch_failures, bool)
        or max_batch_failures < 1
    ):
        raise ValueError(
            f"max_batch_failures={max_batch_failures!r} is out of range: valid is an "
            "integer >= 1 (failures of the batch path in a row before batching is "
            "turned off; 1 turns it off at the first)"
        )


class Scheduler:
    """Runs items on a backend, batched when it can, alone when it must.

    Args:
        backend: the backend to drive.
        config: slots, n_ctx_seq, n_batch, max_tokens, lookahead.
        min_copy_tokens, cache_ram_bytes: see :class:`~llamabatch.engine.slot_engine.SlotEngine`.
        max_batch_failures: failures of the batch path in a row (no item completed in
            the batch in between) after which batching is turned off for good, >= 1
            (1: the first failure turns it off).
        capabilities: what the backend can do (default: ``backend.capabilities()``, read
            here once).

    Raises:
        ValueError: ``max_batch_failures`` is not an integer >= 1.
    """

    def __init__(
        self,
        backend: Backend,
        config: BatchConfig,
        min_copy_tokens: int = 32,
        cache_ram_bytes: int = 0,
        max_batch_failures: int = MAX_BATCH_FAILURES,
        capabilities: BackendCapabilities | None = None,
    ):
        check_max_batch_failures(max_batch_failures)
        self.backend = backend
        self.capabilities = backend.capabilities() if capabilities is None else capabilities
        self.config = config
        self.min_copy_tokens = min_copy_tokens
        self.cache_ram_bytes = cache_ram_bytes
        self.max_batch_failures = max_batch_failures
        self.stats = Stats()
        self.limits: BatchLimits | None = None
        self.engine: SlotEngine | None = None
        self._open_tried = False
        self._tails = TailTokens(backend.tokenize)  # label tokens per prompt end
        self._failures = 0  # failures of the batch path since an item completed in it
        self._retry: deque[Item] = deque()  # items in flight at a failure: alone, once
        self.samples = SampleGroups()
        if config.slots < 2:
            self.stats.batch_disabled_reason = "slots=1: every item is completed alone"

    # -- the batch context -------------------------------------------------------------
    def _disable(self, reason: str) -> None:
        log.warning("llamabatch: batching turned off, completing items one at a time: %s", reason)
        self.stats.batch_disabled_reason = reason

    def _open(self, min_n_ctx_seq: int | None = None) -> bool:
        """Create the batch context, smaller when it cannot be created
        (:func:`smaller_tries`; ``min_n_ctx_seq``: the longest waiting item's need,
        ``None``: only fewer slots are tried)."""
        if self.engine is not None:
            return True
        if self._open_tried or not self.stats.batching_enabled:
            return False
        self._open_tried = True
        cfg = self.config
        floor = cfg.n_ctx_seq if min_n_ctx_seq is None else min_n_ctx_seq
        tries = smaller_tries(cfg.slots, cfg.n_ctx_seq, floor, self.backend.n_ctx)
        why = ""
        for k, (slots, n_ctx_seq) in enumerate(tries, 1):
            try:
                self.limits = self.backend.open_batch(slots, n_ctx_seq, cfg.n_batch)
                break
            except AssertionError:  # a broken rule (FakeBackendViolation), not a failure
                raise
            except Exception as exc:  # noqa: BLE001 - BatchUnavailable, MemoryError, ...
                what = "" if isinstance(exc, BatchUnavailable) else f"{type(exc).__name__}: "
                why = f"{what}{exc}"
                self.limits = None
                if isinstance(exc, LibraryError) or isinstance(exc.__cause__, LibraryError):
                    tries = tries[:k]  # a missing symbol: no smaller size can help
                    break
                log.warning(
                    "llamabatch: try %d of %d: a batch context of %d sequences x %d tokens "
                    "could not be created: %s",
                    k,
                    len(tries),
                    slots,
                    n_ctx_seq,
                    why,
                )
        if self.limits is None:
            last = tries[-1]
            self._disable(
                f"the batch context could not be created ({len(tries)} "
                f"tr{'ies' if len(tries) > 1 else 'y'}, down to {last[0]} sequences x "
                f"{last[1]} tokens): {why}"
            )
            return False
        lim = self.limits
        self.stats.batch_slots, self.stats.batch_n_ctx_seq = lim.n_seq_max, lim.n_ctx_seq
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
        """Open the batch context now (else it opens when two valid items wait); if it
        cannot be created, fewer slots are tried (not a shorter ``n_ctx_seq``: no item
        is known yet).

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
            labels = reason == LABELS_TOO_LONG_FOR_A_SLOT
            log.warning(
                "llamabatch: items are completed alone because %s (n_ctx_seq=%d "
                "allocated, max_tokens=%d): raise n_ctx_seq or %s to batch them",
                reason,
                n_ctx_seq,
                self.config.max_tokens,
                "shorten the labels" if labels else "lower max_tokens",
            )
        counts[reason] = counts.get(reason, 0) + 1

    def need(self, item: Item, score: ScoreJob | None = None) -> int:
        """Tokens ``item`` needs from a context: ``n_prompt + budget``; with label scores
        (``score``), the prompt tokens kept plus the longest label's tokens (the longest
        continuation path; like a reply's last token, its last token is never decoded)."""
        if score is None:
            return item.n_prompt_tokens + self.budget(item)
        return max(c.n_keep + len(c.tokens) for c in score.conts)

    def fits(self, item: Item, score: ScoreJob | None = None) -> bool:
        """True when ``item`` can run in a slot (:meth:`need` ``<= n_ctx_seq``, the
        allocated size once the context is open, the requested one before)."""
        if item.error is not None:
            return False
        n_ctx_seq = self.limits.n_ctx_seq if self.limits else self.config.n_ctx_seq
        return self.need(item, score) <= n_ctx_seq

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
        self._retry.clear()
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
                queue.extend(self.samples.expand(item))  # the n replies of its prompt

        try:
            while True:
                with hold():
                    done = self._step(queue, pull)
                if done is None:
                    return
                done = self.samples.merge(done)
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
                self._open(self._longest_need(queue))
            engine = self.engine
        if self._retry:  # the items in flight at a failure, alone, one per turn
            return [self.run_alone(self._retry.popleft())]
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
                continue
            score = self._score_job(item)
            if isinstance(score, str):
                done.append(self._error(item, score))
            elif not self.fits(item, score):
                too_long = TOO_LONG_FOR_A_SLOT if score is None else LABELS_TOO_LONG_FOR_A_SLOT
                self._alone_because(too_long)
                done.append(self.run_alone(item))
                return done
            else:
                if score is not None and not self.capabilities.can_score:
                    done.append(self.run_alone(item))  # fails there, naming the backend
                    return done
                try:
                    engine.place(item, self.reply(item), score)
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

    def _longest_need(self, queue: deque[Item]) -> int | None:
        """Slot tokens (:meth:`need`) of the longest waiting item that fits a slot of
        the requested size; ``None`` when none does."""
        needs = []
        for it in queue:
            score = self._score_job(it) if it.error is None else "error"
            if not isinstance(score, str):
                needs.append(self.need(it, score))
        fitting = [n for n in needs if n <= self.config.n_ctx_seq]
        return max(fitting) if fitting else None

    def _fail(self, exc: BatchFailed, queue: deque[Item]) -> list[Completion]:
        """Empty every cache; the items in flight are each completed alone once
        (:attr:`_retry`); after ``max_batch_failures`` in a row, batching is off."""
        engine = self.engine
        n = len(engine.running) if engine is not None else 0
        items = engine.reset() if engine is not None else []
        self._retry.extend(items)
        self.stats.batch_failures += 1
        self.stats.items_retried += len(items)
        self.stats.last_batch_failure = reason = f"{exc.reason} (with {n} sequence(s) running)"
        if exc.counts:
            self._failures += 1
        if self._failures >= self.max_batch_failures:
            self._disable(
                f"{self._failures} failure{'s' * (self._failures != 1)} of the batch path "
                f"in a row (max_batch_failures={self.max_batch_failures}); the last: {reason}"
            )
        else:
            log.warning(
                "llamabatch: the batch path failed (%d in a row of max_batch_failures=%d): "
                "%s; the %d item(s) in flight are completed alone, batching goes on",
                self._failures,
                self.max_batch_failures,
                reason,
                len(items),
            )
        return []

    # -- one at a time -----------------------------------------------------------------
    def run_alone(self, item: Item) -> Completion:
        """Complete one item outside the batch context; failures become its error."""
        if item.error is not None:
            return self._error(item, item.error)
        if item.sampling.scores_labels:
            return self._score_alone(item)
        reply = self.reply(item)
        take = self._logprobs_taker(item)
        tokens: Iterator[int] = iter(())
        try:
            tokens = self.backend.generate_alone(item.tokens, item.sampling)
            for token in tokens:
                if reply.add(token, take()[0] if take is not None else None):
                    break
        except GrammarDeadEnd as exc:
            return self._error(item, dead_end_message(exc, reply))
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

    # -- label scores ------------------------------------------------------------------
    def _score_job(self, item: Item) -> ScoreJob | str | None:
        """The item's :class:`~llamabatch.engine.scoring.ScoreJob` (``score_choices``),
        ``None`` when it samples a reply, or why its labels cannot be scored."""
        sampling = item.sampling
        if not sampling.scores_labels or sampling.choices is None:
            return None
        try:
            return job_for(
                item.tokens,
                item.text,
                sampling.choices,
                sampling.choice_leading_space,
                self.backend.tokenize,
                self._tails,
            )
        except (ValueError, BackendError) as exc:
            return f"cannot score the labels: {exc}"

    def _score_alone(self, item: Item) -> Completion:
        job = self._score_job(item)
        if isinstance(job, str):
            return self._error(item, job)
        if job is None:  # not a scored item: never called so
            return self._error(item, "no label scores were asked for")
        if not self.capabilities.can_score:
            return self._error(
                item,
                f"{type(self.backend).__name__} cannot score labels "
                "(BackendCapabilities.can_score is False)",
            )
        n_ctx = self.backend.n_ctx
        if self.need(item, job) > n_ctx:
            c = max(job.conts, key=lambda c: c.n_keep + len(c.tokens))
            return self._error(
                item,
                f"cannot score the labels: label {c.written!r} is {len(c.tokens)} tokens "
                f"after {c.n_keep} prompt tokens, {c.n_keep + len(c.tokens)} in all; the "
                f"model context holds n_ctx={n_ctx}: shorten the label or the prompt, or "
                "load the model with a larger n_ctx",
            )
        try:
            scores = score_alone(job, self.backend.score_alone)
        except (BackendError, ValueError) as exc:
            return self._error(item, f"failed even alone: {exc}")
        return self._scored(item, scores, "alone")

    def _scored(self, item: Item, scores: LabelScores, path: Path) -> Completion:
        self.stats.labels_scored += 1
        c = Completion(
            item.index,
            scores.label,
            scores.tokens,
            "stop",
            None,
            len(item.tokens),
            path,
            choice_logprobs=scores.logprobs,
            choice_probs=scores.probs,
        )
        return self.samples.note(item, c)

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
        s.generated_tokens += (
            c.n_tokens if c.samples is None else sum(len(x.token_ids) for x in c.samples)
        )
        s.items_failed += c.error is not None
        if c.path == "batch":
            s.items_batched += 1
        else:
            s.items_alone += 1

    def _batched(self, seq: Seq) -> Completion:
        if seq.error is not None:  # its own error (a grammar dead end): never counts
            item = seq.item
            c = Completion(item.index, "", (), "error", seq.error, item.n_prompt_tokens, "batch")
            return self.samples.note(item, c)
        self._failures = 0  # an item completed in the batch: the failures are not in a row
        if seq.score is not None:
            try:
                return self._scored(seq.item, seq.score.result(), "batch")
            except KeyError:
                return self._error(seq.item, "label scoring ended before every row was scored")
        return self._completion(seq.item, seq.reply, "batch")

    def _completion(self, item: Item, reply: StopRule, path: Path) -> Completion:
        if reply.finish_reason == "length":
            cut = cut_off_choice(item.sampling.choices, reply.text, len(reply.token_ids))
            if cut is not None:
                c = Completion(item.index, "", (), "error", cut, len(item.tokens), path)
                return self.samples.note(item, c)
        logprobs = tuple(reply.logprobs) if item.sampling.logprobs is not None else None
        c = Completion(
            item.index,
            reply.text,
            tuple(reply.token_ids),
            reply.finish_reason or "length",  # finished: never None here
            None,
            len(item.tokens),
            path,
            logprobs,
        )
        return self.samples.note(item, c)

    def _error(self, item: Item, message: str) -> Completion:
        c = Completion(item.index, "", (), "error", message, item.n_prompt_tokens, "alone")
        return self.samples.note(item, c)

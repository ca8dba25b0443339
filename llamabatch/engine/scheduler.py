"""The scheduler: which requests go to the slot engine, which are completed alone, and
the fallback to one at a time.

:meth:`Scheduler.add` takes requests, :meth:`Scheduler.step` runs one step and returns
the completions that ended, in the order they finish (the generator reads its input while
:attr:`Scheduler.wants` more and puts them back in input order), whatever fails:

- a request whose prompt is an error completes as that error, at once;
- a request that does not fit a slot (:meth:`Request.need` > ``n_ctx_seq``) is completed
  alone through the backend's one-at-a-time path, in its place;
- the others run in the :class:`~llamabatch.engine.slot_engine.SlotEngine`; the batch
  context is opened once two valid requests wait. If it cannot be created it is tried
  smaller (:func:`smaller_tries`), one log line per try; if no size works, batching is off.
- failure isolation: when a backend call of the batch path fails, every cache is emptied
  and the requests in flight are each completed alone once; batching goes on. After
  ``max_batch_failures`` such failures with no item completed in the batch in between,
  batching is turned off for good (``Stats.batch_disabled_reason``). A grammar error is
  the item's own error and never counts.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import fields

from ..completion import Completion
from ..errors import BackendError, BatchUnavailable, GrammarError, LibraryError
from ..params import BatchConfig
from ..stats import Stats
from .backend import Backend, BackendInfo, BatchLimits
from .device_check import (
    CHECKS,
    DeviceCheck,
    SamplingCheck,
    check_device,
    check_sampling,
    probe_n_batch,
)
from .features import Features
from .request import MAX_CHAR_TAIL, Request
from .slot_engine import BatchFailed, EngineCounts, SlotEngine

log = logging.getLogger("llamabatch")


def smaller_tries(
    slots: int, n_ctx_seq: int, min_n_ctx_seq: int, max_n_ctx_seq: int | None = None
) -> list[tuple[int, int]]:
    """The sizes ``(slots, n_ctx_seq)`` to try, in order, when a batch context cannot be
    created: as asked; half the slots down to 2; then half ``n_ctx_seq`` (first cut to
    ``max_n_ctx_seq``, the most one item can use, when smaller) down to
    ``min_n_ctx_seq`` (the longest waiting item's need). ``slots < 2``: only as asked."""
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


#: How a sampling check that could not run begins its detail (it is not kept in CHECKS).
_COULD_NOT_RUN = "the check could not run"


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class Scheduler:
    """Runs requests on a backend, batched when it can, alone when it must, as ``config``
    says (its ``n_ctx_seq`` set). Its :attr:`stats` are written here alone, the slot
    engine's counts (:class:`~llamabatch.engine.slot_engine.EngineCounts`) after each step."""

    def __init__(self, backend: Backend, config: BatchConfig, info: BackendInfo | None = None):
        self.backend = backend
        self.info = backend.info if info is None else info
        self.vocab = backend.vocab
        if config.n_ctx_seq is None:
            raise ValueError("config.n_ctx_seq is None: give the tokens per sequence")
        if not isinstance(config.slots, int):
            raise ValueError(f"config.slots is {config.slots!r}: give a number of slots")
        self.slots = config.slots
        self.config, self.n_ctx_seq = config, config.n_ctx_seq
        self.stats = Stats()
        self.limits: BatchLimits | None = None
        self.engine: SlotEngine | None = None
        self.features = Features(self.vocab, self.info)
        self._open_tried = False
        self._host_sampling = False  # backend sampling not verified (_sampling_verdict)
        self._failures = 0  # failures of the batch path since an item completed in it
        self._queue: deque[Request] = deque()  # added, not started
        self._retry: deque[Request] = deque()  # requests in flight at a failure: alone, once
        self._refused: set[int] = set()  # completions (index) of requests refused unrun
        if self.slots < 2:
            self.stats.batch_disabled_reason = "slots=1: every item is completed alone"

    # -- the batch context ---------------------------------------------------------------
    def _disable(self, reason: str) -> None:
        log.warning("llamabatch: batching turned off, completing items one at a time: %s", reason)
        self.stats.batch_disabled_reason = reason

    def _open(self, min_n_ctx_seq: int | None = None) -> bool:
        """Create the batch context, smaller when it cannot be (:func:`smaller_tries`)."""
        if self.engine is not None:
            return True
        if self._open_tried or not self.stats.batching_enabled:
            return False
        self._open_tried = True
        cfg = self.config
        floor = self.n_ctx_seq if min_n_ctx_seq is None else min_n_ctx_seq
        tries = smaller_tries(self.slots, self.n_ctx_seq, floor, self.info.n_ctx)
        why = ""
        for k, (slots, n_ctx_seq) in enumerate(tries, 1):
            try:
                self.limits = self.backend.open(slots, n_ctx_seq, cfg.n_batch)
                break
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
        self.limits = self._device_agrees(self.limits, slots, n_ctx_seq)
        if self.limits is None:
            return False
        lim = self.limits
        self.stats.batch_slots, self.stats.batch_n_ctx_seq = lim.n_seq_max, lim.n_ctx_seq
        self.stats.kv_bytes = lim.kv_bytes
        log.info(
            "llamabatch: batch context of %d sequences x %d tokens (n_ctx_seq=%d "
            "requested), n_batch %d, n_ctx %d",
            lim.n_seq_max,
            lim.n_ctx_seq,
            self.n_ctx_seq,
            lim.n_batch,
            lim.n_ctx,
        )
        self.engine = SlotEngine(
            self.backend,
            lim,
            self.config.min_copy_tokens,
            self.config.cache_ram_mib << 20,
            self.info,
            self._host_sampling,
        )
        return True

    def _device_agrees(self, limits: BatchLimits, slots: int, n_ctx_seq: int) -> BatchLimits | None:
        """Run the device check where ``config.check_device`` asks (``None``: on a device) on
        a probe context of its own (the same sequences, :func:`probe_n_batch`), then open a
        fresh one of ``limits``' size for the engine (nothing of the probe's steps stays in
        it: caches, outputs, samplers). Backend sampling that needs verifying
        (``info.backend_sampling is None``) is checked first, on a context of its own
        (:meth:`_check_sampling`). A verdict
        made earlier in this process for the same ``info.compute_key`` and size is reused
        (:data:`~.device_check.CHECKS`) and ``limits`` kept. Its limits, or ``None`` with
        batching off and the backend closed when the device fails the check (or the fresh
        context cannot be made). A check that cannot run is no verdict on the logits but
        leaves them unverified: batching is off with that reason (``check_device=False``
        batches anyway)."""
        device, want = self.info.device, self.config.check_device
        run = (device is not None if want is None else want) and limits.n_seq_max >= 2
        why = "check_device=False" if want is False else "no GPU" if device is None else "1 slot"
        if run and not self.info.can_score:
            log.warning("llamabatch: check_device: this backend cannot score rows; not checked")
            run, why = False, "the backend cannot score rows"
        if not run:
            self._sampling_verdict(None, f"the device check did not run ({why})")
            return limits
        on = device or "the CPU"
        wants_sampling = self.info.backend_sampling is None
        key = self.info.compute_key
        memo = None if key is None else (key, slots, n_ctx_seq, self.config.n_batch)
        known = CHECKS.get(memo)
        reused = " (the check made earlier in this process)"
        if known is not None and (known[1] is not None or not wants_sampling or not known[0].ok):
            if not self._judge(*known, reused):
                self.backend.close()
                return None
            return limits
        if known is not None:  # the logits agree; only sampling is not known
            self.backend.close()
            verified = self._check_sampling(slots, n_ctx_seq)
            if not verified.detail.startswith(_COULD_NOT_RUN):
                CHECKS.put(memo, known[0], verified)
            self._judge(known[0], verified, reused)
            return self._reopen(slots, n_ctx_seq)
        self.backend.close()
        check, sampling = None, None
        try:
            if wants_sampling:
                sampling = self._check_sampling(slots, n_ctx_seq)
            probe = self.backend.open(slots, n_ctx_seq, probe_n_batch(slots, self.config.n_batch))
            check = check_device(self.backend, probe)
        except Exception as exc:  # noqa: BLE001 - it could not run: not a verdict on logits
            self.stats.device_check = (
                f"the device check could not run on {on} ({_said(exc)}); batched steps "
                "were not compared with one at a time"
            )
        finally:
            self.backend.close()
        if check is None:
            self._disable(
                f"{self.stats.device_check}, so batched replies are unverified: every item "
                "is completed alone (check_device=False batches anyway)"
            )
            return None
        if sampling is None or not sampling.detail.startswith(_COULD_NOT_RUN):
            CHECKS.put(memo, check, sampling)
        if not self._judge(check, sampling, ""):
            return None
        return self._reopen(slots, n_ctx_seq)

    def _reopen(self, slots: int, n_ctx_seq: int) -> BatchLimits | None:
        """The engine's context after the checks' own, or ``None`` with batching off."""
        try:
            return self.backend.open(slots, n_ctx_seq, self.config.n_batch)
        except Exception as exc:  # noqa: BLE001 - as a failed open
            self._disable(f"the batch context could not be created again: {exc}")
            return None

    def _judge(self, check: DeviceCheck, sampling: SamplingCheck | None, reused: str) -> bool:
        """Act on the verdicts (``reused``: said after them when made earlier): True when
        batching may go on; else it is off with the first failed step in the reason."""
        device = self.info.device
        self.stats.device_check = verdict = check.describe(device) + reused
        if not check.ok:
            self._disable(
                f"{verdict}. This device gives other logits to a sequence decoded beside "
                "others than alone, so batched replies would be wrong: every item is "
                "completed alone. Try flash attention on or off (Llama(flash_attn=...)), "
                "fewer slots, another backend or driver, or check_device=False to batch "
                "anyway"
            )
            return False
        log.info("llamabatch: %s", verdict)
        self._sampling_verdict(sampling, "the sampling check could not run")
        return True

    def _check_sampling(self, slots: int, n_ctx_seq: int) -> SamplingCheck:
        """:func:`check_sampling` on a context of the engine's own size (its ``n_batch``:
        backend sampling on the device check's small-``n_batch`` probe context crashed the
        software Vulkan device), its host pass on a fresh one, closed afterwards; a check
        that cannot run fails."""

        def reopen() -> BatchLimits:
            self.backend.close()
            return self.backend.open(slots, n_ctx_seq, self.config.n_batch)

        try:
            return check_sampling(
                self.backend, self.backend.open(slots, n_ctx_seq, self.config.n_batch), reopen
            )
        except Exception as exc:  # noqa: BLE001 - it could not run: not verified
            return SamplingCheck(False, f"{_COULD_NOT_RUN}: {_said(exc)}")
        finally:
            self.backend.close()

    def _sampling_verdict(self, check: SamplingCheck | None, unchecked: str) -> None:
        """Decide backend sampling (:attr:`BackendInfo.backend_sampling`): ``None`` is off
        where ``check`` failed, on where it passed or did not run (``unchecked`` says why: as
        asked, unverified); the outcome goes to ``Stats.backend_sampling`` and the log."""
        asked = self.info.backend_sampling
        if asked is False:
            if self.info.backend_sampling_off is not None:
                self.stats.backend_sampling = f"off: {self.info.backend_sampling_off}"
            return
        if asked is True:
            self.stats.backend_sampling = "on: asked for (backend_sampling=True), not verified"
            return
        self._host_sampling = check is not None and not check.ok
        if check is None:
            self.stats.backend_sampling = (
                f"on: asked for (backend_sampling=True), not verified: {unchecked}"
            )
            log.info("llamabatch: backend sampling %s", self.stats.backend_sampling)
        elif check.ok:
            self.stats.backend_sampling = f"on: {check.detail}"
            log.info("llamabatch: backend sampling %s", self.stats.backend_sampling)
        else:
            self.stats.backend_sampling = (
                f"off: {check.detail}; chains sample on the host (batching is not affected)"
            )
            log.warning("llamabatch: backend sampling %s", self.stats.backend_sampling)

    def open(self) -> BatchLimits | None:
        """Open the batch context now (else when two valid requests wait); its limits,
        or ``None`` when batching is off (the reason is in :attr:`stats`)."""
        return self.limits if self._open() else None

    @property
    def batching(self) -> bool:
        """True while the batch path may be used (it may not be open yet)."""
        return self.stats.batching_enabled

    # -- requests ------------------------------------------------------------------------
    def budget(self, req: Request) -> int:
        """Most tokens ``req`` may generate: its ``max_tokens`` (else the generator's),
        never more than the one-at-a-time context allows (a reply never depends on its
        path)."""
        cap = req.sampling.max_tokens or self.config.max_tokens
        return min(cap, self.info.n_ctx - len(req.prompt))

    def _alone_because(self, req: Request) -> None:
        """Count a request too long for a slot (:attr:`Request.too_long`: the reason and
        what the user can change); say so once per reason."""
        reason, remedy = req.too_long
        counts = self.stats.alone_reasons
        if reason not in counts:
            n_ctx_seq = self.limits.n_ctx_seq if self.limits else self.n_ctx_seq
            log.warning(
                "llamabatch: items are completed alone because %s (n_ctx_seq=%d "
                "allocated, max_tokens=%d): raise n_ctx_seq or %s to batch them",
                reason,
                n_ctx_seq,
                self.config.max_tokens,
                remedy,
            )
        counts[reason] = counts.get(reason, 0) + 1

    def fits(self, req: Request) -> bool:
        """True when ``req`` can run in a slot (:meth:`Request.need` <= ``n_ctx_seq``)."""
        if req.error is not None:
            return False
        n_ctx_seq = self.limits.n_ctx_seq if self.limits else self.n_ctx_seq
        return req.need() <= n_ctx_seq

    @property
    def wants(self) -> bool:
        """True when the next :meth:`step` could start a request beyond those added (add
        one and ask again): until two valid requests wait before the batch context is
        open, a free slot each after, one at a time alone."""
        if self._retry:
            return False
        engine, batching = self.engine, self.batching
        if engine is None and batching:
            return sum(r.error is None for r in self._queue) < 2
        if engine is None or not batching:
            return not self._queue
        free = engine.n_free
        if free <= 0:
            return False
        for r in self._queue:
            if r.error is None:
                if not self.fits(r) or (r.precise and not self.info.can_score):
                    return False  # completed alone next, which ends the step
                free -= 1
        return free > 0

    @property
    def finished(self) -> bool:
        """True when nothing added is left to run."""
        engine = self.engine
        return not (self._queue or self._retry or (engine is not None and engine.running))

    def add(self, req: Request) -> None:
        """Admit ``req`` (its features' requests, budgets and stop rule), to run in input
        order; the batch context is opened once two valid requests wait."""
        raw = getattr(self.vocab, "detokenize_bytes", None)  # optional (Vocab)
        for r in self.features.expand(req) if _featured(req) else (req,):
            r.max_tokens = self.budget(r)
            if raw is not None:  # tokens that may finish a character, within the context
                room = self.info.n_ctx - len(r.prompt) - r.max_tokens
                r.max_tail = max(0, min(MAX_CHAR_TAIL, room))
            r.bind(self.vocab.detokenize, self.vocab.eog_ids, raw)
            self._queue.append(r)
        if self.engine is None and self.batching:
            if sum(r.error is None for r in self._queue) >= 2:
                self._open(self._longest_need())

    def step(self) -> list[Completion]:
        """One step: what fits starts, one request alone or one batch step runs; the
        completions that ended (in the order they finished)."""
        try:
            done = self._step()
        finally:
            if self.engine is not None:
                self._add_counts(self.engine.take_counts())
        if all(r.group is None for r in done):  # no reply of n > 1 among them
            return [r.result() for r in done]
        return self.features.merge(done)

    def end(self) -> None:
        """End a run: forget what waits, give the caller's ``Llama`` back and stop what
        runs (caches kept, emptied if a call was interrupted)."""
        self._queue.clear()
        self._retry.clear()
        self.release_alone()
        engine = self.engine
        if engine is None:
            return
        if engine.dirty:  # interrupted inside a backend call
            engine.reset()
        else:
            engine.release()  # stopped early: caches stay valid

    def release_alone(self) -> None:
        """Give the caller's ``Llama`` back as it was (``Backend.release_alone``)."""
        self.backend.release_alone()

    def _step(self) -> list[Request]:
        engine, queue = self.engine, self._queue
        if self._retry:  # the requests in flight at a failure, alone, one per turn
            return [self.run_alone(self._retry.popleft())]
        if engine is None or not self.batching:
            return [self.run_alone(queue.popleft())] if queue else []
        done: list[Request] = []
        while engine.n_free and queue:
            req = queue.popleft()
            if req.error is not None:
                self._refuse(req)
                done.append(req)
            elif not self.fits(req):
                if req.need() <= self.info.n_ctx:  # else refused there
                    self._alone_because(req)
                done.append(self.run_alone(req))
                return done
            elif req.precise and not self.info.can_score:
                done.append(self.run_alone(req))  # fails there, naming the backend
                return done
            else:
                n_ctx_seq = self.limits.n_ctx_seq if self.limits else self.n_ctx_seq
                req.max_tail = min(req.max_tail, n_ctx_seq - req.need())  # the slot's room
                try:
                    engine.place(req)
                except GrammarError as exc:  # the request's own error; batching goes on
                    req.fail(str(exc))
                    self._refuse(req)
                    done.append(req)
                except BatchFailed as exc:
                    return done + self._fail(exc)
        if not engine.running:
            return done
        try:
            finished = engine.step()
        except BatchFailed as exc:
            return done + self._fail(exc)
        if finished and any(r.error is None for r in finished):
            self._failures = 0  # an item completed in the batch: the failures are not in a row
        return done + finished

    def _add_counts(self, counts: EngineCounts) -> None:
        """Add what the slot engine did to :attr:`stats` (their one writer is the scheduler)."""
        s = self.stats
        for name in _ENGINE_COUNTS:
            setattr(s, name, getattr(s, name) + getattr(counts, name))

    def _longest_need(self) -> int | None:
        """The longest need of a waiting request that fits a slot, or ``None``."""
        needs = [r.need() for r in self._queue if r.error is None]
        fitting = [n for n in needs if n <= self.n_ctx_seq]
        return max(fitting) if fitting else None

    def _fail(self, exc: BatchFailed) -> list[Request]:
        """Empty every cache; the requests in flight go alone once; after
        ``max_batch_failures`` in a row, batching is off."""
        engine = self.engine
        n = len(engine.running) if engine is not None else 0
        reqs = engine.reset() if engine is not None else []
        for req in reqs:
            req.reset()  # its reply so far is dropped: it starts again alone
        self._retry.extend(reqs)
        self.stats.batch_failures += 1
        self.stats.items_retried += len(reqs)
        self.stats.last_batch_failure = reason = f"{exc.reason} (with {n} sequence(s) running)"
        if exc.counts:
            self._failures += 1
        if self._failures >= self.config.max_batch_failures:
            self._disable(
                f"{self._failures} failure{'s' * (self._failures != 1)} of the batch path "
                f"in a row (max_batch_failures={self.config.max_batch_failures}); "
                f"the last: {reason}"
            )
        else:
            log.warning(
                "llamabatch: the batch path failed (%d in a row of max_batch_failures=%d): "
                "%s; the %d item(s) in flight are completed alone, batching goes on",
                self._failures,
                self.config.max_batch_failures,
                reason,
                len(reqs),
            )
        return []

    # -- one at a time -------------------------------------------------------------------
    def run_alone(self, req: Request) -> Request:
        """Complete ``req`` outside the batch context; failures become its error."""
        if req.error is not None:
            self._refuse(req)
            return req
        if req.need() > self.info.n_ctx:
            req.fail(req.too_long_for(self.info.n_ctx))
            self._refuse(req)
            return req
        if req.precise and not self.info.can_score:
            req.fail(
                f"{type(self.backend).__name__} cannot score labels "
                "(BackendInfo.can_score is False)"
            )
            self._refuse(req)
            return req
        ran = False  # the backend gave an output: the prompt was decoded
        try:
            while (job := req.alone_job()) is not None:
                stream = self.backend.run_alone(*job)
                try:
                    samples = job[1] is not None  # else one output holds the scores
                    for out in stream:
                        ran = True
                        req.take(out, None, ())
                        if req.finished or not samples:
                            break
                    else:
                        if samples:
                            req.fail("the backend stopped generating without a reason")
                finally:
                    close = getattr(stream, "close", None)
                    if close is not None:
                        close()
        except GrammarError as exc:
            req.fail(str(exc))
        except RecursionError as exc:  # an input nested beyond Python's limit
            req.fail(f"failed even alone: {type(exc).__name__}: {exc}")
        except (BackendError, ValueError) as exc:
            req.fail(f"failed even alone: {exc}")
        if not ran and req.error is not None:  # e.g. a grammar or a prompt the backend refused
            self._refuse(req)
        return req

    def _refuse(self, req: Request) -> None:
        """Note that ``req`` ended with its error before any of its prompt ran: its completion
        is counted under :attr:`Request.refused`, its prompt tokens are not (:meth:`count`)."""
        self._refused.add(req.index if req.group is None else req.group)

    # -- results -------------------------------------------------------------------------
    def begin(self) -> None:
        """Start a run: forget what an earlier run stopped early noted for completions it never
        gave back (their indices are used again)."""
        self._refused.clear()

    def count(self, given: list[Completion]) -> None:
        """Add completions given back to the caller to :attr:`stats`; one refused before it
        ran (:meth:`_refuse`) counts in ``items_alone`` under the ``alone_reasons`` key
        :attr:`Request.refused`, and its prompt in no ``prompt_tokens``."""
        s = self.stats
        for c in given:
            if c.index in self._refused and c.path == "alone":
                self._refused.discard(c.index)
                s.alone_reasons[Request.refused] = s.alone_reasons.get(Request.refused, 0) + 1
            else:
                s.prompt_tokens += c.n_prompt_tokens
            s.generated_tokens += c.completion_tokens
            s.items_failed += c.error is not None
            s.labels_scored += c.choice_logprobs is not None
            s.items_batched += c.path == "batch"
            s.items_alone += c.path != "batch"


#: The :class:`~llamabatch.stats.Stats` fields the slot engine counts.
_ENGINE_COUNTS = tuple(f.name for f in fields(EngineCounts))


def _featured(req: Request) -> bool:
    """A feature turns ``req`` into other requests (``n`` > 1, label or prompt scores)."""
    s = req.sampling
    return req.error is None and (s.n > 1 or s.scores_labels or s.score_prompt)

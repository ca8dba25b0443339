"""The slot engine: sequences in slots that keep their cache, refilled as they end.

Pure Python over a :class:`~llamabatch.engine.backend.Backend`. :meth:`SlotEngine.place` puts
an item in the free slot whose cache shares the most with its prompt (trimming the
rest), or copies a longer shared prefix from another slot (:mod:`llamabatch.engine.slots`);
:meth:`SlotEngine.step` runs one ``llama_decode`` mixing the running sequences' decode
tokens with prompt chunks (:func:`llamabatch.engine.plan.plan_step`) and returns the
sequences that ended. Every sampled token goes through the sequence's
:class:`llamabatch.engine.stop.StopRule` (EOG, stop ids, stop strings, length), as alone.

Any exception a backend call raises becomes :class:`BatchFailed`, but an
``AssertionError`` (a broken rule that a checking backend such as
:class:`~llamabatch.testing.FakeBackend` reports: a bug, not a failure) goes through; the caller
(:class:`~llamabatch.engine.scheduler.Scheduler`) then empties every cache with
:meth:`SlotEngine.reset` and completes the items in flight one at a time. A sequence
whose grammar reaches a dead end in a decode
(:class:`~llamabatch.engine.seq_errors.SampleErrors`) ends with its own error
(``Seq.error``); the others go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from ..completion import Stats
from ..errors import DecodeError, GrammarError, decode_meaning
from .backend import Backend, BackendCapabilities, BatchLimits, Span
from .features.labels import MIN_RUN, ScoreJob
from .host_cache import HostCache, SavedState
from .items import Item
from .plan import Decoding, Prefilling, plan_step
from .seq_errors import SampleErrors
from .slots import CopyPlan, Slot, SlotTable, common_prefix, reusable
from .stop import StopRule
from .ubatch import avoid_one_per_seq
from .window import window_holds


def dead_end_message(exc: Exception, reply: StopRule) -> str:
    """The error of an item whose grammar reached a dead end: what llama.cpp's grammar
    refused and where (after how many reply tokens, and their text)."""
    n = len(reply.token_ids)
    return f"{exc} (after {n} reply token{'s' * (n != 1)}: {reply.text!r}; nothing accepted)"


class BatchFailed(Exception):
    """A backend call of the batch path failed; ``reason`` says which and why.

    Attributes:
        counts: False when the failure is an item's own (a grammar error that no
            sequence could be blamed for): it costs the items in flight their retry
            alone but is not a failure of batching.
    """

    def __init__(self, reason: str, counts: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.counts = counts


class Status(IntEnum):
    """Where a sequence stands; ordered so ``status >= FINISHED`` means done."""

    COPY = 0  # waiting for another slot to hold the prefix it will copy
    PREFILL = 1
    DECODE = 2
    FINISHED = 3


@dataclass(slots=True)
class Seq:
    """One item running in a slot.

    Attributes:
        reply: the stop rule and the reply so far (its last token is the next one to
            decode while the sequence is decoding).
        fed: prompt tokens in the slot's cache (reused, copied or prefilled).
        breaks: prompt lengths at which a prefill call must stop, so that another
            slot can copy the cache exactly there (recurrent models only).
        score: label scoring (``SamplingParams.score_choices``): the rows to score;
            the sequence samples nothing and ends once every row is scored.
        followers: sequences waiting (``Status.COPY``, no ``copy``) to sample their
            first token from this sequence's last prompt row and copy its cache then
            (the ``n`` replies of one prompt, :mod:`llamabatch.engine.features.samples`).
    """

    item: Item
    slot: Slot
    reply: StopRule
    fed: int = 0
    copy: CopyPlan | None = None
    status: Status = Status.PREFILL
    breaks: set[int] = field(default_factory=set)
    error: str | None = None  # its own error (a grammar dead end): it ended with it
    score: ScoreJob | None = None
    followers: list[Seq] = field(default_factory=list)
    snapshot: tuple[Any, list[int]] | None = None  # (state, its tokens): recurrent scoring

    @property
    def tokens(self) -> list[int]:
        return self.item.tokens


def _guard(
    what: str,
    fn: Callable[..., Any],
    *args: Any,
    passthrough: type[Exception] | tuple[type[Exception], ...] = (),
) -> Any:
    """Call a backend method; any exception but ``passthrough`` and ``AssertionError``
    becomes :class:`BatchFailed`."""
    try:
        return fn(*args)
    except AssertionError:  # a broken rule (FakeBackendViolation): a bug, not a failure
        raise
    except passthrough:
        raise
    except GrammarError as exc:  # an item's own error, but whose is unknown here
        raise BatchFailed(f"{what} raised GrammarError: {exc}", counts=False) from exc
    except DecodeError as exc:
        raise BatchFailed(
            f"llama_decode returned {exc.code} "
            f"({decode_meaning(exc.code) if exc.code is not None else 'no code'}): {exc}"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - MemoryError, library errors: any failure
        raise BatchFailed(f"{what} raised {type(exc).__name__}: {exc}") from exc


class SlotEngine:
    """Runs items in the slots of an open batch context.

    Args:
        backend: a backend whose batch context is open.
        limits: what ``open_batch`` returned.
        stats: counters to update (cache reuse, copies, decode calls).
        min_copy_tokens: copy another slot's cache (or load a saved state) only when
            it saves at least this many more prompt tokens than the slot's own cache
            (>= 1); a slot holding fewer tokens than this is never saved.
        cache_ram_bytes: most bytes of sequence states kept in host memory
            (:class:`~llamabatch.engine.host_cache.HostCache`); 0 keeps none. Used only when
            the backend can copy and save (``capabilities.can_copy`` and ``can_save``).
        capabilities: what the backend can do (default: ``backend.capabilities()``).

    Attributes:
        exact: True once the memory is known to refuse trims to a position > 0
            (``capabilities.partial_trim`` False, or a refused trim): caches are then only
            reused up to their very end.
        n_swa: the model's sliding window (``capabilities.n_swa``; 0 without one): a
            cache is cut back to a prefix only where its window layers still
            hold that prefix's end (``backend.seq_pos_min``,
            :func:`~llamabatch.engine.window.window_holds`); else it is prefilled again.
        dirty: True while a backend call that changes caches is in progress (an
            exception escaping it leaves the caches unknown: :meth:`reset`).
    """

    def __init__(
        self,
        backend: Backend,
        limits: BatchLimits,
        stats: Stats,
        min_copy_tokens: int = 32,
        cache_ram_bytes: int = 0,
        capabilities: BackendCapabilities | None = None,
    ) -> None:
        self.backend, self.limits, self.stats = backend, limits, stats
        caps = backend.capabilities() if capabilities is None else capabilities
        self.table = SlotTable(limits.n_seq_max)
        self.min_copy_tokens = max(1, min_copy_tokens)
        if not caps.can_copy:  # no llama_state_seq_* here
            self.min_copy_tokens = limits.n_ctx_seq + 1
        self.can_save = can_save = caps.can_copy and caps.can_save
        self.n_swa = max(0, caps.n_swa)
        self.can_share_rows = caps.can_share_rows
        self.host = HostCache(cache_ram_bytes if can_save else 0, self.n_swa)
        self.exact = not caps.partial_trim
        self.running: dict[int, Seq] = {}  # seq id -> Seq, in placement order
        self.dirty = False
        self._n_waiting = 0  # sequences in Status.COPY
        self._rotate = 0

    # -- state -------------------------------------------------------------------------
    @property
    def has_free_slot(self) -> bool:
        return len(self.running) < len(self.table)

    def in_flight(self) -> list[Item]:
        """The items running now, in input order."""
        return sorted((s.item for s in self.running.values()), key=lambda it: it.index)

    def release(self) -> list[Item]:
        """Stop every running item (a run ends early); the caches stay valid for reuse.

        Returns:
            the items that were running, in input order.
        """
        items = self.in_flight()
        for seq in self.running.values():
            seq.slot.busy = False
        self.running.clear()
        self._n_waiting = 0
        return items

    def reset(self) -> list[Item]:
        """Empty every cache (after a failure or an interruption) and forget them.

        Returns:
            the items that were running, in input order.
        """
        items = self.release()
        self.table.forget_all()
        self.host.clear()
        self.dirty = False
        try:
            self.backend.clear()
        except AssertionError:  # a broken rule: a bug to report, not a failure
            raise
        except Exception:  # noqa: BLE001 - nothing more to do; the table forgot them
            pass
        return items

    # -- placing an item ---------------------------------------------------------------
    def place(self, item: Item, reply: StopRule, score: ScoreJob | None = None) -> None:
        """Start ``item`` (tokens that fit a slot) in the free slot that suits it best.

        With ``score``, the item's labels are scored instead of a reply sampled
        (:mod:`llamabatch.engine.features.labels`). A later reply of a prompt already
        prefilling here (``item.sample`` > 0, same ``index``) shares its prefill when
        the backend can (``can_share_rows``).

        Raises:
            GrammarError: llama.cpp refused the item's grammar (the item's own error;
                no slot was taken, every cache stays valid).
            BatchFailed: a backend call failed.
            ValueError: no slot is free.
        """
        best = self.table.best_free(item.tokens, self._holds)
        if best is None:
            raise ValueError("no free slot: check has_free_slot first")
        slot, n_own = best
        slot.busy = True
        seq = Seq(item, slot, reply, score=score)
        self.running[slot.seq_id] = seq  # from here a failure hands the item back
        try:
            _guard(
                "start_seq",
                self.backend.start_seq,
                slot.seq_id,
                item.sampling,
                passthrough=GrammarError,
            )
        except GrammarError:  # start_seq changes no cache
            del self.running[slot.seq_id]
            slot.busy = False
            raise
        leader = self._leader_for(seq)
        if leader is not None:  # samples its first token from the leader's last row
            seq.status = Status.COPY
            leader.followers.append(seq)
            return
        if score is not None and not self._snapshots(seq):  # the first label run in the prefill
            score.fold()
        planned: dict[int, Sequence[int]] = {
            sid: s.tokens
            for sid, s in self.running.items()
            if s.status == Status.PREFILL and s is not seq
        }
        waiting = {sid for sid, s in self.running.items() if s.status == Status.COPY}
        for sid in waiting:
            planned[sid] = ()  # its cache is not its own yet: no source
        copy = self.table.copy_source(
            item.tokens, slot, n_own, planned, self.min_copy_tokens, self.exact, self._holds
        )
        saved = self._saved_for(item.tokens, n_own)
        if saved is not None and copy is not None and saved[1] < copy.n_tokens:
            saved = None  # the other slot shares more
        own_kept = saved is None and copy is None
        self._save(slot, n_own if own_kept else 0)  # before its cache is cut or replaced
        if saved is not None:
            self._load(seq, *saved)
            return
        if copy is None:
            self._keep(seq, n_own)
            return
        seq.copy, seq.status = copy, Status.COPY
        src = self.running.get(copy.src)
        if self.exact and src is not None:
            src.breaks.add(copy.n_tokens)
        if not self._try_copy(seq):
            self._n_waiting += 1

    # -- sliding windows ---------------------------------------------------------------
    def _pos_min(self, seq_id: int) -> int | None:
        """The backend's ``seq_pos_min(seq_id)`` (oldest position held in every layer),
        ``None`` when it cannot tell or the query failed."""
        try:
            value = self.backend.seq_pos_min(seq_id)
        except AssertionError:  # a broken rule: a bug to report, not a failure
            raise
        except Exception:  # noqa: BLE001 - an unknown window only costs a prefill
            return None
        return None if value is None else int(value)

    def _holds(self, slot: Slot, n: int) -> bool:
        """``slot``'s cache can be cut back to its first ``n`` tokens and decoded on."""
        if self.n_swa <= 0 or n <= 0 or n >= len(slot.cached):
            return True
        return window_holds(n, len(slot.cached), self._pos_min(slot.seq_id), self.n_swa)

    # -- host memory -------------------------------------------------------------------
    def _saved_for(self, prompt: list[int], n_own: int) -> tuple[SavedState, int] | None:
        """A saved state worth loading for ``prompt`` (it saves at least
        ``min_copy_tokens`` more than the slot's own cache), and its shared length."""
        if not self.host.enabled or not self.host:
            return None
        found = self.host.best(prompt, self.exact)
        if found is None or found[1] - n_own < self.min_copy_tokens:
            return None
        return found

    def _save(self, slot: Slot, n_keep: int) -> None:
        """Save ``slot``'s state before all but its first ``n_keep`` tokens are thrown
        away, when that is less than half of it (llama-server's ``f_keep < 0.5``)."""
        n = len(slot.cached)
        if (
            not self.host.enabled
            or n < self.min_copy_tokens
            or 2 * n_keep >= n
            or self.host.covers(slot.cached)
        ):
            return
        pos_min = self._pos_min(slot.seq_id) if self.n_swa > 0 else 0
        state = _guard("save_seq", self.backend.save_seq, slot.seq_id)
        if self.host.add(slot.cached, state, len(state), pos_min):
            self.stats.cache_ram_saves += 1

    def _load(self, seq: Seq, saved: SavedState, n: int) -> None:
        """Load ``saved`` into ``seq``'s slot and keep its first ``n`` tokens."""
        slot = seq.slot
        self.dirty = True
        _guard("load_seq", self.backend.load_seq, slot.seq_id, saved.state)
        self.dirty = False
        slot.cached[:] = saved.tokens
        self.stats.cache_ram_loads += 1
        self._keep(seq, n)

    def _keep(self, seq: Seq, n: int) -> None:
        """Keep the first ``n`` cached tokens of ``seq``'s slot and prefill the rest."""
        slot = seq.slot
        if seq.score is not None:  # its last row is scored in a run of MIN_RUN tokens
            folded = len(seq.score.goal) - len(seq.tokens)  # a first run after it
            n = min(n, max(0, len(seq.tokens) - max(1, MIN_RUN - folded)))
            if not self._holds(slot, n):  # cut further back than the window was asked
                n = 0
        if n < len(slot.cached):
            ok = False
            if n > 0 and not self.exact:
                ok = self._trim(slot, n)
                if not ok:
                    self._learn_exact()
            if not ok:
                n = 0
                if not self._trim(slot, 0):
                    raise BatchFailed(f"the cache of seq {slot.seq_id} could not be emptied")
            del slot.cached[n:]
        seq.fed, seq.status = n, Status.PREFILL
        self.stats.prompt_tokens_cached += n

    def _learn_exact(self) -> None:
        """The memory cannot be cut back (a recurrent / hybrid one, learned from a refused
        trim): from now on prefixes are reused whole, and a scoring sequence still prefilling
        its prompt is unfolded, so that its snapshot holds the prompt alone."""
        self.exact = True
        for seq in self.running.values():
            if seq.score is not None and seq.fed < len(seq.tokens):
                seq.score.goal = list(seq.tokens)

    def _trim(self, slot: Slot, n: int) -> bool:
        self.dirty = True
        ok = bool(_guard("trim", self.backend.trim, slot.seq_id, n))
        self.dirty = False
        return ok

    def _try_copy(self, seq: Seq) -> bool:
        """Copy the source's cache into ``seq``'s slot if it holds the prefix now."""
        plan, dst = seq.copy, seq.slot
        if plan is None:  # placed by _keep meanwhile: nothing to copy
            return True
        src = self.table.slots[plan.src]
        have = len(src.cached)
        if have < plan.n_tokens:
            return False
        if src.cached[: plan.n_tokens] != seq.tokens[: plan.n_tokens]:
            seq.copy = None  # the source moved on (label scoring): prefill instead
            self._keep(seq, reusable(dst.cached, seq.tokens))
            return True
        if self.exact and have > plan.n_tokens:  # cannot cut back: prefill instead
            seq.copy = None
            self._keep(seq, 0)
            return True
        if not self._holds(src, plan.n_tokens):  # its window moved on: own cache only
            seq.copy = None
            n_own = reusable(dst.cached, seq.tokens)
            self._keep(seq, n_own if self._holds(dst, n_own) else 0)
            return True
        self.dirty = True
        _guard("copy_seq", self.backend.copy_seq, src.seq_id, dst.seq_id)
        self.dirty = False
        dst.cached[:] = src.cached
        self.stats.prefix_copies += 1
        seq.copy = None
        self._keep(seq, plan.n_tokens)
        return True

    # -- one decode --------------------------------------------------------------------
    def step(self) -> list[Seq]:
        """One ``llama_decode`` of the running sequences.

        Returns:
            the sequences that ended in it (their slots are free again).

        Raises:
            BatchFailed: a backend call failed (call :meth:`reset`).
        """
        spans = self._plan()
        self.dirty = True
        dead: dict[int, GrammarError] = {}
        try:
            sampled = _guard("decode", self.backend.decode, spans, passthrough=SampleErrors)
        except SampleErrors as exc:  # decoded; some sequences' grammars are dead ends
            sampled, dead = exc.sampled, exc.errors
        n_logits = sum(span.logits + len(span.share) for span in spans)
        if not isinstance(sampled, list) or len(sampled) != n_logits:
            raise BatchFailed(f"decode returned {sampled!r} for {n_logits} sequences")
        if dead or None in sampled:  # each missing token must be a dead end, and only those
            rows = [sid for span in spans if span.logits for sid in (span.seq_id, *span.share)]
            wrong = [sid for sid, t in zip(rows, sampled) if (t is None) != (sid in dead)]
            if wrong:
                raise BatchFailed(f"decode returned no token for seq(s) {wrong} without an error")
        self.stats.decode_calls += 1
        it = iter(zip(sampled, self._logprobs(spans, n_logits)))
        scoring = any(s.score is not None for s in self.running.values())
        scores = iter(self._scores(spans) if scoring else ())
        shared: list[tuple[Seq, Seq]] = []
        for span in spans:
            seq = self.running[span.seq_id]
            if span.targets is not None and seq.score is not None:
                record = seq.score.record
                _guard(
                    "take_scores",
                    record,
                    seq.slot.cached,
                    span.pos,
                    span.tokens,
                    span.targets,
                    next(scores, ()),
                )
            seq.slot.cached.extend(span.tokens)
            if seq.status == Status.PREFILL:
                n = min(len(span.tokens), len(seq.tokens) - seq.fed)
                seq.fed += n
                self.stats.prompt_tokens_prefilled += n
                self.stats.label_tokens_decoded += len(span.tokens) - n
                seq.breaks.discard(seq.fed)
            if span.logits:
                token, logprobs = next(it)
                if token is None:
                    seq.error = dead_end_message(dead[span.seq_id], seq.reply)
                    seq.status = Status.FINISHED
                else:
                    reason = seq.reply.add(token, logprobs)
                    seq.status = Status.DECODE if reason is None else Status.FINISHED
                for sid in span.share:
                    follower = self.running[sid]
                    token, logprobs = next(it)
                    if token is None:  # the same row and grammar: the same dead end
                        follower.error = dead_end_message(dead[sid], follower.reply)
                        follower.status = Status.FINISHED
                        continue
                    reason = follower.reply.add(token, logprobs)
                    follower.status = Status.DECODE if reason is None else Status.FINISHED
                    shared.append((seq, follower))
        self.dirty = False
        self._after_shares(shared)
        if scoring:
            for seq in [s for s in self.running.values() if s.score is not None]:
                self._advance_score(seq)
        if self._n_waiting:  # running is in placement order (a dict)
            waiting = [s for s in self.running.values() if s.status == Status.COPY]
            for seq in [s for s in waiting if s.copy is not None]:
                if self._try_copy(seq):
                    self._n_waiting -= 1
        done = [s for s in self.running.values() if s.status == Status.FINISHED]
        for seq in done:
            seq.slot.busy = False
            del self.running[seq.slot.seq_id]
        return done

    # -- shared prefills and label scores (engine/samples.py, engine/scoring.py) ------
    def _leader_for(self, seq: Seq) -> Seq | None:
        """The running sequence whose prefill ``seq`` (a later reply of the same prompt)
        can share: same item index and tokens, still prefilling, sampling a reply."""
        if seq.item.sample == 0 or seq.score is not None:
            return None
        if not self.can_share_rows:
            return None
        for other in self.running.values():
            if (
                other is not seq
                and other.item.index == seq.item.index
                and other.status == Status.PREFILL
                and other.score is None
                and other.tokens == seq.tokens
            ):
                return other
        return None

    def _after_shares(self, shared: list[tuple[Seq, Seq]]) -> None:
        """Give each follower that sampled from its leader's row a copy of the leader's
        cache (the prompt), so that it decodes on from there."""
        for leader, seq in shared:
            if seq.status == Status.FINISHED:
                continue  # its first token ended it: its cache is not needed
            self._save(seq.slot, 0)
            self.dirty = True
            _guard("copy_seq", self.backend.copy_seq, leader.slot.seq_id, seq.slot.seq_id)
            self.dirty = False
            seq.slot.cached[:] = leader.slot.cached
            seq.fed = len(seq.tokens)
            self.stats.prefix_copies += 1
            self.stats.prompt_shares += 1
            self.stats.prompt_tokens_cached += len(seq.tokens)
        for leader, _ in shared:
            leader.followers.clear()

    def _scores(self, spans: list) -> list:
        """The backend's label scores of the spans with targets (``take_scores``)."""
        if not any(span.targets is not None for span in spans):
            return []
        return list(_guard("take_scores", self.backend.take_scores))

    def _snapshots(self, seq: Seq) -> bool:
        """A scoring sequence starts its label runs from a state snapshot of its prompt
        (``save_seq`` / ``load_seq``) instead of cutting its cache back: on a memory that
        cannot be cut back, and on a sliding-window model whose window a prompt of
        ``n_swa`` tokens or more fills (cut back, its window would have lost positions
        the next token attends to: :func:`~llamabatch.engine.window.window_holds`)."""
        window_bound = self.n_swa > 0 and len(seq.tokens) >= self.n_swa
        return self.can_save and (self.exact or window_bound)

    def _advance_score(self, seq: Seq) -> None:
        """Once a scoring sequence's cache holds its goal, start its next run (cutting
        the cache back) or end it when every row is scored."""
        job, slot = seq.score, seq.slot
        if job is None or seq.status != Status.PREFILL or seq.fed < len(seq.tokens):
            return
        if len(slot.cached) < len(job.goal):
            return
        if seq.snapshot is None and self._snapshots(seq):
            if not job.done:
                state = _guard("save_seq", self.backend.save_seq, slot.seq_id)
                seq.snapshot = (state, list(slot.cached))
        keep = job.next_run(slot.cached, 1 if seq.snapshot is not None else MIN_RUN)
        if keep is None:
            seq.status = Status.FINISHED
            return
        if keep >= len(slot.cached):
            return
        if not self.exact and self._holds(slot, keep):  # else: as if it could not be cut
            if self._trim(slot, keep):
                del slot.cached[keep:]
                return
            self._learn_exact()
        snapshot = seq.snapshot
        if snapshot is not None and len(snapshot[1]) <= keep:
            state, tokens = snapshot
            if common_prefix(tokens, job.goal) == len(tokens):
                self.dirty = True
                _guard("load_seq", self.backend.load_seq, slot.seq_id, state)
                self.dirty = False
                slot.cached[:] = tokens
                return
        if not self._trim(slot, 0):
            raise BatchFailed(f"the cache of seq {slot.seq_id} could not be emptied")
        slot.cached.clear()
        if snapshot is None and self._snapshots(seq):  # the prompt alone, to snapshot it
            job.goal = list(seq.tokens)

    def _logprobs(self, spans: list, n: int) -> list:
        """The backend's logprobs of the ``n`` tokens just sampled
        (``Backend.take_logprobs``), or ``None`` each when no sequence asked for them."""
        wanted = any(
            self.running[s.seq_id].item.sampling.logprobs is not None for s in spans if s.logits
        )
        if not wanted:
            return [None] * n
        taken = list(_guard("take_logprobs", self.backend.take_logprobs))
        return (taken + [None] * n)[:n]

    def _plan(self) -> list:
        seqs = self.running.values()
        decoding = [
            Decoding(s.slot.seq_id, len(s.slot.cached), s.reply.token_ids[-1])
            for s in seqs
            if s.status == Status.DECODE
        ]
        if len(decoding) > self.limits.n_batch:  # not all fit: take turns
            k = self._rotate % len(decoding)
            decoding = decoding[k:] + decoding[:k]
            self._rotate += self.limits.n_batch
        prefilling = []
        for s in seqs:
            if s.status != Status.PREFILL:
                continue
            if s.score is not None and s.fed >= len(s.tokens):  # a label run
                n = len(s.slot.cached)
                prefilling.append(Prefilling(s.slot.seq_id, n, s.score.goal[n:]))
                continue
            later = [b - s.fed for b in s.breaks if b > s.fed]
            tokens = s.tokens[s.fed :]
            if s.score is not None:  # the folded first label run goes on from the prompt
                tokens = tokens + s.score.goal[len(s.tokens) :]
            prefilling.append(
                Prefilling(s.slot.seq_id, s.fed, tokens, min(later) if later else None)
            )
        spans = plan_step(decoding, prefilling, self.limits.n_batch)
        spans = [self._special(span) for span in spans]
        scoring = {sid for sid, s in self.running.items() if s.score is not None}
        if scoring:  # no token of theirs decoded one per sequence (engine/ubatch.py)
            spans = avoid_one_per_seq(spans, scoring, {d.seq_id for d in decoding})
        if not spans:  # only copies waiting (cannot happen: their sources prefill)
            raise BatchFailed("nothing to decode: every running sequence waits for a copy")
        return spans

    def _special(self, span: Span) -> Span:
        """A scoring sequence's span gets its rows' targets instead of sampling logits;
        a leader's last prompt span names the followers that sample from its row."""
        seq = self.running[span.seq_id]
        if seq.score is not None:
            targets = seq.score.targets(seq.slot.cached, span.pos, span.tokens)
            return Span(span.seq_id, span.pos, span.tokens, False, targets)
        if span.logits and seq.followers:
            share = tuple(f.slot.seq_id for f in seq.followers)
            return Span(span.seq_id, span.pos, span.tokens, True, share=share)
        return span

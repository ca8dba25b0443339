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
:meth:`SlotEngine.reset` and completes the items in flight one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from ..completion import Stats
from ..errors import DecodeError, GrammarError, decode_meaning
from .backend import Backend, BackendCapabilities, BatchLimits
from .host_cache import HostCache, SavedState
from .items import Item
from .plan import Decoding, Prefilling, plan_step
from .slots import CopyPlan, Slot, SlotTable
from .stop import StopRule


class BatchFailed(Exception):
    """A backend call of the batch path failed; ``reason`` says which and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
    """

    item: Item
    slot: Slot
    reply: StopRule
    fed: int = 0
    copy: CopyPlan | None = None
    status: Status = Status.PREFILL
    breaks: set[int] = field(default_factory=set)

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
        can_save = caps.can_copy and caps.can_save
        self.host = HostCache(cache_ram_bytes if can_save else 0)
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
    def place(self, item: Item, reply: StopRule) -> None:
        """Start ``item`` (tokens that fit a slot) in the free slot that suits it best.

        Raises:
            GrammarError: llama.cpp refused the item's grammar (the item's own error;
                no slot was taken, every cache stays valid).
            BatchFailed: a backend call failed.
            ValueError: no slot is free.
        """
        best = self.table.best_free(item.tokens)
        if best is None:
            raise ValueError("no free slot: check has_free_slot first")
        slot, n_own = best
        slot.busy = True
        seq = Seq(item, slot, reply)
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
        planned: dict[int, Sequence[int]] = {
            sid: s.tokens
            for sid, s in self.running.items()
            if s.status == Status.PREFILL and s is not seq
        }
        waiting = {sid for sid, s in self.running.items() if s.status == Status.COPY}
        for sid in waiting:
            planned[sid] = ()  # its cache is not its own yet: no source
        copy = self.table.copy_source(
            item.tokens, slot, n_own, planned, self.min_copy_tokens, self.exact
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
        state = _guard("save_seq", self.backend.save_seq, slot.seq_id)
        if self.host.add(slot.cached, state, len(state)):
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
        if n < len(slot.cached):
            ok = False
            if n > 0 and not self.exact:
                ok = self._trim(slot, n)
                if not ok:
                    self.exact = True  # a recurrent / hybrid memory: learned now
            if not ok:
                n = 0
                if not self._trim(slot, 0):
                    raise BatchFailed(f"the cache of seq {slot.seq_id} could not be emptied")
            del slot.cached[n:]
        seq.fed, seq.status = n, Status.PREFILL
        self.stats.prompt_tokens_cached += n

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
        if self.exact and have > plan.n_tokens:  # cannot cut back: prefill instead
            seq.copy = None
            self._keep(seq, 0)
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
        sampled = _guard("decode", self.backend.decode, spans)
        n_logits = sum(span.logits for span in spans)
        if not isinstance(sampled, list) or len(sampled) != n_logits:
            raise BatchFailed(f"decode returned {sampled!r} for {n_logits} sequences")
        self.stats.decode_calls += 1
        it = iter(zip(sampled, self._logprobs(spans, n_logits)))
        for span in spans:
            seq = self.running[span.seq_id]
            seq.slot.cached.extend(span.tokens)
            if seq.status == Status.PREFILL:
                seq.fed += len(span.tokens)
                self.stats.prompt_tokens_prefilled += len(span.tokens)
                seq.breaks.discard(seq.fed)
            if span.logits:
                token, logprobs = next(it)
                reason = seq.reply.add(token, logprobs)
                seq.status = Status.DECODE if reason is None else Status.FINISHED
        self.dirty = False
        if self._n_waiting:  # running is in placement order (a dict)
            for seq in [s for s in self.running.values() if s.status == Status.COPY]:
                if self._try_copy(seq):
                    self._n_waiting -= 1
        done = [s for s in self.running.values() if s.status == Status.FINISHED]
        for seq in done:
            seq.slot.busy = False
            del self.running[seq.slot.seq_id]
        return done

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
            later = [b - s.fed for b in s.breaks if b > s.fed]
            prefilling.append(
                Prefilling(s.slot.seq_id, s.fed, s.tokens[s.fed :], min(later) if later else None)
            )
        spans = plan_step(decoding, prefilling, self.limits.n_batch)
        if not spans:  # only copies waiting (cannot happen: their sources prefill)
            raise BatchFailed("nothing to decode: every running sequence waits for a copy")
        return spans

"""The slot engine: requests in slots that keep their cache, refilled as they end.

:meth:`SlotEngine.place` puts a request in the free slot whose cache shares the most with
its prompt, or plans a copy of a longer prefix from another slot, or loads one from host
memory; :meth:`SlotEngine.step` plans one call, has the backend run it and hands each
request what its rows gave. What a request wants is the request's own
(:class:`~llamabatch.engine.request.Request`); where it runs (its slot, a copy it waits
for) is the slot table's (:class:`~llamabatch.engine.cache.Placement`): the engine places,
plans and runs. What it did is counted in :class:`EngineCounts`, which the scheduler adds
to ``Stats``. Any exception of a backend call becomes :class:`BatchFailed`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from time import perf_counter

from ..errors import DecodeError, GrammarError, decode_meaning
from .backend import Backend, BackendInfo, BatchLimits
from .cache import HostCache, Placement, SavedState, Slot, SlotTable, common_prefix, reusable
from .request import Request, RequestStatus
from .step import PrefillTokens, SeqOutput, Span, StepResult, plan_step

PREFILL, DECODE, FINISHED = RequestStatus


class BatchFailed(Exception):
    """A backend call of the batch path failed; ``reason`` says which and why.
    ``counts`` is False for an item's own failure (a grammar error no sequence could be
    blamed for): not a failure of batching."""

    def __init__(self, reason: str, counts: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.counts = counts


def _failed(what: str, exc: Exception) -> BatchFailed:
    if isinstance(exc, GrammarError):  # an item's own error, but whose is unknown here
        return BatchFailed(f"{what} raised GrammarError: {exc}", counts=False)
    if isinstance(exc, DecodeError):
        meaning = decode_meaning(exc.code) if exc.code is not None else "no code"
        return BatchFailed(f"llama_decode returned {exc.code} ({meaning}): {exc}")
    return BatchFailed(f"{what} raised {type(exc).__name__}: {exc}")


@dataclass(slots=True)
class EngineCounts:
    """What the slot engine did since the scheduler last took its counts
    (:meth:`SlotEngine.take_counts`), each under the name of the
    :class:`~llamabatch.stats.Stats` field it adds to (the scheduler writes them
    there)."""

    prompt_tokens_cached: int = 0
    prompt_tokens_prefilled: int = 0
    label_tokens_decoded: int = 0
    prefix_copies: int = 0
    cache_ram_saves: int = 0
    cache_ram_loads: int = 0
    decode_calls: int = 0
    backend_sampled_rows: int = 0
    step_seconds: float = 0.0
    decode_seconds: float = 0.0
    logits_seconds: float = 0.0
    sampling_seconds: float = 0.0


class SlotEngine:
    """Runs requests in the slots of the open batch context (``limits``).

    Args:
        min_copy_tokens: copy another slot's cache (or load a saved state) only when it
            saves at least this many more tokens than the slot's own cache (>= 1).
        cache_ram_bytes: most bytes of states kept in host memory (0: none).
        host_sampling: start every chain with ``host=True`` (backend sampling not
            verified on this device: :attr:`BackendInfo.backend_sampling`).

    Attributes:
        counts: what it did since :meth:`take_counts` was last called.
        partial_trim: the memory takes cuts to a position > 0 (False when declared so, or
            learned from a refused trim: caches are then reused only up to their very end).
        dirty: a backend call that changes caches is in progress (an exception escaping
            it leaves them unknown: :meth:`reset`).
    """

    def __init__(
        self,
        backend: Backend,
        limits: BatchLimits,
        min_copy_tokens: int = 32,
        cache_ram_bytes: int = 0,
        info: BackendInfo | None = None,
        host_sampling: bool = False,
    ) -> None:
        self.backend, self.limits = backend, limits
        self.counts = EngineCounts()
        self.host_sampling = host_sampling
        self.info = info = backend.info if info is None else info
        self.table = SlotTable(limits.n_seq_max)
        self.min_copy_tokens = max(1, min_copy_tokens)
        if not info.can_copy:
            self.min_copy_tokens = limits.n_ctx_seq + 1
        self.can_save = info.can_copy and info.can_save
        self.host = HostCache(cache_ram_bytes if self.can_save else 0)
        self.partial_trim = info.partial_trim
        self.running = self.table.placed  # seq id -> placement, in placement order
        self.dirty = False
        self._rotate = 0

    # -- backend calls -------------------------------------------------------------------
    @contextmanager
    def _calling(self, what: str, changes: bool = True) -> Iterator[None]:
        """Around the backend call ``what`` (its name): any failure becomes
        :class:`BatchFailed`, but a grammar refused by ``start_seq`` goes through (the
        request's own error). ``changes``: it changes caches (:attr:`dirty` meanwhile)."""
        self.dirty = changes
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - MemoryError, library errors: any failure
            if what == "start_seq" and isinstance(exc, GrammarError):  # changes no cache
                self.dirty = False
                raise
            raise _failed(what, exc) from exc
        self.dirty = False

    # -- state ---------------------------------------------------------------------------
    def take_counts(self) -> EngineCounts:
        """What it did since the last call (:attr:`counts`, which starts again from 0)."""
        counts, self.counts = self.counts, EngineCounts()
        return counts

    @property
    def n_free(self) -> int:
        """Slots with no request running."""
        return len(self.table) - len(self.running)

    def release(self) -> list[Request]:
        """Stop every running request (a run ends early; caches stay valid) and return
        them in input order."""
        reqs = sorted((p.req for p in self.running.values()), key=lambda r: (r.index, r.sample))
        self.running.clear()
        return reqs

    def reset(self) -> list[Request]:
        """Empty every cache (after a failure or an interruption) and return the
        requests that were running, in input order."""
        reqs = self.release()
        self.table.forget_all()
        self.host.clear()
        self.dirty = False
        try:
            self.backend.clear()
        except Exception:  # noqa: BLE001 - nothing more to do; the table forgot them
            pass
        return reqs

    # -- placing a request ---------------------------------------------------------------
    def place(self, req: Request) -> None:
        """Start ``req`` (it fits a slot) in the free slot that suits it best.

        Raises:
            GrammarError: its grammar was refused (no slot taken, caches valid).
            BatchFailed: a backend call failed.
            ValueError: no slot is free.
        """
        prompt = req.prompt
        best = self.table.best_free(prompt, self._holds)
        if best is None:
            raise ValueError("no free slot: check n_free first")
        slot, n_own = best
        run = req.first_run(self._checkpoints(len(prompt)))
        p = self.table.place(req, slot, run)  # from here a failure hands the request back
        try:
            with self._calling("start_seq", changes=False):
                self.backend.start_seq(slot.seq_id, req.sampling, host=self.host_sampling)
        except GrammarError:
            del self.running[slot.seq_id]
            raise
        planned: dict[int, Sequence[int]] = {  # a copy's cache is not its own yet: no source
            sid: q.req.prompt if q.copy is None else ()
            for sid, q in self.running.items()
            if q.req.status == PREFILL and q is not p
        }
        copy = self.table.copy_source(
            prompt, slot, n_own, planned, self.min_copy_tokens, self._holds
        )
        saved = self._saved_for(prompt, n_own)
        if saved is not None and copy is not None and saved[1] < copy.n_tokens:
            saved = None  # the other slot shares more
        own_kept = saved is None and copy is None
        self._save(slot, n_own if own_kept else 0)  # before its cache is cut or replaced
        if saved is not None:
            self._load(p, *saved)
        elif copy is None:
            self._keep(p, n_own)
        else:
            p.copy = copy
            src = self.running.get(copy.src)
            if not self.partial_trim and src is not None:
                src.breaks.add(copy.n_tokens)
            self._try_copy(p)

    def _checkpoints(self, n_prompt: int) -> bool:
        """A cache cut back to the end of a prompt of ``n_prompt`` tokens comes back from a
        saved state (a checkpoint): on a memory that cannot be cut back, and where the
        prompt fills the sliding window."""
        if not self.can_save:
            return False
        return not self.partial_trim or 0 < self.info.n_swa <= n_prompt

    # -- where a cache can be cut back ---------------------------------------------------
    def _floor(self, slot: Slot) -> int | None:
        """The shortest cut inside ``slot``'s cache that can be decoded on (the backend's
        :meth:`~.backend.Backend.cut_floor`; its whole length where the memory takes no
        partial trim), or ``None`` when unknown."""
        if not self.partial_trim:
            return len(slot.cached)
        try:
            return self.backend.cut_floor(slot.seq_id)
        except Exception:  # noqa: BLE001 - an unknown floor only costs a prefill
            return None

    def _holds(self, slot: Slot, n: int) -> bool:
        """``slot``'s cache can be cut back to its first ``n`` tokens and decoded on."""
        if n <= 0 or n >= len(slot.cached):
            return True
        floor = self._floor(slot)
        return floor is not None and n >= floor

    # -- host memory ---------------------------------------------------------------------
    def _saved_for(self, prompt: list[int], n_own: int) -> tuple[SavedState, int] | None:
        if not self.host.enabled or not self.host:
            return None
        found = self.host.best(prompt)
        if found is None or found[1] - n_own < self.min_copy_tokens:
            return None
        return found

    def _save(self, slot: Slot, n_keep: int) -> None:
        """Save ``slot``'s state when a new request keeps less than half of it
        (llama-server's ``f_keep < 0.5``)."""
        n = len(slot.cached)
        if (
            not self.host.enabled
            or n < self.min_copy_tokens
            or 2 * n_keep >= n
            or self.host.covers(slot.cached)
        ):
            return
        floor = self._floor(slot)
        with self._calling("save_seq", changes=False):
            state = self.backend.save_seq(slot.seq_id)
        if self.host.add(slot.cached, state, n if floor is None else floor):
            self.counts.cache_ram_saves += 1

    def _load(self, p: Placement, saved: SavedState, n: int) -> None:
        slot = p.slot
        with self._calling("load_seq"):
            self.backend.load_seq(slot.seq_id, saved.state)
        slot.cached[:] = saved.tokens
        self.counts.cache_ram_loads += 1
        self._keep(p, n)

    # -- cutting caches ------------------------------------------------------------------
    def _keep(self, p: Placement, n: int) -> None:
        """Keep the first ``n`` cached tokens of ``p``'s slot and prefill the rest."""
        slot = p.slot
        n = min(n, p.run.keep)
        if not self._holds(slot, n):
            n = 0
        if n < len(slot.cached):
            ok = False
            if n > 0:  # (a cut the memory takes: _holds)
                ok = self._trim(slot, n)
                if not ok:
                    self._learn_no_partial_trim()
            if not ok:
                n = 0
                if not self._trim(slot, 0):
                    raise BatchFailed(f"the cache of seq {slot.seq_id} could not be emptied")
            del slot.cached[n:]
        p.fed = n
        self.counts.prompt_tokens_cached += n

    def _learn_no_partial_trim(self) -> None:
        """The memory cannot be cut back (a refused trim): prefixes are reused whole from
        now on (the saved states, taken as cut back, are dropped), and runs that come back
        aim at their prompt alone (a checkpoint)."""
        self.partial_trim = False
        self.host.clear()
        for p in self.running.values():
            if not p.run.samples and p.fed < len(p.req.prompt):
                p.run = p.req.first_run(True)

    def _trim(self, slot: Slot, n: int) -> bool:
        with self._calling("trim"):
            ok = self.backend.trim(slot.seq_id, n)
        return ok

    def _try_copy(self, p: Placement) -> None:
        """Copy the source's cache into ``p``'s slot if it holds the prefix now."""
        plan, prompt = p.copy, p.req.prompt
        if plan is None:
            return
        dst, src = p.slot, self.table.slots[plan.src]
        if len(src.cached) < plan.n_tokens:
            return
        p.copy = None
        n = plan.n_tokens
        if src.cached[:n] != prompt[:n] or not self._holds(src, n):
            self._keep(p, reusable(dst.cached, prompt))  # it moved on: its own cache only
        else:
            with self._calling("copy_seq"):
                self.backend.copy_seq(src.seq_id, dst.seq_id)
            dst.cached[:] = src.cached
            self.counts.prefix_copies += 1
            self._keep(p, n)

    # -- one step ------------------------------------------------------------------------
    def step(self) -> list[Request]:
        """One backend call over the running requests; returns those that ended.

        Raises:
            BatchFailed: a backend call failed (call :meth:`reset`).
        """
        start = perf_counter()
        spans = self._plan()
        self.dirty = True
        try:
            result = self.backend.run(spans)
        except Exception as exc:  # noqa: BLE001 - DecodeError, MemoryError, ...
            raise _failed("run", exc) from exc
        if not isinstance(result, StepResult) or len(result.decoded) != len(spans):
            raise BatchFailed(f"run returned {result!r} for {len(spans)} spans")
        counts = self.counts
        counts.decode_calls += 1
        outputs = result.outputs
        running = self.running
        for span, n in zip(spans, result.decoded):
            sid = span.seq_id
            p = running[sid]
            req, cached = p.req, p.slot.cached
            if span.step:
                req.take(self._output(outputs, sid), span, cached)
                cached.extend(span.tokens)
                continue
            if n != len(span.tokens):
                if not 1 <= n < len(span.tokens) or span.logits:
                    raise BatchFailed(f"run decoded {n} of {len(span.tokens)} tokens of seq {sid}")
                span = _cut(span, n)
            if span.logits or span.targets is not None:
                try:
                    req.take(self._output(outputs, sid), span, cached)
                except ValueError as exc:  # outputs that do not match the span
                    raise BatchFailed(f"run returned {exc}") from exc
            cached.extend(span.tokens)
            self._count_fed(p, n)
        self.dirty = False
        for p in [q for q in running.values() if not q.run.samples and q.req.status == PREFILL]:
            self._advance(p)
        for p in [q for q in running.values() if q.copy is not None]:  # in placement order
            self._try_copy(p)
        done = [q for q in running.values() if q.req.status == FINISHED]
        for p in done:
            del running[p.slot.seq_id]
            p.req.path = "batch"
        counts.backend_sampled_rows += result.backend_sampled
        times = result.times
        if times is not None:
            counts.decode_seconds += times.decode
            counts.logits_seconds += times.logits
            counts.sampling_seconds += times.sampling
        counts.step_seconds += perf_counter() - start
        return [p.req for p in done]

    @staticmethod
    def _output(outputs: dict[int, SeqOutput], seq_id: int) -> SeqOutput:
        out = outputs.get(seq_id)
        if out is None:
            raise BatchFailed(f"run returned no output for seq {seq_id}")
        return out

    def _count_fed(self, p: Placement, n: int) -> None:
        """Count ``n`` tokens fed in a prefill span: prompt tokens, then others."""
        k = max(0, min(n, len(p.req.prompt) - p.fed))
        p.fed += k
        self.counts.prompt_tokens_prefilled += k
        self.counts.label_tokens_decoded += n - k
        p.breaks.discard(p.fed)

    def _advance(self, p: Placement) -> None:
        """A run that samples nothing holds its goal: cut back for the request's next run (a
        trim, its checkpoint, or emptied), or end it."""
        slot, req = p.slot, p.req
        if p.fed < len(req.prompt) or len(slot.cached) < len(p.run.goal):
            return
        checkpoints = self._checkpoints(len(req.prompt))
        run = req.next_run(slot.cached, checkpoints)
        if run is None:
            req.status = FINISHED
            return
        p.run, keep = run, run.keep
        if checkpoints and p.checkpoint is None:
            with self._calling("save_seq", changes=False):
                p.checkpoint = (self.backend.save_seq(slot.seq_id), list(slot.cached))
        if keep >= len(slot.cached):
            return
        if self._holds(slot, keep):
            if self._trim(slot, keep):
                del slot.cached[keep:]
                return
            self._learn_no_partial_trim()
        saved = p.checkpoint
        if saved is not None and len(saved[1]) <= keep:
            state, tokens = saved
            if common_prefix(tokens, run.goal) == len(tokens):
                with self._calling("load_seq"):
                    self.backend.load_seq(slot.seq_id, state)
                slot.cached[:] = tokens
                return
        if not self._trim(slot, 0):
            raise BatchFailed(f"the cache of seq {slot.seq_id} could not be emptied")
        slot.cached.clear()
        if saved is None and self._checkpoints(len(req.prompt)):  # (a cut refused just now)
            # the prompt alone, to checkpoint it
            p.run = req.first_run(True)

    def _plan(self) -> list[Span]:
        steps: list[Span] = []
        prefills: list[PrefillTokens] = []
        for sid, p in self.running.items():
            req = p.req
            status = req.status
            if status == DECODE:
                span = Span(sid, len(p.slot.cached), (req.reply.token_ids[-1],), True, step=True)
                steps.append(span if p.run.rows is None else self._outputs(span))
            elif status == PREFILL and p.copy is None:  # (a copy waits for its source)
                n = len(p.slot.cached)
                later = [b - n for b in p.breaks if b > n] if p.fed < len(req.prompt) else ()
                run = p.run
                stop_at = min(later) if later else None
                prefills.append(PrefillTokens(sid, n, run.goal[n:], run.samples, stop_at))
        n_batch = self.limits.n_batch
        if len(steps) > n_batch:  # not all fit: take turns
            k = self._rotate % len(steps)
            steps = steps[k:] + steps[:k]
            self._rotate += n_batch
        spans = plan_step(steps, prefills, n_batch)
        if not spans:  # only copies waiting (cannot happen: their sources prefill)
            raise BatchFailed("nothing to decode: every running request waits for a copy")
        if prefills:
            return [span if span.step else self._outputs(span) for span in spans]
        return spans

    def _outputs(self, span: Span) -> Span:
        """The span with its rows' score targets (a run whose rows are read)."""
        p = self.running[span.seq_id]
        rows = p.run.rows
        if rows is None:
            return span
        targets = rows(p.slot.cached, span.pos, span.tokens)
        return Span(span.seq_id, span.pos, span.tokens, span.logits, targets, precise=True)


def _cut(span: Span, n: int) -> Span:
    """``span``'s first ``n`` tokens (a backend shortened it)."""
    targets = None if span.targets is None else span.targets[:n]
    if targets is not None and not any(targets):
        targets = None
    return Span(span.seq_id, span.pos, span.tokens[:n], False, targets, precise=span.precise)

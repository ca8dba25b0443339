"""LlamaBackend: the engine's Backend over a loaded ``llama_cpp.Llama``."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Hashable, Iterator, Sequence
from time import perf_counter
from typing import Any

from .. import _ffi
from .._ffi.version import check_version
from ..engine.backend import BackendInfo, BatchLimits, SeqState, SlotMemory
from ..engine.cache import common_prefix
from ..engine.step import SeqOutput, Span, StepResult, StepTimes, Targets
from ..errors import (
    BackendError,
    BatchUnavailable,
    DecodeError,
    GrammarDeadEnd,
    LibraryError,
    ParameterError,
    decode_meaning,
)
from ..locks import llm_lock
from ..params import SamplingParams
from .batch import LlamaBatch
from .context import BatchContext, DecodeHook
from .kv_size import estimate
from .limits import check_context
from .llm_state import LlamaGuard, LlamaRows
from .sampler import SeqSampler, token_logsoftmax
from .slot_samplers import SlotSamplers, backend_sampling_refused
from .ubatch import decode_calls
from .window import cut_floor

check_version()  # a binding outside the supported range fails here, naming the range

log = logging.getLogger("llamabatch")
_NO_LOCK = contextlib.nullcontext()

#: Fewest tokens of a sequence decoded in the call that scores a row
#: (``BackendInfo.min_score_run``): llama.cpp's CPU matrix products take another kernel for
#: one token than for several, and the two round differently (docs/labels.md).
MIN_SCORE_RUN = 2


class LlamaVocab:
    """The ``Llama``'s vocabulary (:class:`~llamabatch.engine.backend.Vocab`)."""

    def __init__(self, llm: Any, eog_ids: frozenset[int]) -> None:
        self._llm = llm
        self.n_vocab = int(llm.n_vocab())
        self.eog_ids = eog_ids

    def _check_llm(self) -> None:
        if not _ffi.is_loaded(self._llm):
            raise BackendError("the Llama was closed (Llama.close()); its model is freed")

    def tokenize(self, text: str) -> list[int]:
        """``Llama.tokenize(text, add_bos=True, special=True)``, as ``create_completion`` does;
        BackendError when it fails or the ``Llama`` was closed."""
        self._check_llm()
        try:
            return list(self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))
        except (RuntimeError, ValueError, UnicodeError) as exc:
            raise BackendError(f"cannot tokenize the prompt: {exc}") from exc

    def detokenize(self, tokens: Sequence[int]) -> str:
        """``Llama.detokenize`` of all ``tokens`` at once, invalid UTF-8 replaced; BackendError when
        the ``Llama`` was closed."""
        self._check_llm()
        return self.detokenize_bytes(tokens).decode("utf-8", errors="replace")

    def detokenize_bytes(self, tokens: Sequence[int]) -> bytes:
        """``Llama.detokenize`` of all ``tokens`` at once: their bytes, as the binding's reply
        text is made; BackendError when the ``Llama`` was closed."""
        self._check_llm()
        return bytes(self._llm.detokenize(list(tokens)))


class LlamaBackend:
    """The real backend (:class:`~llamabatch.engine.backend.Backend`): batched work in a
    :class:`BatchContext` (a second context on the ``Llama``'s model), work alone on the
    ``Llama``'s own context (``Llama.eval``), every item sampled by one chain
    (:class:`~.sampler.SeqSampler`).

    It does not lock: :class:`~llamabatch.BatchGenerator` holds ``info.lock``
    (:func:`llamabatch.llm_lock` of the ``Llama``) around every call. After ``Llama.close()``
    every call that would reach llama.cpp raises ``BackendError``.

    Args:
        llm: a loaded ``llama_cpp.Llama`` (kept alive while the backend exists).
        decode_hook: passed to :class:`BatchContext` (tests inject decode failures).
        backend_sampling: sample the rows of plain chains on the model's device
            (:class:`~.slot_samplers.SlotSamplers`): True: once the generator's device check
            verified it there where that check runs (``info.backend_sampling`` ``None``:
            :func:`~llamabatch.engine.device_check.check_sampling`), else as asked; False or
            ``None`` (default): on the host, with the reason for a GPU in
            ``info.backend_sampling_off`` (:func:`~.slot_samplers.backend_sampling_refused`).

    Attributes:
        info: partial trims unless the model is recurrent or hybrid; copies, saves and
            loads when the binding has ``llama_state_seq_*``; the sliding window
            (``llama_model_n_swa``, 0 with ``Llama(swa_full=True)``); label scores; the
            ``Llama``'s lock; :meth:`check_batch_params`.
        vocab: the ``Llama``'s vocabulary (:class:`LlamaVocab`).

    Raises:
        LibraryError: llama-cpp-python lacks what even one-at-a-time work needs
            (``llama_model_get_vocab``, ``llama_vocab_is_eog``), or what
            ``backend_sampling=True`` needs (``llama_set_sampler``, ``llama_sampler_copy``).
        ValueError: ``backend_sampling`` is not a bool or ``None``.
    """

    def __init__(
        self,
        llm: Any,
        *,
        decode_hook: DecodeHook | None = None,
        backend_sampling: bool | None = None,
    ) -> None:
        if backend_sampling is not None and not isinstance(backend_sampling, bool):
            raise ParameterError("backend_sampling", backend_sampling, "True, False or None (off)")
        lib = _ffi.load()
        lib.symbols.require("model_get_vocab", "vocab_n_tokens", "vocab_is_eog")
        if backend_sampling:
            lib.symbols.require("set_sampler", "sampler_copy")
        device = _ffi.output_device(llm)
        #: Plain chains started with ``host=False`` sample on the model's device (where the
        #: device check runs, only once it verified them: ``info.backend_sampling`` ``None``).
        self.backend_sampling = backend_sampling is True
        self._llm, self._hook = llm, decode_hook
        self.vocab = LlamaVocab(llm, lib.eog_ids(lib.vocab(_ffi.model_of(llm))))
        self.n_swa = _ffi.window_of(llm)
        self.max_slots = lib.max_parallel_sequences()
        can_copy = lib.can_copy_seq()
        self.info = BackendInfo(
            n_ctx=int(llm.n_ctx()),
            max_slots=self.max_slots,
            can_copy=can_copy,
            can_save=can_copy,  # the same llama_state_seq_* functions
            partial_trim=not lib.model_is_recurrent(_ffi.model_of(llm)),
            n_swa=self.n_swa,
            can_score=True,
            min_score_run=MIN_SCORE_RUN,
            lock=llm_lock(llm),
            check_batch_params=self.check_batch_params,
            device=device,
            slot_memory=self.slot_memory,
            backend_sampling=None if self.backend_sampling else False,
            compute_key=self._compute_key(llm, decode_hook),
            backend_sampling_off=(
                backend_sampling_refused(device) if backend_sampling is None else None
            ),
        )
        self._ctx: BatchContext | None = None
        self._alone_guard: LlamaGuard | None = None  # items alone since the caller's state
        self._batch: LlamaBatch | None = None
        self._samplers: SlotSamplers | None = None

    def _compute_key(self, llm: Any, decode_hook: DecodeHook | None) -> Hashable | None:
        """``info.compute_key``: the ``Llama``'s (:func:`llamabatch._ffi.compute_key`) with this
        backend's class (a subclass may compute otherwise); ``None`` with a decode hook."""
        key = _ffi.compute_key(llm)
        if key is None or decode_hook is not None:
            return None
        return (type(self).__module__, type(self).__qualname__, key)

    def check_batch_params(self, slots: int, n_ctx_seq: int, n_batch: int) -> None:
        """Refuse, before creating it, a batch context llama.cpp would abort or fail on: ValueError
        naming the parameter and its valid range (:func:`~.limits.check_context`)."""
        n_threads, n_threads_batch = _ffi.threads_of(self._llm)
        check_context(
            slots,
            n_ctx_seq,
            n_batch,
            max_slots=self.max_slots,
            n_threads=n_threads,
            n_threads_batch=n_threads_batch,
        )

    def slot_memory(self, n_ctx_seq: int) -> SlotMemory:
        """The room for slots of ``n_ctx_seq`` tokens: the free memory where the KV cache goes
        (:func:`llamabatch._ffi.free_memory`) and one slot's KV bytes (:func:`~.kv_size.estimate`).

        Raises:
            ParameterError: the device does not report its free memory (``slots="auto"``
                cannot be chosen).
            ValueError, LibraryError: as :func:`~.kv_size.estimate`.
        """
        where, free = _ffi.free_memory(self._llm)
        if free is None:
            raise ParameterError(
                "slots", "auto", f"a number: {where} does not report its free memory"
            )
        kv = estimate(self._llm, slots=1, n_ctx_seq=n_ctx_seq)
        return SlotMemory(where, free, kv.total_bytes, kv.exact)

    # -- state -------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once the ``Llama``'s model was freed (``Llama.close()``)."""
        return not _ffi.is_loaded(self._llm)

    @property
    def batch_context(self) -> BatchContext | None:
        """The open :class:`BatchContext`, or None."""
        return self._ctx

    # -- the batch context -------------------------------------------------------
    def open(self, slots: int, n_ctx_seq: int, n_batch: int) -> BatchLimits:
        """Create the batch context and its batch (closing any previous one); BatchUnavailable,
        saying why, when it cannot be created."""
        self.close()
        try:
            ctx = BatchContext(self._llm, slots, n_ctx_seq, n_batch, decode_hook=self._hook)
        except BatchUnavailable:
            raise
        except (LibraryError, ValueError, MemoryError) as exc:
            raise BatchUnavailable(f"cannot create the batch context: {exc}") from exc
        try:
            batch = LlamaBatch(ctx.limits.n_batch, ctx.limits.n_seq_max)
        except (LibraryError, ValueError, MemoryError) as exc:
            ctx.close()
            raise BatchUnavailable(f"cannot allocate the batch: {exc}") from exc
        self._ctx, self._batch = ctx, batch
        self._samplers = SlotSamplers(self._llm, ctx, self.backend_sampling)
        return dataclasses.replace(ctx.limits, kv_bytes=self._kv_bytes(ctx))

    def _kv_bytes(self, ctx: BatchContext) -> int:
        lim = ctx.limits
        try:
            kv = estimate(self._llm, slots=lim.n_seq_max, n_ctx_seq=lim.n_ctx_seq)
        except (LibraryError, ValueError) as exc:
            log.info("llamabatch: KV cache size of the batch context unknown: %s", exc)
            return 0
        log.info(
            "llamabatch: batch context KV cache: %.2f MiB (%d slots x %d tokens x "
            "%d bytes per token%s)",
            kv.total_mib,
            lim.n_seq_max,
            lim.n_ctx_seq,
            kv.bytes_per_token,
            "" if kv.exact else ", an estimate",
        )
        return kv.total_bytes

    def _open(self) -> tuple[BatchContext, LlamaBatch, SlotSamplers]:
        if self._ctx is None or self._batch is None or self._samplers is None:
            raise ValueError("no batch context: call open first")
        if self._ctx.closed:  # freed by Llama.close() (see BatchContext)
            raise BackendError("the batch context was freed: the Llama was closed")
        return self._ctx, self._batch, self._samplers

    # -- operations on sequences -------------------------------------------------
    # Each raises ValueError without a batch context or for an id out of range, and
    # BackendError once the Llama is closed.
    def start_seq(self, seq_id: int, sampling: SamplingParams, host: bool = False) -> None:
        """Build ``seq_id``'s sampler chain (:class:`~.slot_samplers.SlotSamplers`; ``host``:
        on the host, so that its rows can be read as numbers).

        Raises:
            GrammarError: llama.cpp refused the grammar.
        """
        ctx, _, samplers = self._open()
        n = ctx.limits.n_seq_max
        if not isinstance(seq_id, int) or not 0 <= seq_id < n:
            raise ValueError(f"seq_id={seq_id!r} is out of range: valid is [0, {n})")
        samplers.start(seq_id, sampling, host)

    def trim(self, seq_id: int, n_keep: int) -> bool:
        """``llama_memory_seq_rm`` from ``n_keep`` on; False when the memory refused."""
        return self._open()[0].trim(seq_id, n_keep)

    def copy_seq(self, src: int, dst: int) -> None:
        """``llama_state_seq_get_data`` of ``src``, ``set_data`` into ``dst``; BackendError
        when llama.cpp copied nothing."""
        done = self._open()[0].copy_seq(src, dst)
        _check_state(done, f"copied nothing from seq {src} to {dst}")

    def save_seq(self, seq_id: int) -> SeqState:
        """``llama_state_seq_get_data`` into a host buffer; BackendError when llama.cpp saved
        nothing."""
        buf = self._open()[0].save_seq(seq_id)
        _check_state(buf, f"saved nothing of seq {seq_id}")
        return SeqState(buf, len(buf))

    def load_seq(self, seq_id: int, state: SeqState) -> None:
        """``llama_state_seq_set_data`` of a :meth:`save_seq` state; BackendError when llama.cpp
        refused it."""
        done = self._open()[0].load_seq(seq_id, state.data)
        _check_state(done, f"refused the state for seq {seq_id}")

    def cut_floor(self, seq_id: int) -> int:
        """:func:`~.window.cut_floor` of ``llama_memory_seq_pos_min`` (0 without a window)."""
        if self.n_swa <= 0:
            return 0
        return cut_floor(self._open()[0].seq_pos_min(seq_id), self.n_swa)

    def clear(self) -> None:
        """Empty every sequence (nothing without an open batch context)."""
        if self._ctx is not None and not self._ctx.closed:
            self._ctx.clear(range(self._ctx.limits.n_seq_max))

    def release_alone(self) -> None:
        """Put the ``Llama`` back as it was before the items alone since the last release (or
        since the caller last used it in between: then as the caller left it)."""
        self._release()

    def run(self, spans: Sequence[Span]) -> StepResult:
        """``llama_decode`` of ``spans`` (``precise`` ones shaped by :func:`~.ubatch.shape`, and
        decoded in calls of their own where a cut cannot keep them out of ubatches of one
        token per sequence: :func:`~.ubatch.decode_calls`); rows with ``logits`` sampled by
        their sequences' chains (on the model's device where a chain is attached), rows with
        targets scored. A grammar dead end is that sequence's ``SeqOutput.error``. The
        result's ``times`` split the step: ``llama_decode`` (and ``llama_synchronize``),
        reading rows (logprobs, scores), sampling.

        Raises:
            ValueError: no tokens, more than ``n_batch``, logits for a sequence never started,
                targets of a sequence sampled on the backend.
            DecodeError: ``llama_decode`` returned non-zero (``.code``).
            BackendError: the ``Llama`` was closed.
        """
        ctx, batch, samplers = self._open()
        outputs: dict[int, SeqOutput] = {}
        n_decoded: dict[int, int] = {}
        times = [0.0, 0.0, 0.0]  # decode, reading rows, sampling
        on_backend = 0
        for call in decode_calls(spans):
            on_backend += self._decode(ctx, batch, samplers, call, outputs, times)
            n_decoded.update((span.seq_id, len(span.tokens)) for span in call)
        decoded = tuple(n_decoded[span.seq_id] for span in spans)
        return StepResult(decoded, outputs, StepTimes(*times), on_backend)

    def _decode(
        self,
        ctx: BatchContext,
        batch: LlamaBatch,
        samplers: SlotSamplers,
        spans: Sequence[Span],
        outputs: dict[int, SeqOutput],
        times: list[float],
    ) -> int:
        """One ``llama_decode`` of ``spans``; their outputs into ``outputs``, the seconds
        added to ``times``; returns the rows sampled on the model's device."""
        rows, scored = self._fill(batch, spans, samplers)
        start = perf_counter()
        code = ctx.decode(batch)
        decoded = perf_counter()
        if code != 0:
            raise DecodeError(f"llama_decode returned {code}: {decode_meaning(code)}", code=code)
        read = 0.0  # of the sampling loop, reading logprobs
        on_backend = 0
        attached = samplers.attached
        for seq_id, i in rows:
            sampler = samplers[seq_id]
            try:
                token = sampler.sample(ctx, i)
            except GrammarDeadEnd as exc:  # nothing accepted; the other rows go on
                outputs[seq_id] = SeqOutput(error=str(exc))
                continue
            if token is None:  # its grammar is complete: the reply ends here
                outputs[seq_id] = SeqOutput(grammar_complete=True)
                continue
            logprobs = None
            if sampler.params.logprobs is not None:
                r = perf_counter()
                logprobs = sampler.logprobs(ctx, i, token)
                read += perf_counter() - r
            on_backend += seq_id in attached
            outputs[seq_id] = SeqOutput(token, logprobs)
        sampled = perf_counter()
        for seq_id, first, targets in scored:
            rows_out = [
                token_logsoftmax(ctx.logits(first + r, copy=False), ids) if ids else ((), None)
                for r, ids in enumerate(targets)
            ]
            outputs[seq_id] = SeqOutput(
                scores=tuple(v for v, _ in rows_out), row_max=tuple(m for _, m in rows_out)
            )
        times[0] += decoded - start
        times[1] += read + perf_counter() - sampled
        times[2] += sampled - decoded - read
        return on_backend

    def _fill(
        self, batch: LlamaBatch, spans: Sequence[Span], samplers: SlotSamplers
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int, Targets]]]:
        """Lay ``spans`` into ``batch`` (a reply step's one-token spans in one write); the rows to
        sample ``(seq id, batch row)`` and the runs to score ``(seq id, first row, targets)``."""
        total = sum(len(span.tokens) for span in spans)
        if not 0 < total <= batch.capacity:
            raise ValueError(f"spans hold {total} tokens: valid is [1, {batch.capacity}]")
        batch.clear()
        if total == len(spans) and all(
            span.logits and span.targets is None for span in spans
        ):  # a reply step: one token per sequence, each sampled
            seq_ids = [span.seq_id for span in spans]
            for sid in seq_ids:
                if sid not in samplers:
                    raise ValueError(f"seq_id={sid} has no sampler: call start_seq first")
            first = batch.add_steps(
                [span.tokens[0] for span in spans], [span.pos for span in spans], seq_ids
            )
            return [(sid, first + k) for k, sid in enumerate(seq_ids)], []
        rows: list[tuple[int, int]] = []
        scored: list[tuple[int, int, Targets]] = []
        attached = samplers.attached
        for span in spans:
            if span.logits and span.seq_id not in samplers:
                raise ValueError(f"seq_id={span.seq_id} has no sampler: call start_seq first")
            if span.seq_id in attached and span.targets is not None:
                raise ValueError(
                    f"seq_id={span.seq_id} is sampled on the backend: its rows cannot be scored "
                    "(start it with host=True or a chain that samples on the host)"
                )
            if span.targets is not None and len(span.targets) != len(span.tokens):
                raise ValueError(
                    f"seq_id={span.seq_id}: {len(span.targets)} targets for "
                    f"{len(span.tokens)} tokens; give one tuple per token"
                )
            last = batch.add_run(span.tokens, span.pos, span.seq_id, span.logits)
            if span.targets is not None:
                first = last + 1 - len(span.tokens)
                for r, ids in enumerate(span.targets):
                    if ids:
                        _check_ids(ids, self.vocab.n_vocab)
                        batch.request_logits(first + r)
                scored.append((span.seq_id, first, span.targets))
            if span.logits:
                rows.append((span.seq_id, last))
        return rows, scored

    # -- one at a time -----------------------------------------------------------
    def run_alone(
        self, tokens: Sequence[int], sampling: SamplingParams | None, targets: Targets | None
    ) -> Iterator[SeqOutput]:
        """Work on the ``Llama``'s own context: with ``sampling``, generate after ``tokens``
        with the batch path's chain; with ``targets``, the label scores of ``tokens``' rows.
        The settings an item changed are put back after it, the cache at ``release_alone``;
        what the caller changed between items stands (:class:`~.llm_state.LlamaGuard`).

        Raises (when iterated):
            BackendError: llama-cpp-python refused the prompt, or the ``Llama`` was closed.
            GrammarError: llama.cpp refused the grammar.
            ValueError: ``targets`` is not one tuple per token, or an id is out of range.
        """
        if not _ffi.is_loaded(self._llm):
            raise BackendError("the Llama was closed (Llama.close()); its model is freed")
        guard = self._alone_guard
        if guard is not None and guard.is_current():
            guard.begin()
        else:  # the first item alone, or the caller used the Llama since: its state stands
            self._alone_guard = LlamaGuard(self._llm)
        if sampling is not None:
            return self._generate(list(tokens), sampling)
        return iter([self._score([int(t) for t in tokens], targets or ())])

    def _score(self, tokens: list[int], targets: Targets) -> SeqOutput:
        """Score each row with targets: the cache cut back to what it shares with ``tokens``, at
        most to :data:`MIN_SCORE_RUN` tokens before the row (emptied where the window lost it)."""
        if len(targets) != len(tokens) or not tokens:
            raise ValueError(f"{len(targets)} targets for {len(tokens)} tokens; give one each")
        for ids in targets:
            _check_ids(ids, self.vocab.n_vocab)
        llm, guard = self._llm, self._alone_guard
        out: list[tuple[float, ...]] = [() for _ in tokens]
        row_max: list[float | None] = [None for _ in tokens]
        try:
            for j in [j for j, ids in enumerate(targets) if ids]:
                start = max(0, j + 1 - MIN_SCORE_RUN)
                self._keep_alone(tokens, start)
                llm.eval(tokens[int(llm.n_tokens) : j + 1])
                row = _ffi.load().logits(_ffi.context_of(llm), -1, self.vocab.n_vocab)
                if row is None:
                    raise BackendError("cannot read the Llama's logits for label scores")
                out[j], row_max[j] = token_logsoftmax(row, targets[j])
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"llama-cpp-python: {exc}") from exc
        finally:
            if guard is not None:
                guard.restore_settings()
        return SeqOutput(scores=tuple(out), row_max=tuple(row_max))

    def _generate(self, tokens: list[int], sampling: SamplingParams) -> Iterator[SeqOutput]:
        """Generate after ``tokens`` on the ``Llama``'s own context with the batch path's chain
        (:class:`~.sampler.SeqSampler`, grammar included); the cache keeps the item's tokens
        for the next item alone, as ``Llama.generate`` keeps them."""
        llm, guard = self._llm, self._alone_guard
        sampler = SeqSampler(llm, sampling)  # GrammarError before the Llama is touched
        rows = LlamaRows(llm, self.vocab.n_vocab)
        try:
            self._eval_alone(tokens)
            while True:
                try:
                    token = sampler.sample(rows, -1)
                except GrammarDeadEnd as exc:  # nothing accepted
                    yield SeqOutput(error=str(exc))
                    return
                if token is None:  # its grammar is complete: the reply ends here
                    yield SeqOutput(grammar_complete=True)
                    return
                logprobs = None
                if sampling.logprobs is not None:
                    logprobs = sampler.logprobs(rows, -1, token)
                yield SeqOutput(token, logprobs)
                self._eval(llm, [token])  # the cache holds the tokens so far: add this one
        finally:
            sampler.close()
            if guard is not None:
                guard.restore_settings()

    def _eval_alone(self, tokens: list[int]) -> None:
        """Make the ``Llama``'s cache hold ``tokens`` and its last row their last token's
        logits: the cached prefix it shares with them is kept (less the last token, which is
        decoded again; nothing where the sliding window lost it), the rest decoded."""
        keep = self._keep_alone(tokens, len(tokens) - 1)
        self._eval(self._llm, tokens[keep:])

    def _keep_alone(self, tokens: Sequence[int], most: int) -> int:
        """Cut the ``Llama``'s cache back to the prefix it shares with ``tokens``, at most
        ``most`` tokens, none where the window lost what the next token attends to
        (:func:`~.window.cut_floor`); returns the tokens kept."""
        llm = self._llm
        cached = _ffi.llm_cached_tokens(llm)
        keep = min(common_prefix(cached, tokens), most)
        if self.n_swa > 0 and 0 < keep < len(cached):
            if keep < cut_floor(_ffi.llm_seq_pos_min(llm), self.n_swa):
                keep = 0
        if keep < len(cached):
            _ffi.cut_llm_cache(llm, keep)
        return keep

    @staticmethod
    def _eval(llm: Any, tokens: list[int]) -> None:
        try:
            llm.eval(tokens)
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"llama-cpp-python: {exc}") from exc

    def _release(self) -> None:
        with self.info.lock or _NO_LOCK:  # may come from outside a generator's turn
            guard, self._alone_guard = self._alone_guard, None
            if guard is not None and guard.is_current():  # else the caller's state stands
                guard.restore()

    # -- lifetime ----------------------------------------------------------------
    def close(self) -> None:
        """Free samplers, batch and context, in that order (idempotent)."""
        if self._samplers is not None:
            self._samplers.close()
            self._samplers = None
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None


def _check_ids(ids: Sequence[int], n_vocab: int) -> None:
    if any(not 0 <= t < n_vocab for t in ids):
        raise ValueError(f"target ids {tuple(ids)!r} out of range: valid is [0, {n_vocab})")


def _check_state(done: object, what: str) -> None:
    """BackendError when ``llama_state_seq_*`` copied, saved or loaded nothing (0 bytes, or
    no state)."""
    if not done:
        raise BackendError(f"llama_state_seq_get/set_data {what}")

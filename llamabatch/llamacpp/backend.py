"""LlamaBackend: the :class:`~llamabatch.engine.backend.Backend` over a loaded ``llama_cpp.Llama``.

Batched work runs in a :class:`~llamabatch.llamacpp.context.BatchContext` (a second context on
the ``Llama``'s model) with one :class:`~llamabatch.llamacpp.batch.LlamaBatch` and one
:class:`~llamabatch.llamacpp.sampler.SeqSampler` per sequence. Work done alone runs through the
``Llama`` itself (``Llama.generate``), with the same sampler chain.

Parity note: ``Llama.generate`` takes its penalty window from ``Llama.last_n_tokens_size``
(``Llama(last_n_tokens_size=64)``), not from an argument. :meth:`generate_alone` sets it
to ``sampling.penalty_last_n`` while it generates, so both paths penalize the same
window, and puts it back (with the seed and sampler: :mod:`.llm_state`) afterwards.

Threads: the backend does not lock; :class:`~llamabatch.BatchGenerator` holds
:attr:`LlamaBackend.lock` (:func:`llamabatch.llm_lock` of the ``Llama``) around every call.
After ``Llama.close()`` every call that would reach llama.cpp raises
:class:`~llamabatch.errors.BackendError` instead of touching freed memory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from .. import _ffi
from ..engine.backend import BackendCapabilities, BatchLimits, Span
from ..engine.features.labels import MIN_RUN
from ..engine.seq_errors import GrammarDeadEnd, SampleErrors
from ..engine.window import window_holds
from ..errors import (
    BackendError,
    BatchUnavailable,
    DecodeError,
    GrammarError,
    LibraryError,
    decode_meaning,
)
from ..locks import llm_lock
from ..params import SamplingParams
from .alone_grammar import AloneGrammar
from .batch import LlamaBatch
from .constraints import grammar_of
from .context import BatchContext, DecodeHook
from .kv_size import estimate
from .limits import check_context
from .llm_state import LlamaGuard, common_prefix, forget_stale_window
from .sampler import SeqSampler, token_logsoftmax, top_logprobs

log = logging.getLogger("llamabatch")


class LlamaBackend:
    """The real backend.

    Args:
        llm: a loaded ``llama_cpp.Llama`` (kept alive while the backend exists).
        decode_hook: passed to :class:`BatchContext` (tests inject decode failures).

    Attributes:
        n_vocab, n_ctx, eog_ids, kv_bytes: see :class:`~llamabatch.engine.backend.Backend`.
        max_slots, can_copy, partial_trim, lock: see
            :class:`~llamabatch.engine.backend.BackendCapabilities` (:meth:`capabilities`);
            ``partial_trim`` is False for a recurrent or hybrid model
            (``llama_model_is_recurrent`` / ``llama_model_is_hybrid``).
        n_swa: the sliding window of the model's window layers in positions
            (``llama_model_n_swa``), 0 without one or with ``Llama(swa_full=True)`` (the
            batch context copies ``swa_full`` from the ``Llama``); reported as
            ``BackendCapabilities.n_swa``.

    Raises:
        LibraryError: llama-cpp-python lacks what even one-at-a-time work needs
            (``llama_model_get_vocab``, ``llama_vocab_is_eog``).
    """

    def __init__(self, llm: Any, *, decode_hook: DecodeHook | None = None) -> None:
        lib = _ffi.load()
        lib.symbols.require("model_get_vocab", "vocab_n_tokens", "vocab_is_eog")
        self._llm, self._hook = llm, decode_hook
        self.n_vocab = int(llm.n_vocab())
        self.n_ctx = int(llm.n_ctx())
        self.max_slots = lib.max_parallel_sequences()
        self.eog_ids = lib.eog_ids(lib.vocab(_ffi.model_of(llm)))
        self._ctx: BatchContext | None = None
        self._alone_guard: LlamaGuard | None = None  # items alone since the caller's state
        self._batch: LlamaBatch | None = None
        self._samplers: dict[int, SeqSampler] = {}
        self.partial_trim = not lib.model_is_recurrent(_ffi.model_of(llm))
        self.n_swa = _ffi.window_of(llm)
        self.can_copy = lib.can_copy_seq()
        self.kv_bytes = 0  # KV cache of the open batch context
        self._logprobs: list = []
        self._scores: list = []
        self.can_share_rows = True  # decode samples Span.share from the same row
        self.lock = llm_lock(llm)

    def capabilities(self) -> BackendCapabilities:
        """Copies, saves and loads of sequence states when the binding has
        ``llama_state_seq_*``; partial trims unless the model is recurrent or hybrid;
        the ``Llama``'s lock; :meth:`check_batch_params`; label scores, shared rows and
        the model's sliding window (:attr:`n_swa`)."""
        return BackendCapabilities(
            max_slots=self.max_slots,
            can_copy=self.can_copy,
            partial_trim=self.partial_trim,
            can_save=self.can_copy,  # the same llama_state_seq_* functions
            lock=self.lock,
            check_batch_params=self.check_batch_params,
            can_score=True,  # decode honours Span.targets; take_scores, score_alone
            can_share_rows=self.can_share_rows,
            n_swa=self.n_swa,
        )

    def check_batch_params(self, slots: int, n_ctx_seq: int, n_batch: int) -> None:
        """Refuse a batch context llama.cpp would abort or fail on (before creating it).

        Raises:
            ValueError: naming the parameter and its valid range
                (:func:`~llamabatch.llamacpp.limits.check_context`).
        """
        n_threads, n_threads_batch = _ffi.threads_of(self._llm)
        check_context(
            slots,
            n_ctx_seq,
            n_batch,
            max_slots=self.max_slots,
            n_threads=n_threads,
            n_threads_batch=n_threads_batch,
        )

    # -- state -------------------------------------------------------------------
    @property
    def llm_closed(self) -> bool:
        """True once the ``Llama``'s model was freed (``Llama.close()``)."""
        return not _ffi.is_loaded(self._llm)

    @property
    def batch_context(self) -> BatchContext | None:
        """The open :class:`BatchContext` (read its ``limits``, ``seq_pos_max``), or None."""
        return self._ctx

    def _check_llm(self) -> None:
        if not _ffi.is_loaded(self._llm):
            raise BackendError("the Llama was closed (Llama.close()); its model is freed")

    # -- text --------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """``Llama.tokenize(text, add_bos=True, special=True)`` (as ``create_completion``).

        Raises:
            BackendError: llama-cpp-python could not tokenize it.
        """
        self._check_llm()
        try:
            return list(self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=True))
        except (RuntimeError, ValueError, UnicodeError) as exc:
            raise BackendError(f"cannot tokenize the prompt: {exc}") from exc

    def detokenize(self, tokens: Sequence[int]) -> str:
        """``Llama.detokenize`` of all ``tokens`` at once, invalid UTF-8 replaced.

        Raises:
            BackendError: the ``Llama`` was closed.
        """
        self._check_llm()
        return self._llm.detokenize(list(tokens)).decode("utf-8", errors="replace")

    # -- the batch context -------------------------------------------------------
    def open_batch(self, slots: int, n_ctx_seq: int, n_batch: int) -> BatchLimits:
        """Create the batch context and its batch (closing any previous one).

        Raises:
            BatchUnavailable: it cannot be created (the reason is the message: missing
                symbol, too many slots, out of memory, ...).
        """
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
        self._log_kv(ctx)
        return ctx.limits

    def _log_kv(self, ctx: BatchContext) -> None:
        lim = ctx.limits
        try:
            kv = estimate(self._llm, slots=lim.n_seq_max, n_ctx_seq=lim.n_ctx_seq)
        except (LibraryError, ValueError) as exc:
            log.info("llamabatch: KV cache size of the batch context unknown: %s", exc)
            return
        self.kv_bytes = kv.total_bytes
        log.info(
            "llamabatch: batch context KV cache: %.2f MiB (%d slots x %d tokens x "
            "%d bytes per token%s)",
            kv.total_mib,
            lim.n_seq_max,
            lim.n_ctx_seq,
            kv.bytes_per_token,
            "" if kv.exact else ", an estimate",
        )

    def _open(self) -> tuple[BatchContext, LlamaBatch]:
        if self._ctx is None or self._batch is None:
            raise ValueError("no batch context: call open_batch first")
        if self._ctx.closed:  # freed by Llama.close() (see BatchContext)
            raise BackendError("the batch context was freed: the Llama was closed")
        return self._ctx, self._batch

    def start_seq(self, seq_id: int, sampling: SamplingParams) -> None:
        """Give ``seq_id`` a fresh :class:`SeqSampler` of ``sampling`` (the cache stays).

        Raises:
            ValueError: no batch context, or ``seq_id`` outside [0, n_seq_max).
            BackendError: the ``Llama`` was closed.
            GrammarError: llama.cpp refused the grammar of ``sampling`` (nothing decoded).
        """
        ctx, _ = self._open()
        n = ctx.limits.n_seq_max
        if not isinstance(seq_id, int) or not 0 <= seq_id < n:
            raise ValueError(f"seq_id={seq_id!r} is out of range: valid is [0, {n})")
        old = self._samplers.pop(seq_id, None)
        if old is not None:
            old.close()
        self._samplers[seq_id] = SeqSampler(self._llm, sampling)

    def trim(self, seq_id: int, n_keep: int) -> bool:
        """``llama_memory_seq_rm(mem, seq_id, n_keep, -1)``; False when refused
        (recurrent / hybrid memory).

        Raises:
            ValueError: no batch context, an id or ``n_keep`` out of range.
            BackendError: the ``Llama`` was closed.
        """
        ctx, _ = self._open()
        return ctx.trim(seq_id, n_keep)

    def seq_pos_min(self, seq_id: int) -> int | None:
        """The oldest position ``seq_id`` holds in every layer of the batch context
        (``llama_memory_seq_pos_min``; for a sliding-window model, in its window layers),
        -1 when empty, ``None`` when the binding cannot say (``Backend.seq_pos_min``).

        Raises:
            ValueError: no batch context, an id out of range.
            BackendError: the ``Llama`` was closed.
        """
        ctx, _ = self._open()
        return ctx.seq_pos_min(seq_id)

    def copy_seq(self, src: int, dst: int) -> None:
        """Copy ``src``'s cache onto ``dst`` (``llama_state_seq_get_data`` /
        ``set_data``; see docs/engine.md for why not ``llama_memory_seq_cp``).

        Raises:
            BackendError: llama.cpp copied nothing (``dst`` is then unknown).
            LibraryError: the binding lacks ``llama_state_seq_*``.
            ValueError: no batch context, ids out of range or equal.
        """
        ctx, _ = self._open()
        if ctx.copy_seq(src, dst) == 0:
            raise BackendError(
                f"llama_state_seq_get/set_data copied nothing from seq {src} to seq {dst}"
            )

    def save_seq(self, seq_id: int) -> Any:
        """``seq_id``'s cache as a host buffer (``llama_state_seq_get_data``; ``len()``
        is its bytes), for :meth:`load_seq` later (``Backend.save_seq``).

        Raises:
            BackendError: llama.cpp saved nothing.
            ValueError: no batch context, an id out of range.
        """
        ctx, _ = self._open()
        state = ctx.save_seq(seq_id)
        if state is None:
            raise BackendError(f"llama_state_seq_get_data saved nothing of seq {seq_id}")
        return state

    def load_seq(self, seq_id: int, state: Any) -> None:
        """Make ``seq_id``'s cache the one :meth:`save_seq` saved
        (``llama_state_seq_set_data``; the sampler chain is untouched).

        Raises:
            BackendError: llama.cpp refused it (``seq_id`` is then unknown).
            ValueError: no batch context, an id out of range.
        """
        ctx, _ = self._open()
        if ctx.load_seq(seq_id, state) == 0:
            raise BackendError(f"llama_state_seq_set_data refused the state for seq {seq_id}")

    def take_logprobs(self) -> list:
        """The log-probabilities of the tokens produced since the last call (one entry
        per sampled token of :meth:`decode`, in its order, or per token pulled from
        :meth:`generate_alone`): ``(token_id, logprob)`` pairs, likeliest first, or
        ``None`` when ``sampling.logprobs`` is ``None``. See
        :func:`~llamabatch.llamacpp.sampler.top_logprobs`."""
        taken, self._logprobs = self._logprobs, []
        return taken

    def decode(self, spans: Sequence[Span]) -> list[int]:
        """One ``llama_decode`` of ``spans``; sample each span with ``logits=True``.

        Returns:
            the sampled token of each logits span, in span order.

        Raises:
            ValueError: no tokens, more than ``n_batch`` tokens, logits for a sequence
                that was not started (:meth:`start_seq`).
            DecodeError: ``llama_decode`` returned non-zero (``.code``).
            SampleErrors: decoded, but the grammars of some sequences allow no token
                (nothing accepted into them; the others were sampled).
            BackendError: the ``Llama`` was closed.
        """
        ctx, batch = self._open()
        total = sum(len(span.tokens) for span in spans)
        if not 0 < total <= batch.capacity:
            raise ValueError(f"spans hold {total} tokens: valid is [1, {batch.capacity}]")
        samplers = self._samplers
        batch.clear()
        rows: list[tuple[SeqSampler, int]] = []
        row_seqs: list[int] = []  # the seq id each row is sampled for
        scored: list[tuple[int, tuple[tuple[int, ...], ...]]] = []  # (first row, targets)
        for span in spans:
            for sid in ((span.seq_id,) if span.logits else ()) + tuple(span.share):
                if sid not in samplers:
                    raise ValueError(f"seq_id={sid} has no sampler: call start_seq first")
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
                        _check_ids(ids, self.n_vocab)
                        batch.request_logits(first + r)
                scored.append((first, span.targets))
            if span.logits:
                row_seqs.append(span.seq_id)
                rows.append((samplers[span.seq_id], last))
                row_seqs.extend(span.share)
                rows.extend((samplers[sid], last) for sid in span.share)
        code = ctx.decode(batch)
        if code != 0:
            raise DecodeError(f"llama_decode returned {code}: {decode_meaning(code)}", code=code)
        sampled: list[int | None] = []
        dead: dict[int, GrammarError] = {}
        self._logprobs = []
        for (sampler, i), seq_id in zip(rows, row_seqs):
            try:
                sampled.append(sampler.sample(ctx, i))
                self._logprobs.append(sampler.last_logprobs)
            except GrammarDeadEnd as exc:  # nothing accepted; the other rows go on
                dead[seq_id] = exc
                sampled.append(None)
                self._logprobs.append(None)
        self._scores = [
            tuple(
                token_logsoftmax(ctx.logits(first + r), ids) if ids else ()
                for r, ids in enumerate(targets)
            )
            for first, targets in scored
        ]
        if dead:
            raise SampleErrors(sampled, dead)
        return sampled

    def take_scores(self) -> list:
        """The label scores of the last :meth:`decode` (``Backend.take_scores``): for
        each span with ``targets``, per row the ``log_softmax`` of that row's logits at
        each target id
        (:func:`~llamabatch.llamacpp.sampler.token_logsoftmax`)."""
        taken, self._scores = self._scores, []
        return taken

    def score_alone(self, tokens: Sequence[int], targets: Sequence[Sequence[int]]) -> list:
        """Label scores through the ``Llama`` itself (``Backend.score_alone``): for each
        row with targets, the ``Llama``'s cache is cut back to what it shares with
        ``tokens`` but at most to the token before that row, the rest up to the row is
        evaluated with ``Llama.eval`` (at least two tokens,
        :data:`~llamabatch.engine.features.labels.MIN_RUN`) and the last row's logits read (on a
        sliding-window model whose window no longer holds what that row attends to, the
        cache is emptied first: :func:`~llamabatch.engine.window.window_holds`); the
        ``Llama``'s settings are put back, its cache is cut back like
        :meth:`generate_alone`'s (:meth:`release_alone`).

        Returns:
            per position of ``tokens``, ``log_softmax`` of its logits at each id of
            ``targets[j]``.

        Raises:
            ValueError: ``targets`` is not one tuple per token, or an id is outside
                [0, n_vocab).
            BackendError: the ``Llama`` was closed, or llama.cpp failed to decode.
        """
        self._check_llm()
        tokens = [int(t) for t in tokens]
        if len(targets) != len(tokens) or not tokens:
            raise ValueError(f"{len(targets)} targets for {len(tokens)} tokens; give one each")
        for ids in targets:
            _check_ids(ids, self.n_vocab)
        wanted = [j for j, ids in enumerate(targets) if ids]
        if not wanted:
            return [() for _ in tokens]
        llm = self._llm
        if self._alone_guard is None:
            self._alone_guard = LlamaGuard(llm)
        guard = self._alone_guard
        out: list[tuple[float, ...]] = [() for _ in tokens]
        try:
            for j in wanted:  # each row in an eval of MIN_RUN tokens (scoring.MIN_RUN)
                start = max(0, j + 1 - MIN_RUN)
                cached = _ffi.llm_cached_tokens(llm)
                keep = min(common_prefix(cached, tokens), start)
                if not window_holds(keep, len(cached), _ffi.llm_seq_pos_min(llm), self.n_swa):
                    keep = 0  # the window layers lost what the row attends to
                if keep < len(cached):
                    _ffi.cut_llm_cache(llm, keep)
                llm.eval(tokens[int(llm.n_tokens) : j + 1])
                row = _ffi.load().logits(_ffi.context_of(llm), -1, self.n_vocab)
                if row is None:
                    raise BackendError("cannot read the Llama's logits for label scores")
                out[j] = token_logsoftmax(row, targets[j])
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"llama-cpp-python: {exc}") from exc
        finally:
            guard.restore_settings()
        return out

    def clear(self) -> None:
        """Remove every sequence from the cache (no-op without a context)."""
        if self._ctx is not None and not self._ctx.closed:
            self._ctx.clear(range(self._ctx.limits.n_seq_max))

    # -- one at a time -----------------------------------------------------------
    def generate_alone(self, tokens: Sequence[int], sampling: SamplingParams) -> Iterator[int]:
        """``Llama.generate`` after ``tokens`` with ``sampling``'s chain and seed.

        The ``Llama``'s settings are put back (seed, sampler, penalty window) once the
        iterator ends or is closed; its KV cache keeps this item's tokens, so that the
        next item alone reuses the prefix they share (a system prompt; on a
        sliding-window model only where the window still holds it:
        :func:`~llamabatch.llamacpp.llm_state.forget_stale_window`), until
        :meth:`release_alone` puts back the caller's own cache exactly (the scheduler
        calls it at the end of a run and before a page goes back to the caller): see
        :class:`~llamabatch.llamacpp.llm_state.LlamaGuard`.

        A grammar (``grammar`` / ``json_schema`` / ``choices``) goes to ``Llama.generate``
        as a logits processor over the whole vocabulary
        (:class:`~llamabatch.llamacpp.alone_grammar.AloneGrammar`), not as a
        ``LlamaGrammar`` in its chain: the chain would accept a token into a grammar
        that allows none, and llama.cpp aborts the process there.

        Raises:
            BackendError: llama-cpp-python refused the prompt, or the ``Llama`` was
                closed (when iterated).
            GrammarError: llama.cpp refused the grammar (when iterated).
            GrammarDeadEnd: the grammar allows no token at some step (when iterated;
                nothing was accepted into it).
        """
        self._check_llm()
        llm = self._llm
        text = grammar_of(sampling)
        grammar = AloneGrammar(llm, text) if text is not None else None
        if self._alone_guard is None:
            self._alone_guard = LlamaGuard(llm)
        guard = self._alone_guard
        try:
            # Llama.generate reuses its cached prefix without asking the window
            forget_stale_window(llm, list(tokens), self.n_swa)
            llm.set_seed(sampling.effective_seed)
            llm.last_n_tokens_size = sampling.penalty_last_n  # read when the chain is built
            stream = llm.generate(
                list(tokens),
                top_k=sampling.top_k,
                top_p=sampling.top_p,
                min_p=sampling.min_p,
                typical_p=sampling.typical_p,
                temp=sampling.temperature,
                repeat_penalty=sampling.repeat_penalty,
                frequency_penalty=sampling.frequency_penalty,
                presence_penalty=sampling.presence_penalty,
                reset=True,
                logits_processor=None if grammar is None else [grammar],
            )
            try:
                while True:
                    try:
                        token = next(stream)
                    except StopIteration:
                        return
                    except (RuntimeError, ValueError) as exc:
                        raise BackendError(f"llama-cpp-python: {exc}") from exc
                    if grammar is not None:
                        grammar.accept(token)  # GrammarDeadEnd before any accept
                    if sampling.logprobs is not None:
                        self._logprobs.append(self._alone_logprobs(token, sampling.logprobs))
                    yield token
            finally:
                stream.close()
        finally:
            guard.restore_settings()
            if grammar is not None:
                grammar.close()

    def release_alone(self) -> None:
        """Put back the ``Llama``'s KV cache (cells, ``n_tokens``, ``input_ids``) and
        settings as they were before the first item completed alone since the last
        call (no-op when no item ran alone since)."""
        with self.lock:  # may come from outside a generator's turn
            guard, self._alone_guard = self._alone_guard, None
            if guard is not None:
                guard.restore()

    def _alone_logprobs(self, token: int, n: int) -> Any:
        """The logprobs of the token ``Llama.generate`` just sampled: its context's last
        row of logits (``llama_get_logits_ith(ctx, -1)``) is still the one it sampled from."""
        ctx = _ffi.context_of(self._llm)
        logits = None if ctx is None else _ffi.load().logits(ctx, -1, self.n_vocab)
        if logits is None:
            raise BackendError("cannot read the Llama's logits for logprobs")
        return top_logprobs(logits, token, n)

    # -- lifetime ----------------------------------------------------------------
    def _close_samplers(self) -> None:
        for sampler in self._samplers.values():
            sampler.close()
        self._samplers = {}
        self._logprobs = []

    def close(self) -> None:
        """Free samplers, batch and context, in that order (idempotent)."""
        self._close_samplers()
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None


def _check_ids(ids: Sequence[int], n_vocab: int) -> None:
    if any(not 0 <= t < n_vocab for t in ids):
        raise ValueError(f"target ids {tuple(ids)!r} out of range: valid is [0, {n_vocab})")

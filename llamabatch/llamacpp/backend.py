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
from ..errors import BackendError, BatchUnavailable, DecodeError, LibraryError, decode_meaning
from ..locks import llm_lock
from ..params import SamplingParams
from .batch import LlamaBatch
from .constraints import grammar_of
from .context import BatchContext, DecodeHook
from .kv_size import estimate
from .limits import check_context
from .llm_state import LlamaGuard
from .sampler import SeqSampler, top_logprobs

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
        self.can_copy = lib.can_copy_seq()
        self.kv_bytes = 0  # KV cache of the open batch context
        self._logprobs: list = []
        self.lock = llm_lock(llm)

    def capabilities(self) -> BackendCapabilities:
        """Copies, saves and loads of sequence states when the binding has
        ``llama_state_seq_*``; partial trims unless the model is recurrent or hybrid;
        the ``Llama``'s lock; :meth:`check_batch_params`."""
        return BackendCapabilities(
            max_slots=self.max_slots,
            can_copy=self.can_copy,
            partial_trim=self.partial_trim,
            can_save=self.can_copy,  # the same llama_state_seq_* functions
            lock=self.lock,
            check_batch_params=self.check_batch_params,
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
        is its bytes), for :meth:`load_seq` later (the optional ``Backend.save_seq``).

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
            BackendError: the ``Llama`` was closed.
        """
        ctx, batch = self._open()
        total = sum(len(span.tokens) for span in spans)
        if not 0 < total <= batch.capacity:
            raise ValueError(f"spans hold {total} tokens: valid is [1, {batch.capacity}]")
        samplers = self._samplers
        batch.clear()
        rows: list[tuple[SeqSampler, int]] = []
        for span in spans:
            if span.logits and span.seq_id not in samplers:
                raise ValueError(f"seq_id={span.seq_id} has no sampler: call start_seq first")
            last = batch.add_run(span.tokens, span.pos, span.seq_id, span.logits)
            if span.logits:
                rows.append((samplers[span.seq_id], last))
        code = ctx.decode(batch)
        if code != 0:
            raise DecodeError(f"llama_decode returned {code}: {decode_meaning(code)}", code=code)
        sampled = [sampler.sample(ctx, i) for sampler, i in rows]
        self._logprobs = [sampler.last_logprobs for sampler, _ in rows]
        return sampled

    def clear(self) -> None:
        """Remove every sequence from the cache (no-op without a context)."""
        if self._ctx is not None and not self._ctx.closed:
            self._ctx.clear(range(self._ctx.limits.n_seq_max))

    # -- one at a time -----------------------------------------------------------
    def generate_alone(self, tokens: Sequence[int], sampling: SamplingParams) -> Iterator[int]:
        """``Llama.generate`` after ``tokens`` with ``sampling``'s chain and seed.

        The ``Llama``'s settings are put back (seed, sampler, penalty window) once the
        iterator ends or is closed; its KV cache keeps this item's tokens, so that the
        next item alone reuses the prefix they share (a system prompt), until
        :meth:`release_alone` cuts it back to the caller's own cached tokens (the
        scheduler calls it at the end of a run and before a page goes back to the
        caller): see :class:`~llamabatch.llamacpp.llm_state.LlamaGuard`.

        A grammar (``grammar`` / ``json_schema`` / ``choices``) goes to ``Llama.generate``
        as a ``LlamaGrammar``, which puts it after penalties over the whole vocabulary;
        it is first built once here, since llama-cpp-python adds the stage without
        checking llama.cpp's NULL for a grammar it refuses.

        Raises:
            BackendError: llama-cpp-python refused the prompt, or the ``Llama`` was
                closed (when iterated).
            GrammarError: llama.cpp refused the grammar (when iterated).
        """
        self._check_llm()
        llm = self._llm
        grammar = self._llama_grammar(sampling)
        if self._alone_guard is None:
            self._alone_guard = LlamaGuard(llm)
        guard = self._alone_guard
        try:
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
                grammar=grammar,
            )
            try:
                while True:
                    try:
                        token = next(stream)
                    except StopIteration:
                        return
                    except (RuntimeError, ValueError) as exc:
                        raise BackendError(f"llama-cpp-python: {exc}") from exc
                    if sampling.logprobs is not None:
                        self._logprobs.append(self._alone_logprobs(token, sampling.logprobs))
                    yield token
            finally:
                stream.close()
        finally:
            guard.restore_settings()

    def release_alone(self) -> None:
        """Cut the ``Llama``'s KV cache back to the tokens the caller had cached before
        the first item completed alone since the last call, and put its settings back
        (no-op when no item ran alone since)."""
        with self.lock:  # may come from outside a generator's turn
            guard, self._alone_guard = self._alone_guard, None
            if guard is not None:
                guard.restore()

    def _llama_grammar(self, sampling: SamplingParams) -> Any:
        text = grammar_of(sampling)
        if text is None:
            return None
        lib = _ffi.load()
        check = lib.samplers.new_grammar(lib.vocab(_ffi.model_of(self._llm)), text)
        lib.samplers.free(check)  # llama.cpp accepted it: Llama may build it too
        from llama_cpp.llama_grammar import LlamaGrammar

        return LlamaGrammar.from_string(text, verbose=False)

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

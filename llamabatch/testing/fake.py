"""FakeBackend: the Backend protocol with deterministic replies, checks and a call log.

The backend's calls are here; what they rely on is split by concern: the caches
(:mod:`.memory`), llama.cpp's rules (:mod:`.rules`), the injected faults
(:mod:`.faults`), the reference replies (:mod:`.oracle`) and the call log
(:mod:`.records`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, TypeVar, cast

from ..engine.backend import BackendCapabilities, BatchLimits, Span
from ..engine.seq_errors import GrammarDeadEnd, SampleErrors
from ..errors import BackendError, BatchUnavailable, GrammarError
from ..params import SamplingParams
from . import oracle
from .faults import FailAlone, decode_error, fails_alone, keeps_tokens
from .memory import FakeMemory, SlotState
from .records import (
    AloneCall,
    Call,
    ClearCall,
    CloseCall,
    CopyCall,
    DecodeCall,
    Expected,
    LoadSeqCall,
    OpenBatchCall,
    SeqLog,
    StartSeqCall,
    Tokens,
    TrimCall,
    read_seqs,
)
from .replies import EOG_ID, HashReply, ReplySpec, byte_text, byte_tokens
from .rules import FakeBackendViolation, Rules

__all__ = ["FakeBackend", "FakeBackendViolation"]

C = TypeVar("C", bound=Call)


class FakeBackend:
    """A :class:`~llamabatch.engine.backend.Backend` with deterministic replies and no library.

    A sequence (and an item alone) generates ``reply(prompt)[0]``, ``reply(prompt)[1]``,
    … where ``prompt`` is every token its cache holds at its first logits after
    ``start_seq`` (what was reused or copied, then what was fed), then ``min(eog_ids)``
    forever (``filler`` when ``eog_ids`` is empty) — independent of batching, of the
    cache it came from and of the sampling parameters. A scheduler that believes a
    cache holds something it does not gets another reply, which the tests see.

    The cache of each slot is modelled token by token: ``trim`` cuts it, ``copy_seq``
    copies it, ``clear`` empties it, ``decode`` appends; positions must continue it.
    With ``recurrent=True`` it behaves like a recurrent / hybrid memory: ``trim`` to a
    position inside the cache (other than 0) is refused (returns False) and leaves the
    cache unknown until it is emptied.

    With ``n_swa`` > 0 it models a sliding-window model whose window layers keep only
    the last ``n_swa`` positions (llama.cpp with ``swa_full=False``): after each decode a
    slot's window layers hold the positions ``> len(cache) - n_swa`` (the oldest first
    out), ``seq_pos_min`` says the oldest one held, and ``trim``, ``copy_seq`` and the
    saved states keep that. A sequence decoded at a position whose window (the
    ``n_swa - 1`` positions before it) is not all held sees a hole, as llama.cpp does:
    its reply is then the reply of its cache without the missing positions (another
    reply, no error).

    Label scores (``Span.targets``, :meth:`take_scores`, :meth:`score_alone`) come from
    a deterministic model of log-probabilities (:meth:`token_logprob`), over a hole
    without its positions too; a span's
    ``share`` samples the other sequences' first token from the same row.

    Args:
        reply: see :data:`~llamabatch.testing.replies.ReplySpec`; default
            :class:`HashReply` ``(seed=0, max_len=12)``.
        eog_ids: end-of-generation ids (``Backend.eog_ids``).
        n_vocab: vocabulary size; the default tokenizer needs >= 256.
        n_ctx: tokens of the one-at-a-time context (prompt + reply alone).
        max_slots: the most sequences ``open_batch`` accepts.
        max_tokens: the generator's ``max_tokens`` if known: decoding a sequence that
            already sampled that many tokens is then a violation (an item's own
            ``SamplingParams.max_tokens`` replaces it for that item, as in the scheduler).
        ctx_pad: ``open_batch`` rounds n_ctx_seq up to a multiple of this (llama.cpp: 256).
        n_batch_cap: ``open_batch`` allocates at most this n_batch (``None``: as asked).
        filler: the token emitted after the reply when ``eog_ids`` is empty.
        tokenizer, detokenizer: replace the byte-level defaults.
        fail_open: ``open_batch`` raises ``BatchUnavailable``.
        fail_decode_at, fail_code: the ``fail_decode_at``-th decode call (1-based; or
            each call whose number is in a collection of them) raises
            ``DecodeError(code=fail_code)``; with code 2 or < -1 its tokens stay in the KV
            cache (as in llama.cpp), with 1 or -1 nothing changes. Settable later.
        fail_exc: raise this exception (e.g. ``MemoryError()``) instead of
            ``DecodeError`` at ``fail_decode_at``; nothing is decoded. Settable later.
        fail_copy_at: the ``fail_copy_at``-th ``copy_seq`` (1-based) raises
            ``BackendError``; the destination's cache is then unknown. Settable later.
        fail_state_at: the ``fail_state_at``-th ``save_seq`` or ``load_seq`` (1-based,
            counted together) raises ``BackendError``; a failed load leaves the cache
            unknown. Settable later.
        max_kv_tokens: ``open_batch`` raises ``BatchUnavailable`` when ``slots *
            n_ctx_seq`` (after padding) exceeds it, as llama.cpp returns NULL for a KV
            cache too large for memory (``None``: no limit); a failed ``open_batch`` may
            be tried again. Settable later.
        refuse_grammar: ``start_seq`` and ``generate_alone`` raise ``GrammarError`` for an
            item with a constraint (``SamplingParams.constraint``), as llama.cpp refuses a
            bad grammar. Settable later.
        dead_end_at: an item with a constraint reaches a grammar dead end after this many
            reply tokens: ``decode`` raises
            :class:`~llamabatch.engine.seq_errors.SampleErrors` for its sequence (the
            others are sampled), ``generate_alone`` raises
            :class:`~llamabatch.engine.seq_errors.GrammarDeadEnd`. Settable later.
        recurrent: refuse partial trims (see above).
        declares_recurrent: with ``recurrent``, say so up front (``partial_trim`` is
            False); else the scheduler must learn it from a refused trim.
        n_swa: the sliding window in positions (see above; 0: every position kept).
            ``BackendCapabilities.n_swa`` is this.
        fail_alone: prompts (token tuples) or a predicate on them whose
            ``generate_alone`` raises ``BackendError`` when iterated. Settable later.
        check: check every call against llama.cpp's rules and log it. ``False`` is a fast
            mode for benchmarks: no checks, no log (``num_decode_calls`` still counts).

    Attributes:
        log: every call, in order, a :class:`~llamabatch.testing.records.Call` each
            (:class:`OpenBatchCall`, :class:`StartSeqCall`, :class:`TrimCall`,
            :class:`CopyCall`, :class:`DecodeCall`, :class:`ClearCall`,
            :class:`AloneCall`, :class:`CloseCall`).
        partial_trim: see :class:`~llamabatch.engine.backend.BackendCapabilities`.
        violations: the message of every :class:`FakeBackendViolation` raised.
        limits: what ``open_batch`` returned, or ``None``.

    Raises:
        FakeBackendViolation (from the batch calls and the iterators of
            ``generate_alone``): more than n_batch tokens or none in a decode; a seq id
            outside [0, n_seq_max); a sequence decoded without ``start_seq``, or whose
            cache is unknown (a refused trim, a failed copy); a position that does not
            continue the sequence's cache; a sequence past n_ctx_seq; a token outside
            [0, n_vocab); prompt tokens fed after the prompt ended; a decoded token
            other than the one just sampled, or without logits; a sequence decoded after
            it finished; a call with no batch context or after ``close``; a second
            ``open_batch``; a token pulled alone after an EOG, past ``max_tokens`` or
            past the context.
    """

    def __init__(
        self,
        reply: ReplySpec | None = None,
        *,
        eog_ids: Collection[int] = (EOG_ID,),
        n_vocab: int = 260,
        n_ctx: int = 4096,
        max_slots: int = 64,
        max_tokens: int | None = None,
        ctx_pad: int = 1,
        n_batch_cap: int | None = None,
        filler: int | None = None,
        tokenizer: Callable[[str], list[int]] | None = None,
        detokenizer: Callable[[Sequence[int]], str] | None = None,
        fail_open: bool = False,
        fail_decode_at: int | Collection[int] | None = None,
        fail_code: int = -1,
        fail_exc: BaseException | None = None,
        fail_copy_at: int | None = None,
        fail_state_at: int | None = None,
        max_kv_tokens: int | None = None,
        refuse_grammar: bool = False,
        dead_end_at: int | None = None,
        recurrent: bool = False,
        declares_recurrent: bool = True,
        n_swa: int = 0,
        fail_alone: FailAlone | None = None,
        check: bool = True,
    ) -> None:
        self._kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.max_slots = max_slots
        self.eog_ids = frozenset(eog_ids)
        self.max_tokens = max_tokens
        self.ctx_pad = ctx_pad
        self.n_batch_cap = n_batch_cap
        self.filler = n_vocab - 1 if filler is None else filler
        self._tokenizer = tokenizer
        self._detokenizer = detokenizer
        self.reply: ReplySpec = HashReply(0, 12, n_vocab) if reply is None else reply
        self.fail_open = fail_open
        self.fail_decode_at = fail_decode_at
        self.fail_code = fail_code
        self.fail_exc = fail_exc
        self.fail_copy_at = fail_copy_at
        self.fail_state_at = fail_state_at
        self.max_kv_tokens = max_kv_tokens
        self.refuse_grammar = refuse_grammar
        self.dead_end_at = dead_end_at
        self.num_states = 0
        self.recurrent = recurrent
        self.partial_trim = not (recurrent and declares_recurrent)
        self.n_swa = n_swa
        self.num_copies = 0
        self.fail_alone = fail_alone
        self.check = check
        self.log: list[Call] = []
        self.limits: BatchLimits | None = None
        self.num_decode_calls = 0
        self.closed = False
        self._memory = FakeMemory(recurrent, n_swa)
        self._rules = Rules()
        self._open_tried = False
        self._logprobs: list[tuple[tuple[int, float], ...] | None] = []
        self._scores: list[tuple[tuple[float, ...], ...]] = []
        self._rows: dict[Tokens, tuple[list[float], float]] = {}
        self.can_share_rows = True

    #: The fake allocates nothing and has no model to lose (``Backend`` attributes).
    kv_bytes = 0
    llm_closed = False

    def capabilities(self) -> BackendCapabilities:
        """Copies, saves and loads of sequence states; partial trims unless the fake is
        recurrent and says so (``declares_recurrent``); no lock of its own; no
        limits on the batch parameters beyond ``max_slots``; label scores, shared rows
        (``can_share_rows``, settable before the generator is made) and ``n_swa``."""
        return BackendCapabilities(
            max_slots=self.max_slots,
            can_copy=True,
            partial_trim=self.partial_trim,
            can_save=True,
            can_score=True,
            can_share_rows=self.can_share_rows,
            n_swa=self.n_swa,
        )

    def release_alone(self) -> None:
        """Nothing to give back: the fake keeps no state between items alone."""

    def __repr__(self) -> str:
        defaults = FakeBackend.__init__.__kwdefaults__ or {}
        args = [repr(self._kwargs["reply"])] + [
            f"{k}={v!r}" for k, v in self._kwargs.items() if k != "reply" and defaults.get(k) != v
        ]
        return f"FakeBackend({', '.join(args)})"

    @property
    def violations(self) -> list[str]:
        """The message of every :class:`FakeBackendViolation` raised, in order."""
        return self._rules.violations

    # -- text ------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """One token per UTF-8 byte (or the given tokenizer); ``""`` gives ``[]``.

        Raises:
            BackendError: a token id would not be below ``n_vocab``.
        """
        tokens = (self._tokenizer or byte_tokens)(text)
        if any(not 0 <= t < self.n_vocab for t in tokens):
            raise BackendError(f"fake: {text!r} has a token outside [0, {self.n_vocab})")
        return tokens

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Bytes for ids < 256 and ``<|id|>`` for the others, decoded at once (UTF-8,
        invalid bytes replaced), or the given detokenizer."""
        return (self._detokenizer or byte_text)(tokens)

    # -- the oracle ------------------------------------------------------------------
    def reply_of(self, prompt: Sequence[int]) -> Tokens:
        """The configured reply to the prompt ``prompt`` (token ids), before the stop
        rule (:func:`.oracle.reply_of`)."""
        return oracle.reply_of(self, prompt)

    def prompt_tokens(self, prompt: object) -> Tokens:
        """The token ids the scheduler should make of ``prompt`` (str, UTF-8 bytes, ids).

        Raises:
            ValueError: the item is an error (:func:`.oracle.prompt_tokens`).
        """
        return oracle.prompt_tokens(self, prompt)

    def expected(
        self, prompt: object, max_tokens: int, sampling: SamplingParams | None = None
    ) -> Expected:
        """What the scheduler should return for ``prompt`` completed alone: the engine's
        stop rule on the reply stream (:func:`.oracle.expected`; ``sampling`` gives the
        stop strings and stop ids). ``fail_alone`` is not considered (see
        :meth:`fails_alone`).

        Raises:
            ValueError: the item is an error (see :meth:`prompt_tokens`).
        """
        return oracle.expected(self, prompt, max_tokens, sampling)

    def fails_alone(self, prompt: Sequence[int]) -> bool:
        """True when ``fail_alone`` makes ``generate_alone(prompt)`` raise."""
        return fails_alone(self.fail_alone, tuple(prompt))

    # -- the batch context -----------------------------------------------------------
    def _open_limits(self, what: str) -> BatchLimits:
        return self._rules.require_open(self.closed, self.limits, what)

    def open_batch(self, slots: int, n_ctx_seq: int, n_batch: int) -> BatchLimits:
        """Allocate ``slots`` sequences; n_ctx_seq rounded up to ``ctx_pad``.

        Raises:
            BatchUnavailable: ``fail_open``, ``slots`` above ``max_slots``, or more than
                ``max_kv_tokens``.
            FakeBackendViolation: called after it created a context, after ``close``, or
                with a value < 1.
        """
        rules = self._rules
        rules.require(self.limits is None, "open_batch called after it created a context")
        rules.require(not self.closed, "open_batch after close()")
        rules.require(min(slots, n_ctx_seq, n_batch) >= 1, "open_batch with a value < 1")
        self._open_tried = True
        n_padded = -(-n_ctx_seq // self.ctx_pad) * self.ctx_pad
        too_big = self.max_kv_tokens is not None and slots * n_padded > self.max_kv_tokens
        if self.fail_open or slots > self.max_slots or too_big:
            if self.check:
                self.log.append(OpenBatchCall(slots, n_ctx_seq, n_batch, None))
            why = (
                "fail_open=True"
                if self.fail_open
                else f"slots > {self.max_slots}"
                if slots > self.max_slots
                else f"slots * n_ctx_seq = {slots * n_padded} > max_kv_tokens={self.max_kv_tokens}"
            )
            raise BatchUnavailable(f"fake: the batch context cannot be created ({why})")
        n_ctx_seq = n_padded
        n_ctx = n_ctx_seq * slots
        n_batch = min(n_batch, n_ctx, self.n_batch_cap or n_batch)
        self.limits = BatchLimits(slots, n_ctx_seq, n_batch, n_ctx)
        self._memory.allocate(slots)
        if self.check:
            self.log.append(OpenBatchCall(slots, n_ctx_seq, n_batch, self.limits))
        return self.limits

    @property
    def kv_lengths(self) -> tuple[int, ...]:
        """Tokens in each slot's cache (empty before ``open_batch``)."""
        return tuple(len(s.kv) for s in self._memory.slots)

    def cached(self, seq_id: int) -> Tokens:
        """The tokens slot ``seq_id``'s cache holds, positions 0, 1, ..."""
        return tuple(self._memory.slots[seq_id].kv)

    def seq_pos_min(self, seq_id: int) -> int:
        """``Backend.seq_pos_min``: the oldest position slot ``seq_id`` holds in every
        layer (its window layers' with ``n_swa`` > 0), -1 when it holds none.

        Raises:
            FakeBackendViolation: no batch context, ``seq_id`` out of range.
        """
        self._seq(seq_id, "seq_pos_min")
        return self._memory.pos_min(seq_id)

    def _seen(self, seq: SlotState) -> Tokens:
        """The prompt a sequence's first logits see: its cache, less any hole."""
        return seq.seen()

    def _seq(self, seq_id: int, what: str) -> SlotState:
        self._rules.require_seq_id(seq_id, self._open_limits(what), what)
        return self._memory.slots[seq_id]

    def start_seq(self, seq_id: int, sampling: SamplingParams) -> None:
        """Give ``seq_id`` a fresh sampler state (its cache stays).

        Raises:
            FakeBackendViolation: no batch context, or ``seq_id`` out of range.
        """
        seq = self._seq(seq_id, "start_seq")
        self._grammar_fault(sampling)
        if self.check:
            self.log.append(StartSeqCall(seq_id, sampling, tuple(seq.kv)))
        seq.restart(sampling)

    # -- label scores (a deterministic model of log-probabilities) -------------------
    def token_logprob(self, context: Sequence[int], token: int) -> float:
        """The fake model's ``log_softmax(logits)[token]`` after ``context`` (every token
        before it, from position 0): logits drawn uniformly in [0, 4) by a generator
        seeded with the context, so every path (batched, alone, cached) gives the same
        value for the same context, and a wrong cache gives another."""
        key = tuple(context)
        row = self._rows.get(key)
        if row is None:
            rng = random.Random(hash(key))
            logits = [rng.uniform(0.0, 4.0) for _ in range(self.n_vocab)]
            top = max(logits)
            row = (logits, top + math.log(sum(math.exp(v - top) for v in logits)))
            if len(self._rows) > 4096:
                self._rows.clear()
            self._rows[key] = row
        logits, logz = row
        return logits[token] - logz

    def take_scores(self) -> list[tuple[tuple[float, ...], ...]]:
        """``Backend.take_scores``: for each span of the last decode with ``targets``,
        per row the :meth:`token_logprob` of each target id."""
        taken, self._scores = self._scores, []
        return taken

    def _span_scores(
        self, kv: Sequence[int], span: Span, hole: tuple[int, int] | None = None
    ) -> tuple[tuple[float, ...], ...]:
        """``kv`` holds the sequence's cache before ``span``; a row past a ``hole`` in
        its window sees its context without the missing positions (another score, as
        llama.cpp gives, no error)."""
        targets = span.targets or ()
        self._rules.require(
            len(targets) == len(span.tokens) and not span.logits,
            f"seq {span.seq_id}: targets need one tuple per token and logits=False",
        )
        path = list(kv) + list(span.tokens)
        out = []
        for r, ids in enumerate(targets):
            self._rules.require(
                all(0 <= t < self.n_vocab for t in ids),
                f"seq {span.seq_id}: a target outside [0, {self.n_vocab})",
            )
            context = path[: span.pos + r + 1]
            if hole is not None and hole[1] <= len(context):
                context = context[: hole[0]] + context[hole[1] :]
            out.append(tuple(self.token_logprob(context, t) for t in ids))
        return tuple(out)

    def score_alone(
        self, tokens: Sequence[int], targets: Sequence[Sequence[int]]
    ) -> list[tuple[float, ...]]:
        """``Backend.score_alone``: per position of ``tokens``, the
        :meth:`token_logprob` of each id of ``targets[j]`` after ``tokens[:j + 1]``.

        Raises:
            BackendError: ``fail_alone`` matches ``tokens``, or they do not fit ``n_ctx``.
            FakeBackendViolation: ``targets`` is not one tuple per token.
        """
        tokens = tuple(tokens)
        self._rules.require(len(targets) == len(tokens), "score_alone: one targets tuple per token")
        if self.fails_alone(tokens) or not tokens or len(tokens) >= self.n_ctx:
            raise BackendError("fake: cannot score alone")
        if self.check:
            self.log.append(AloneCall(tokens, SamplingParams(temperature=0.0)))
        return [
            tuple(self.token_logprob(tokens[: j + 1], t) for t in ids)
            for j, ids in enumerate(targets)
        ]

    def take_logprobs(self) -> list[tuple[tuple[int, float], ...] | None]:
        """``Backend.take_logprobs``: one entry per token sampled since the last call;
        the fake's replies are certain, so each is ``((token, 0.0),)`` (the chosen
        token, probability 1), or ``None`` without ``sampling.logprobs``."""
        taken, self._logprobs = self._logprobs, []
        return taken

    def _note_logprobs(self, sampling: SamplingParams | None, token: int) -> None:
        if sampling is not None and sampling.logprobs is not None:
            self._logprobs.append(((token, 0.0),))
        else:
            self._logprobs.append(None)

    def trim(self, seq_id: int, n_keep: int) -> bool:
        """Keep positions [0, n_keep); refused (False) on a recurrent fake when
        ``0 < n_keep < len(cache)``, which leaves the cache unknown.

        Raises:
            FakeBackendViolation: no batch context, ``seq_id`` or ``n_keep`` out of range.
        """
        self._seq(seq_id, "trim")
        self._rules.require(isinstance(n_keep, int) and n_keep >= 0, f"trim to {n_keep!r}")
        ok = self._memory.trim(seq_id, n_keep)
        if self.check:
            self.log.append(TrimCall(seq_id, n_keep, ok))
        return ok

    def copy_seq(self, src: int, dst: int) -> None:
        """Make ``dst``'s cache a copy of ``src``'s.

        Raises:
            BackendError: this is the ``fail_copy_at``-th copy (``dst`` is then unknown).
            FakeBackendViolation: no batch context, an id out of range, ``src == dst``.
        """
        a, b = self._seq(src, "copy_seq"), self._seq(dst, "copy_seq")
        self._rules.require(src != dst, f"copy_seq of seq {src} onto itself")
        self.num_copies += 1
        if self.num_copies == self.fail_copy_at:
            b.corrupt = True
            raise BackendError(f"fake: copy_seq failed (fault at copy {self.num_copies})")
        if self.check:
            self.log.append(CopyCall(src, dst, len(a.kv)))
        self._memory.copy(src, dst)

    def save_seq(self, seq_id: int) -> bytes:
        """``Backend.save_seq``: the slot's cache as bytes (:meth:`.memory.FakeMemory.save`).

        Raises:
            BackendError: this is the ``fail_state_at``-th save or load.
            FakeBackendViolation: no batch context, an id out of range.
        """
        self._seq(seq_id, "save_seq")
        self._state_fault("save_seq")
        return self._memory.save(seq_id)

    def load_seq(self, seq_id: int, state: bytes) -> None:
        """``Backend.load_seq``: the slot's cache becomes ``state``.

        Raises:
            BackendError: this is the ``fail_state_at``-th save or load (the cache is then
                unknown).
            FakeBackendViolation: no batch context, an id out of range, not a state of
                :meth:`save_seq`.
        """
        seq = self._seq(seq_id, "load_seq")
        self._rules.require(
            FakeMemory.is_state(state),
            f"load_seq of {type(state).__name__}, not a saved state",
        )
        try:
            self._state_fault("load_seq")
        except BackendError:
            seq.corrupt = True
            raise
        self._memory.load(seq_id, state)
        if self.check:
            self.log.append(LoadSeqCall(seq_id, tuple(seq.kv)))

    def _state_fault(self, what: str) -> None:
        self.num_states += 1
        if self.num_states == self.fail_state_at:
            raise BackendError(f"fake: {what} failed (fault at state call {self.num_states})")

    def clear(self) -> None:
        """Empty every slot's cache; the sequences must be started again before they
        are decoded.

        Raises:
            FakeBackendViolation: no batch context.
        """
        limits = self._open_limits("clear")
        if self.check:
            self.log.append(ClearCall())
        self._memory.clear(limits.n_seq_max)

    def decode(self, spans: Sequence[Span]) -> list[int]:
        """Decode ``spans`` and sample one token per span with logits (see the class).

        Raises:
            DecodeError: this is the ``fail_decode_at``-th call (code ``fail_code``),
                or ``fail_exc`` then.
            FakeBackendViolation: the plan breaks a rule (see the class).
        """
        self.num_decode_calls += 1
        if self.check:
            limits = self._open_limits("decode")
            self._rules.check_plan(spans, limits, self._memory.slots, self.n_vocab)
        if self._decode_fails(self.num_decode_calls):
            return self._fail(spans)
        seqs = self._memory.slots
        sampled: list[int | None] = []
        dead: dict[int, GrammarError] = {}
        self._logprobs, self._scores = [], []
        for span in spans:
            seq = seqs[span.seq_id]
            kv = list(seq.kv)
            self._memory.append(span.seq_id, span.pos, span.tokens)
            if span.targets is not None:  # after append: over a hole it notes
                self._scores.append(self._span_scores(kv, span, seq.hole))
            if span.logits:
                if seq.reply is None:
                    seq.reply = self.reply_of(self._seen(seq))
                if self._is_dead_end(seq.sampling, seq.n_sampled):
                    dead[span.seq_id] = self._dead_end(seq.n_sampled)
                    seq.is_done = True  # decoding it again is a violation
                    sampled.append(None)
                    self._logprobs.append(None)
                    for sid in span.share:  # the same row: the same dead end
                        dead[sid] = self._dead_end(seq.n_sampled)
                        sampled.append(None)
                        self._logprobs.append(None)
                    continue
                first = seq.n_sampled == 0
                token = oracle.token_at(self, seq.reply, seq.n_sampled)
                seq.n_sampled += 1
                seq.last = token
                seq.is_done = token in self.eog_ids or seq.n_sampled == self._cap(seq.sampling)
                sampled.append(token)
                self._note_logprobs(seq.sampling, token)
                for sid in span.share:  # the same row, another chain: the same reply
                    self._rules.require(first, f"seq {span.seq_id}: share after its first token")
                    other = seqs[sid]
                    other.reply, other.n_sampled, other.last = seq.reply, 1, token
                    other.is_done = seq.is_done
                    sampled.append(token)
                    self._note_logprobs(other.sampling, token)
        if self.check:
            self.log.append(
                # None where a grammar reached a dead end (SampleErrors)
                DecodeCall(
                    self.num_decode_calls, self._records(spans), cast(Tokens, tuple(sampled)), None
                )
            )
        if dead:
            raise SampleErrors(sampled, dead)
        return sampled  # type: ignore[return-value]  # no None without a dead end

    def _decode_fails(self, k: int) -> bool:
        at = self.fail_decode_at
        if at is None:
            return False
        return k == at if isinstance(at, int) else k in at

    # -- grammar faults --------------------------------------------------------------
    def _grammar_fault(self, sampling: SamplingParams | None) -> None:
        if self.refuse_grammar and sampling is not None and sampling.constraint is not None:
            raise GrammarError(f"fake: the {sampling.constraint} is refused (refuse_grammar)")

    def _is_dead_end(self, sampling: SamplingParams | None, n_sampled: int) -> bool:
        return (
            self.dead_end_at is not None
            and sampling is not None
            and sampling.constraint is not None
            and n_sampled == self.dead_end_at
        )

    @staticmethod
    def _dead_end(n_sampled: int) -> GrammarDeadEnd:
        return GrammarDeadEnd("fake: the grammar allows no token here (dead_end_at)", n_sampled)

    def _fail(self, spans: Sequence[Span]) -> list[int]:
        if self.fail_exc is not None:
            if self.check:
                self.log.append(DecodeCall(self.num_decode_calls, self._records(spans), (), -100))
            raise self.fail_exc
        code = self.fail_code
        if keeps_tokens(code):  # processed ubatches stay in memory
            for span in spans:
                self._memory.append(span.seq_id, span.pos, span.tokens)
        if self.check:
            self.log.append(DecodeCall(self.num_decode_calls, self._records(spans), (), code))
        raise decode_error(code, self.num_decode_calls)

    def _cap(self, sampling: SamplingParams | None) -> int | None:
        """Most tokens one item may sample: its own ``max_tokens``, else the fake's."""
        own = sampling.max_tokens if sampling is not None else None
        return own or self.max_tokens

    @staticmethod
    def _records(spans: Sequence[Span]) -> tuple[Span, ...]:
        return tuple(
            Span(s.seq_id, s.pos, tuple(s.tokens), s.logits, s.targets, tuple(s.share))
            for s in spans
        )

    # -- one at a time ---------------------------------------------------------------
    def generate_alone(self, tokens: Sequence[int], sampling: SamplingParams) -> Iterator[int]:
        """The reply stream of ``tokens``, one token per ``next``.

        Raises (when iterated):
            BackendError: ``fail_alone`` matches, the prompt is empty, has an id outside
                [0, n_vocab) or does not fit ``n_ctx``.
            FakeBackendViolation: a token pulled after an EOG token, past ``max_tokens``
                or past the context (``n_ctx - n_prompt + 1`` tokens at most).
        """
        call = AloneCall(tuple(tokens), sampling)
        if self.check:
            self.log.append(call)
        return self._alone(call)

    def _alone(self, call: AloneCall) -> Iterator[int]:
        prompt = call.tokens
        try:
            problem = (
                "fail_alone"
                if self.fails_alone(prompt)
                else "empty prompt"
                if not prompt
                else "token outside the vocabulary"
                if any(not 0 <= t < self.n_vocab for t in prompt)
                else f"{len(prompt)} tokens >= n_ctx={self.n_ctx}"
                if len(prompt) >= self.n_ctx
                else None
            )
            if problem is not None:
                call.error = f"fake: cannot complete alone ({problem})"
                raise BackendError(call.error)
            self._grammar_fault(call.sampling)
            reply, last = self.reply_of(prompt), None
            while True:
                i = call.n_pulled
                if self._is_dead_end(call.sampling, i):
                    raise self._dead_end(i)
                if self.check:
                    self._rules.check_alone_pull(
                        last, i, len(prompt), self.eog_ids, self._cap(call.sampling), self.n_ctx
                    )
                last = oracle.token_at(self, reply, i)
                call.n_pulled += 1
                self._logprobs = []
                self._note_logprobs(call.sampling, last)
                yield last
        finally:
            call.closed = True

    def close(self) -> None:
        """Free the batch context (idempotent)."""
        if self.check:
            self.log.append(CloseCall())
        self.closed = True

    # -- reading the log -------------------------------------------------------------
    def copy(self, **changes: Any) -> FakeBackend:
        """A fresh fake (empty log, no batch context) with this one's arguments, some
        replaced: ``fake.copy(fail_decode_at=None)``."""
        return FakeBackend(**{**self._kwargs, **changes})

    def calls(self, kind: type[C]) -> list[C]:
        """The logged calls of one kind, e.g. ``fake.calls(DecodeCall)``."""
        return [c for c in self.log if isinstance(c, kind)]

    def seqs(self) -> list[SeqLog]:
        """Every item run in a slot, read back from the log (see :func:`read_seqs`)."""
        return read_seqs(self.log)

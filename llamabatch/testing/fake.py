"""FakeBackend: the Backend protocol with deterministic replies, checks and a call log; what
it relies on is split by concern (:mod:`.memory`, :mod:`.rules`, :mod:`.faults`,
:mod:`.oracle`, :mod:`.records`)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Hashable, Iterator, Sequence
from typing import Any, TypeVar, cast

from ..engine.backend import BackendInfo, BatchLimits, SeqState, SlotMemory
from ..engine.step import SeqOutput, Span, StepResult, Targets
from ..errors import BackendError, BatchUnavailable, GrammarDeadEnd, GrammarError
from ..llamacpp import window
from ..llamacpp.ubatch import decode_calls, split_equal
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

    A sequence (and an item alone) generates ``reply(prompt)``, then ``min(eog_ids)`` forever
    (``filler`` without EOG ids), where ``prompt`` is every token its cache holds at its first
    logits after ``start_seq`` (reused, copied, then fed), whatever the batching or the sampling:
    a scheduler wrong about a cache gets another reply, which the tests see.

    Each slot's cache is modelled token by token (``trim`` cuts it, ``copy_seq`` copies it,
    ``clear`` empties it, ``run`` appends; positions must continue it). ``recurrent`` refuses
    a ``trim`` inside the cache (other than to 0) and leaves the cache unknown until emptied.
    ``n_swa`` > 0 models a sliding window (``swa_full=False``): the window layers keep the last
    ``n_swa`` positions, ``cut_floor`` says where a cut still works, and a row decoded over a
    hole sees its cache without the missing positions. Label scores come from
    :meth:`token_logprob`.

    Args:
        reply: a :data:`~llamabatch.testing.replies.ReplySpec`; default
            :class:`HashReply` ``(seed=0, max_len=12)``.
        eog_ids, n_vocab: the vocabulary (the default tokenizer needs ``n_vocab`` >= 256).
        n_ctx: tokens of the one-at-a-time context (prompt + reply alone).
        max_slots: the most sequences ``open`` accepts.
        max_tokens: the generator's ``max_tokens`` if known: decoding a sequence that sampled
            that many tokens (or its own ``SamplingParams.max_tokens``) is a violation.
        ctx_pad: ``open`` rounds n_ctx_seq up to a multiple of this (llama.cpp: 256).
        n_batch_cap: ``open`` allocates at most this n_batch (``None``: as asked).
        filler: the token emitted after the reply when ``eog_ids`` is empty.
        tokenizer, detokenizer: replace the byte-level defaults.
        fail_open: ``open`` raises ``BatchUnavailable``.
        fail_decode_at, fail_code: the ``fail_decode_at``-th ``run`` (1-based; or each one
            whose number is in a collection) raises ``DecodeError(code=fail_code)``; with
            code 2 or < -1 its tokens stay in the cache, as in llama.cpp.
        fail_exc: raise this (e.g. ``MemoryError()``) at ``fail_decode_at`` instead.
        fail_copy_at: the ``fail_copy_at``-th ``copy_seq`` raises ``BackendError`` (the
            destination is then unknown).
        fail_state_at: the ``fail_state_at``-th ``save_seq`` or ``load_seq`` (counted together)
            raises ``BackendError`` (a failed load leaves the cache unknown).
        max_kv_tokens: ``open`` raises ``BatchUnavailable`` above ``slots * n_ctx_seq``
            tokens (after padding), as llama.cpp returns NULL for a KV cache too large.
        refuse_grammar: ``start_seq`` and ``run_alone`` raise ``GrammarError`` for an item with a
            constraint.
        dead_end_at: an item with a constraint reaches a grammar dead end after this many
            reply tokens (its ``SeqOutput.error``).
        complete_at: an item with a constraint finds its grammar complete after this many
            reply tokens, with no end-of-generation token to end it
            (``SeqOutput.grammar_complete``).
        recurrent, declares_recurrent: refuse partial trims; say so up front
            (``info.partial_trim`` False) or let the engine learn it.
        n_swa: the sliding window in positions (0: every position kept).
        fail_alone: prompts (token tuples) or a predicate on them whose ``run_alone`` raises
            ``BackendError`` when iterated.
        shapes: shorten ``precise`` spans and split a step into decode calls as
            ``LlamaBackend`` does (:func:`~llamabatch.llamacpp.ubatch.decode_calls`); False
            runs each step as planned, in one call.
        check: check every call against llama.cpp's rules and log it; ``False`` is a fast
            mode for benchmarks (``num_decode_calls`` still counts).
        device: ``info.device``, the accelerator the fake claims to run on (``None``: the
            host), so the generator's device check runs by default.
        corrupt_mixed: nats added to every score of a call that decodes a prompt (a span of
            several tokens) beside another sequence's one-token step, as a GPU backend with
            a multi-sequence defect gives other logits there (0: none).
        one_per_seq_noise: nats added to the score and row maximum of every row decoded in a
            ubatch of one token per sequence (llama.cpp's ``split_equal``), as llama.cpp's
            CPU kernels round such a row differently on some CPUs (0: none).
        corrupt_long_prefill: nats added to every score of a call that decodes a prompt past
            ``n_batch`` (= ``n_ubatch``) tokens (a span of several tokens ending beyond
            position ``n_batch``) beside another sequence's one-token step, as llama.cpp
            #28211 (0: none).
        corrupt_refill: nats added to the scores of a prompt decoded from position 0 into a
            slot emptied by ``trim(seq_id, 0)`` while another slot held a cache, in a call
            beside another sequence's one-token step, as a leak between requests
            (llama.cpp #28056; 0: none).
        backend_sampling: ``info.backend_sampling``: chains without a constraint started
            with ``host=False`` then "sample on the device" (``StepResult.backend_sampled``
            counts their rows; ``False``: none do).
        backend_tokens_differ: a row sampled on the device gives the next token id instead
            of the reply's, as a device whose sampling differs from the host chain's.
        compute_key: ``info.compute_key`` (device checks reused in the process for an equal
            key; ``None``: never).
        backend_sampling_off: ``info.backend_sampling_off`` (why it is off, for ``Stats``).
        free_bytes, kv_bytes_per_token: with ``free_bytes``, ``info.slot_memory`` reports
            that much free memory on ``device`` (or the host) and ``kv_bytes_per_token`` per
            cached token of a slot (``slots="auto"``); ``None``: not reported.

    The fault arguments may also be set on the instance later.

    Attributes:
        log: every call, in order (:mod:`~llamabatch.testing.records`).
        violations: the message of every :class:`FakeBackendViolation` raised.
        limits: what ``open`` returned, or ``None``.

    Raises:
        FakeBackendViolation: a call that breaks a rule llama.cpp enforces or crashes on
            (:mod:`~llamabatch.testing.rules`), or a token pulled alone after an EOG, past
            ``max_tokens`` or past the context.
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
        complete_at: int | None = None,
        recurrent: bool = False,
        declares_recurrent: bool = True,
        n_swa: int = 0,
        fail_alone: FailAlone | None = None,
        shapes: bool = True,
        check: bool = True,
        device: str | None = None,
        corrupt_mixed: float = 0.0,
        one_per_seq_noise: float = 0.0,
        corrupt_long_prefill: float = 0.0,
        corrupt_refill: float = 0.0,
        backend_sampling: bool | None = False,
        backend_tokens_differ: bool = False,
        compute_key: Hashable | None = None,
        backend_sampling_off: str | None = None,
        free_bytes: int | None = None,
        kv_bytes_per_token: int = 1024,
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
        self.complete_at = complete_at
        self.num_states = 0
        self.recurrent = recurrent
        self.partial_trim = not (recurrent and declares_recurrent)
        self.n_swa = n_swa
        self.num_copies = 0
        self.fail_alone = fail_alone
        self.shapes = shapes
        self.check = check
        self.device = device
        self.corrupt_mixed = corrupt_mixed
        self.one_per_seq_noise = one_per_seq_noise
        self.corrupt_long_prefill = corrupt_long_prefill
        self.corrupt_refill = corrupt_refill
        self.backend_sampling = backend_sampling
        self.backend_tokens_differ = backend_tokens_differ
        self.compute_key = compute_key
        self.backend_sampling_off = backend_sampling_off
        self._refilled: set[int] = set()  # emptied by trim(seq, 0) beside other caches
        self._on_device: set[int] = set()  # seqs whose chain samples "on the device"
        self.free_bytes = free_bytes
        self.kv_bytes_per_token = kv_bytes_per_token
        self.log: list[Call] = []
        self.limits: BatchLimits | None = None
        self.num_decode_calls = 0
        self._batch_closed = False
        self._memory = FakeMemory(recurrent, n_swa)
        self._rules = Rules()
        self._open_tried = False
        self._rows: dict[Tokens, tuple[list[float], float, float]] = {}
        self.min_score_run = 2  # llama.cpp's (BackendInfo.min_score_run)

    #: The fake has no model to lose (``Backend.closed``).
    closed = False

    @property
    def info(self) -> BackendInfo:
        """Copies, saves, loads, label scores; partial trims unless recurrent and declared; no lock;
        ``n_swa`` and ``min_score_run`` as set."""
        return BackendInfo(
            n_ctx=self.n_ctx,
            max_slots=self.max_slots,
            can_copy=True,
            can_save=True,
            partial_trim=self.partial_trim,
            n_swa=self.n_swa,
            can_score=True,
            min_score_run=self.min_score_run,
            device=self.device,
            slot_memory=None if self.free_bytes is None else self._slot_memory,
            backend_sampling=self.backend_sampling,
            compute_key=self.compute_key,
            backend_sampling_off=self.backend_sampling_off,
        )

    def _slot_memory(self, n_ctx_seq: int) -> SlotMemory:
        padded = -(-n_ctx_seq // self.ctx_pad) * self.ctx_pad
        return SlotMemory(
            self.device or "host", cast(int, self.free_bytes), self.kv_bytes_per_token * padded
        )

    @property
    def vocab(self) -> FakeBackend:
        """The fake is its own vocabulary."""
        return self

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
        """One token per UTF-8 byte (or the given tokenizer); ``""`` gives ``[]``. BackendError when
        a token id would not be below ``n_vocab``."""
        tokens = (self._tokenizer or byte_tokens)(text)
        if any(not 0 <= t < self.n_vocab for t in tokens):
            raise BackendError(f"fake: {text!r} has a token outside [0, {self.n_vocab})")
        return tokens

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Bytes for ids < 256 and ``<|id|>`` for the others, decoded at once (UTF-8, invalid bytes
        replaced), or the given detokenizer."""
        return (self._detokenizer or byte_text)(tokens)

    # -- the oracle ------------------------------------------------------------------
    def configured_reply(self, prompt: Sequence[int]) -> Tokens:
        """The configured reply to the token ids ``prompt``, before the stop rule."""
        return oracle.configured_reply(self, prompt)

    def prompt_tokens(self, prompt: object) -> Tokens:
        """The token ids the scheduler should make of ``prompt`` (str, UTF-8 bytes, ids); ValueError
        when the item is an error (:func:`.oracle.prompt_tokens`)."""
        return oracle.prompt_tokens(self, prompt)

    def expected(
        self, prompt: object, max_tokens: int, sampling: SamplingParams | None = None
    ) -> Expected:
        """What the scheduler should return for ``prompt`` completed alone
        (:func:`.oracle.expected`: the engine's stop rule, with ``sampling``'s stop strings and
        ids); ``fail_alone`` is not considered. ValueError when the item is an error."""
        return oracle.expected(self, prompt, max_tokens, sampling)

    def fails_alone(self, prompt: Sequence[int]) -> bool:
        """True when ``fail_alone`` makes the prompt fail alone."""
        return fails_alone(self.fail_alone, tuple(prompt))

    # -- the batch context -----------------------------------------------------------
    def _open_limits(self, what: str) -> BatchLimits:
        return self._rules.require_open(self._batch_closed, self.limits, what)

    def open(self, slots: int, n_ctx_seq: int, n_batch: int) -> BatchLimits:
        """Allocate ``slots`` sequences; n_ctx_seq rounded up to ``ctx_pad``. BatchUnavailable for
        ``fail_open``, ``slots`` above ``max_slots`` or more than ``max_kv_tokens``;
        FakeBackendViolation when called while its context is open or with a value < 1 (after
        ``close`` it makes a new, empty one)."""
        rules = self._rules
        rules.require(
            self.limits is None or self._batch_closed,
            "open_batch called while its batch context is open (close it first)",
        )
        rules.require(min(slots, n_ctx_seq, n_batch) >= 1, "open_batch with a value < 1")
        self._batch_closed, self.limits = False, None
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
        """Tokens in each slot's cache (empty before ``open``)."""
        return tuple(len(s.kv) for s in self._memory.slots)

    def cached(self, seq_id: int) -> Tokens:
        """The tokens slot ``seq_id``'s cache holds, positions 0, 1, ..."""
        return tuple(self._memory.slots[seq_id].kv)

    def seq_pos_min(self, seq_id: int) -> int:
        """The oldest position slot ``seq_id`` holds in every layer (its window layers' with
        ``n_swa`` > 0), -1 when it holds none."""
        self._seq(seq_id, "seq_pos_min")
        return self._memory.pos_min(seq_id)

    def _seen(self, seq: SlotState) -> Tokens:
        return seq.seen()

    def _seq(self, seq_id: int, what: str) -> SlotState:
        self._rules.require_seq_id(seq_id, self._open_limits(what), what)
        return self._memory.slots[seq_id]

    # -- label scores (a deterministic model of log-probabilities) -------------------
    def token_logprob(self, context: Sequence[int], token: int) -> float:
        """The fake model's ``log_softmax(logits)[token]`` after ``context`` (every token from
        position 0): logits uniform in [0, 4), seeded by the context, so every path gives the same
        value for the same context, and a wrong cache another."""
        logits, logz, _ = self._row(context)
        return logits[token] - logz

    def row_max(self, context: Sequence[int]) -> float:
        """The largest :meth:`token_logprob` after ``context`` (its likeliest token's)."""
        _, logz, top = self._row(context)
        return top - logz

    def _row(self, context: Sequence[int]) -> tuple[list[float], float, float]:
        """The logits after ``context``, their log-sum-exp and their largest value."""
        key = tuple(context)
        row = self._rows.get(key)
        if row is None:
            rng = random.Random(hash(key))
            logits = [rng.uniform(0.0, 4.0) for _ in range(self.n_vocab)]
            top = max(logits)
            row = (logits, top + math.log(sum(math.exp(v - top) for v in logits)), top)
            if len(self._rows) > 4096:
                self._rows.clear()
            self._rows[key] = row
        return row

    def _span_scores(
        self, kv: Sequence[int], span: Span, hole: tuple[int, int] | None = None
    ) -> SeqOutput:
        """Scores (and row maxima) of ``span``'s targets after ``kv`` (the cache before it); a
        row past a window ``hole`` sees its context without the missing positions."""
        targets = span.targets or ()
        self._rules.require(
            len(targets) == len(span.tokens) and not span.logits,
            f"seq {span.seq_id}: targets need one tuple per token and logits=False",
        )
        path = list(kv) + list(span.tokens)
        contexts = []
        for r, ids in enumerate(targets):
            self._rules.require(
                all(0 <= t < self.n_vocab for t in ids),
                f"seq {span.seq_id}: a target outside [0, {self.n_vocab})",
            )
            context = path[: span.pos + r + 1]
            if hole is not None and hole[1] <= len(context):
                context = context[: hole[0]] + context[hole[1] :]
            contexts.append(context)
        return self._scored(contexts, targets)

    def _scored(self, contexts: Sequence[Sequence[int]], targets: Targets) -> SeqOutput:
        """Per row, the :meth:`token_logprob` of each target after its context, and the
        :meth:`row_max` where it has targets."""
        return SeqOutput(
            scores=tuple(
                tuple(self.token_logprob(c, t) for t in ids) for c, ids in zip(contexts, targets)
            ),
            row_max=tuple(self.row_max(c) if ids else None for c, ids in zip(contexts, targets)),
        )

    def _score_alone(self, tokens: Sequence[int], targets: Targets) -> SeqOutput:
        """``run_alone`` with targets: per position ``j``, the :meth:`token_logprob` of each id of
        ``targets[j]`` after ``tokens[:j + 1]``."""
        tokens = tuple(tokens)
        self._rules.require(len(targets) == len(tokens), "score_alone: one targets tuple per token")
        if self.fails_alone(tokens) or not tokens or len(tokens) >= self.n_ctx:
            raise BackendError("fake: cannot score alone")
        if self.check:
            self.log.append(AloneCall(tokens, SamplingParams(temperature=0.0)))
        return self._scored([tokens[: j + 1] for j in range(len(tokens))], targets)

    def _logprobs_of(self, sampling: SamplingParams | None, token: int) -> Any:
        """The fake's replies are certain: ``((token, 0.0),)`` when logprobs are asked."""
        if sampling is not None and sampling.logprobs is not None:
            return ((token, 0.0),)
        return None

    # -- operations on sequences (the Backend protocol's) ----------------------------
    def start_seq(self, seq_id: int, sampling: SamplingParams, host: bool = False) -> None:
        """A fresh sampler state for ``seq_id`` (its cache stays); GrammarError for an item with
        a constraint with ``refuse_grammar``. A chain samples on the host, or with
        ``backend_sampling`` (not False), ``host=False`` and no constraint "on the device"."""
        seq = self._seq(seq_id, "start_seq")
        self._grammar_fault(sampling)
        if self.check:
            self.log.append(StartSeqCall(seq_id, sampling, tuple(seq.kv)))
        seq.restart(sampling)
        self._on_device.discard(seq_id)
        if self.backend_sampling is not False and not host and sampling.constraint is None:
            self._on_device.add(seq_id)

    def trim(self, seq_id: int, n_keep: int) -> bool:
        """Keep positions [0, n_keep); refused (False, cache unknown) on a recurrent fake when
        ``0 < n_keep < len(cache)``."""
        self._seq(seq_id, "trim")
        self._rules.require(isinstance(n_keep, int) and n_keep >= 0, f"trim to {n_keep!r}")
        slots = self._memory.slots
        if n_keep == 0 and slots[seq_id].kv and any(x.kv for x in slots if x is not slots[seq_id]):
            self._refilled.add(seq_id)
        ok = self._memory.trim(seq_id, n_keep)
        if self.check:
            self.log.append(TrimCall(seq_id, n_keep, ok))
        return ok

    def copy_seq(self, src: int, dst: int) -> None:
        """``dst``'s cache becomes ``src``'s; BackendError at ``fail_copy_at`` (``dst`` then
        unknown)."""
        a, b = self._seq(src, "copy_seq"), self._seq(dst, "copy_seq")
        self._rules.require(src != dst, f"copy_seq of seq {src} onto itself")
        self.num_copies += 1
        if self.num_copies == self.fail_copy_at:
            b.corrupt = True
            raise BackendError(f"fake: copy_seq failed (fault at copy {self.num_copies})")
        if self.check:
            self.log.append(CopyCall(src, dst, len(a.kv)))
        self._memory.copy(src, dst)

    def save_seq(self, seq_id: int) -> SeqState:
        """``seq_id``'s cache, its data the bytes of
        :meth:`~llamabatch.testing.memory.FakeMemory.save`; BackendError at ``fail_state_at``."""
        self._seq(seq_id, "save_seq")
        self._state_fault("save_seq")
        data = self._memory.save(seq_id)
        return SeqState(data, len(data))

    def load_seq(self, seq_id: int, state: SeqState) -> None:
        """``seq_id``'s cache becomes ``state``; BackendError at ``fail_state_at`` (the cache
        then unknown)."""
        seq = self._seq(seq_id, "load_seq")
        data = state.data if isinstance(state, SeqState) else None
        if not isinstance(data, bytes) or not FakeMemory.is_state(data):
            raise self._rules.violation(
                f"load_seq of {type(state).__name__}, not a state save_seq returned"
            )
        try:
            self._state_fault("load_seq")
        except BackendError:
            seq.corrupt = True
            raise
        self._memory.load(seq_id, data)
        if self.check:
            self.log.append(LoadSeqCall(seq_id, tuple(seq.kv)))

    def _state_fault(self, what: str) -> None:
        self.num_states += 1
        if self.num_states == self.fail_state_at:
            raise BackendError(f"fake: {what} failed (fault at state call {self.num_states})")

    def cut_floor(self, seq_id: int) -> int:
        """Where ``seq_id``'s cache can still be cut back to
        (:func:`~llamabatch.llamacpp.window.cut_floor` of :meth:`seq_pos_min`)."""
        return window.cut_floor(self.seq_pos_min(seq_id), self.n_swa)

    def clear(self) -> None:
        """Empty every slot; the sequences must be started again."""
        if self.limits is None and not self._batch_closed:
            return  # no batch context: nothing to clear
        limits = self._open_limits("clear")
        if self.check:
            self.log.append(ClearCall())
        self._memory.clear(limits.n_seq_max)
        self._refilled.clear()

    def run(self, spans: Sequence[Span]) -> StepResult:
        """Decode ``spans`` (``precise`` ones shaped and split into calls as ``LlamaBackend``
        does) and give each row what it asks for (see the class). DecodeError (``fail_code``),
        or ``fail_exc``, at the ``fail_decode_at``-th call; FakeBackendViolation when the
        plan breaks a rule."""
        outputs: dict[int, SeqOutput] = {}
        n_decoded: dict[int, int] = {}
        on_device = 0
        for call in decode_calls(spans) if self.shapes else [list(spans)]:
            call_outputs, call_on_device = self._decode(call)
            outputs.update(call_outputs)
            on_device += call_on_device
            n_decoded.update((span.seq_id, len(span.tokens)) for span in call)
        return StepResult(
            tuple(n_decoded[span.seq_id] for span in spans), outputs, backend_sampled=on_device
        )

    def _decode(self, spans: Sequence[Span]) -> tuple[dict[int, SeqOutput], int]:
        """One decode call of ``spans``: the outputs of its sequences and how many of their
        rows were sampled "on the device"."""
        self.num_decode_calls += 1
        if self.check:
            limits = self._open_limits("run")
            self._rules.check_plan(spans, limits, self._memory.slots, self.n_vocab)
        if self._decode_fails(self.num_decode_calls):
            self._fail(spans)
        seqs = self._memory.slots
        sampled: list[int | None] = []
        outputs: dict[int, SeqOutput] = {}
        shift = self._corruption(spans)
        lone = _one_per_seq_rows(spans) if self.one_per_seq_noise else set()
        on_device = 0
        for span in spans:
            seq = seqs[span.seq_id]
            kv = list(seq.kv)
            self._memory.append(span.seq_id, span.pos, span.tokens)
            if span.targets is not None:  # after append: over a hole it notes
                scored = self._span_scores(kv, span, seq.hole)
                scored = _shifted(scored, shift.get(span.seq_id, 0.0))
                rows = {r for sid, r in lone if sid == span.seq_id}
                outputs[span.seq_id] = _shifted(scored, self.one_per_seq_noise, rows)
            if not span.logits:
                continue
            if seq.reply is None:
                seq.reply = self.configured_reply(self._seen(seq))
            if self._is_dead_end(seq.sampling, seq.n_sampled):
                error = str(self._dead_end(seq.n_sampled))
                seq.is_done = True  # decoding it again is a violation
                outputs[span.seq_id] = SeqOutput(error=error)
                sampled.append(None)
                continue
            if self._is_complete(seq.sampling, seq.n_sampled):
                seq.is_done = True
                outputs[span.seq_id] = SeqOutput(grammar_complete=True)
                sampled.append(None)
                continue
            token = oracle.token_at(self, seq.reply, seq.n_sampled)
            if span.seq_id in self._on_device:
                on_device += 1
                if self.backend_tokens_differ:
                    token = (token + 1) % self.n_vocab
            seq.n_sampled += 1
            seq.last = token
            seq.is_done = token in self.eog_ids or seq.n_sampled == self._cap(seq.sampling)
            sampled.append(token)
            outputs[span.seq_id] = SeqOutput(token, self._logprobs_of(seq.sampling, token))
        if self.check:  # None where a grammar reached a dead end or was complete
            self.log.append(
                DecodeCall(
                    self.num_decode_calls, self._records(spans), cast(Tokens, tuple(sampled)), None
                )
            )
        return outputs, on_device

    def _corruption(self, spans: Sequence[Span]) -> dict[int, float]:
        """seq id -> nats added to its scores in this call (``corrupt_mixed``,
        ``corrupt_long_prefill``, ``corrupt_refill``)."""
        beside = any(len(x.tokens) == 1 for x in spans)
        prompts = [x for x in spans if len(x.tokens) > 1]
        out = dict.fromkeys((x.seq_id for x in spans), 0.0)
        if not (beside and prompts):
            self._refilled -= {x.seq_id for x in spans}
            return out
        n_ubatch = self.limits.n_batch if self.limits is not None else 0
        long = any(x.pos + len(x.tokens) > n_ubatch for x in prompts)
        for k in out:
            out[k] += self.corrupt_mixed + (self.corrupt_long_prefill if long else 0.0)
        for x in prompts:
            if x.pos == 0 and x.seq_id in self._refilled:
                out[x.seq_id] += self.corrupt_refill
        self._refilled -= set(out)
        return out

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

    def _is_complete(self, sampling: SamplingParams | None, n_sampled: int) -> bool:
        return (
            self.complete_at is not None
            and sampling is not None
            and sampling.constraint is not None
            and n_sampled == self.complete_at
        )

    @staticmethod
    def _dead_end(n_sampled: int) -> GrammarDeadEnd:
        return GrammarDeadEnd("fake: the grammar allows no token here (dead_end_at)", n_sampled)

    def _fail(self, spans: Sequence[Span]) -> None:
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
        return tuple(Span(s.seq_id, s.pos, tuple(s.tokens), s.logits, s.targets) for s in spans)

    # -- one at a time ---------------------------------------------------------------
    def run_alone(
        self, tokens: Sequence[int], sampling: SamplingParams | None, targets: Targets | None
    ) -> Iterator[SeqOutput]:
        """``Backend.run_alone``: with ``sampling``, the reply stream of ``tokens``, one output per
        ``next`` (a dead end, ``dead_end_at``, is the last output's ``error``); with ``targets``,
        their scores.

        Raises (when iterated):
            BackendError: ``fail_alone`` matches, the prompt is empty, has an id outside
                [0, n_vocab) or does not fit ``n_ctx``.
            GrammarError: ``refuse_grammar`` and a constraint.
            FakeBackendViolation: a token pulled after an EOG, past ``max_tokens`` or past the
                context, or targets that are not one tuple per token.
        """
        if sampling is None:
            return iter([self._score_alone(tokens, targets or ())])
        call = AloneCall(tuple(tokens), sampling)
        if self.check:
            self.log.append(call)
        return self._alone(call)

    def _alone(self, call: AloneCall) -> Iterator[SeqOutput]:
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
            reply, last = self.configured_reply(prompt), None
            while True:
                i = call.n_pulled
                if self._is_dead_end(call.sampling, i):
                    yield SeqOutput(error=str(self._dead_end(i)))
                    return
                if self._is_complete(call.sampling, i):
                    yield SeqOutput(grammar_complete=True)
                    return
                if self.check:
                    self._rules.check_alone_pull(
                        last, i, len(prompt), self.eog_ids, self._cap(call.sampling), self.n_ctx
                    )
                last = oracle.token_at(self, reply, i)
                call.n_pulled += 1
                yield SeqOutput(last, self._logprobs_of(call.sampling, last))
        finally:
            call.closed = True

    def release_alone(self) -> None:
        """Nothing to give back: the fake keeps no state between items alone (not logged)."""

    def close(self) -> None:
        """Free the batch context (idempotent)."""
        if self.check:
            self.log.append(CloseCall())
        self._batch_closed = True

    # -- reading the log -------------------------------------------------------------
    def copy(self, **changes: Any) -> FakeBackend:
        """A fresh fake (empty log, no batch context) with this one's arguments, some replaced:
        ``fake.copy(fail_decode_at=None)``."""
        return FakeBackend(**{**self._kwargs, **changes})

    def calls(self, kind: type[C]) -> list[C]:
        """The logged calls of one kind, e.g. ``fake.calls(DecodeCall)``."""
        return [c for c in self.log if isinstance(c, kind)]

    def seqs(self) -> list[SeqLog]:
        """Every item run in a slot, read back from the log (:func:`read_seqs`)."""
        return read_seqs(self.log)


def _shifted(out: SeqOutput, nats: float, rows: Collection[int] | None = None) -> SeqOutput:
    """``out`` with ``nats`` added to every score and row maximum (``corrupt_mixed``), or to
    those of ``rows`` only (``one_per_seq_noise``)."""
    if not nats or out.scores is None or rows is not None and not rows:
        return out
    hit = range(len(out.scores)) if rows is None else rows
    return SeqOutput(
        scores=tuple(
            tuple(v + nats for v in row) if r in hit else row for r, row in enumerate(out.scores)
        ),
        row_max=tuple(
            m if m is None or r not in hit else m + nats for r, m in enumerate(out.row_max or ())
        ),
    )


def _one_per_seq_rows(spans: Sequence[Span]) -> set[tuple[int, int]]:
    """``(seq id, row of its span)`` of every token llama.cpp decodes in a ubatch of one token
    per sequence."""
    return {
        (spans[i].seq_id, offset)
        for ubatch in split_equal(spans)
        for i, offset, n in ubatch
        if n == 1
    }

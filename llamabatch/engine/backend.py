"""The Backend protocol: what the scheduler needs from llama.cpp, in token ids.

The scheduler (``scheduler.py``) drives a backend and never imports ``_ffi``. Two
backends exist: :class:`llamabatch.llamacpp.backend.LlamaBackend` (llama.cpp through a
loaded ``llama_cpp.Llama``) and :class:`llamabatch.testing.FakeBackend` (no library).

What a backend can do is declared once, as plain data: :meth:`Backend.capabilities`
returns a :class:`BackendCapabilities`, which the generator, the scheduler and the slot
engine read instead of probing the backend's attributes. Every member of the protocol
is required; a method the capabilities rule out (``copy_seq`` with ``can_copy`` False,
``save_seq`` / ``load_seq`` with ``can_save`` False) is never called and may raise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..params import SamplingParams


@dataclass(frozen=True, slots=True)
class Span:
    """A run of consecutive tokens of one sequence inside one decode.

    Attributes:
        seq_id: the sequence (slot), in [0, n_seq_max).
        pos: position of ``tokens[0]``; the next positions follow without gaps.
        tokens: token ids, at least one.
        logits: request logits on the last token only (then the backend samples the
            sequence's next token from them).
        targets: label scoring (``logits`` is then False): one tuple of token ids per
            token of the span; a row with ids gets logits, and the backend reports
            their log-softmax (:meth:`Backend.take_scores`; only with
            ``BackendCapabilities.can_score``). ``None``: no scores.
        share: with ``logits``, more sequences whose chains also sample their first
            token from this span's last row (the ``n`` replies of one prompt; only with
            ``BackendCapabilities.can_share_rows``): ``decode`` returns, for this span,
            its own token and then one per id of ``share``, in that order.
    """

    seq_id: int
    pos: int
    tokens: Sequence[int]
    logits: bool
    targets: tuple[tuple[int, ...], ...] | None = None
    share: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What llama.cpp actually allocated for the batch context (read back after creation).

    Attributes:
        n_seq_max: sequences (``llama_n_seq_max``).
        n_ctx_seq: tokens per sequence (``llama_n_ctx_seq``; padded to 256 by llama.cpp).
        n_batch: most tokens per decode (``llama_n_batch``).
        n_ctx: tokens of the whole context (``llama_n_ctx``).
    """

    n_seq_max: int
    n_ctx_seq: int
    n_batch: int
    n_ctx: int


@dataclass(frozen=True, slots=True)
class BackendCapabilities:
    """What a backend can do, declared once (:meth:`Backend.capabilities`).

    Attributes:
        max_slots: most sequences a batch context can hold
            (``llama_max_parallel_sequences()``); ``BatchGenerator(slots=...)`` above it
            is refused.
        can_copy: :meth:`Backend.copy_seq` works (llama.cpp: the binding has
            ``llama_state_seq_*``). False: no prefix is copied between slots and no
            state is kept in host memory.
        partial_trim: :meth:`Backend.trim` may keep a position > 0. False for a memory
            known to refuse it (recurrent and hybrid models): then only a cache that
            ends exactly where a new prompt diverges is reused. True is not a promise:
            the engine still copes with a refused trim (and learns from it).
        can_save: :meth:`Backend.save_seq` and :meth:`Backend.load_seq` work, so
            ``BatchGenerator(cache_ram_mib=...)`` can keep sequence states in host
            memory (used only together with ``can_copy``).
        lock: the lock the generator holds around every call of the backend (for a
            ``Llama``: :func:`llamabatch.llm_lock`, shared with every user of that
            ``Llama``); ``None``: each generator makes its own ``threading.RLock``.
        check_batch_params: ``(slots, n_ctx_seq, n_batch) -> None``, raising
            ``ValueError`` (naming the parameter and its valid range) for a batch
            context the backend's library would abort or fail on; called by the
            generator before any batch context exists. ``None``: no such limits.
        can_score: :meth:`Backend.decode` honours ``Span.targets`` and
            :meth:`Backend.take_scores` / :meth:`Backend.score_alone` report label
            scores (``SamplingParams(score_choices=True)``). False: a scored item fails
            with an error naming the backend.
        can_share_rows: :meth:`Backend.decode` honours ``Span.share``. False: the ``n``
            replies of a prompt run as separate sequences, each reusing the cache as
            usual.
        n_swa: the sliding window of the batch context's window layers, in positions
            (``llama_model_n_swa``; 0 when the model has none or its cache keeps every
            position, ``swa_full``). With ``n_swa`` > 0 a cache is cut back to a prefix
            (own, copied or loaded from host memory) only where its window still holds
            that prefix's end (:func:`llamabatch.engine.window.window_holds`, from
            :meth:`Backend.seq_pos_min`).
    """

    max_slots: int
    can_copy: bool = True
    partial_trim: bool = True
    can_save: bool = False
    lock: AbstractContextManager[Any] | None = None
    check_batch_params: Callable[[int, int, int], None] | None = None
    can_score: bool = False
    can_share_rows: bool = False
    n_swa: int = 0


@runtime_checkable
class Backend(Protocol):
    """What the scheduler calls. All token ids are Python ints.

    Attributes:
        n_vocab: size of the vocabulary; valid ids are [0, n_vocab).
        n_ctx: tokens of the one-at-a-time context (prompt + reply of an item alone).
        eog_ids: every end-of-generation token (``llama_vocab_is_eog``).
        kv_bytes: bytes of KV cache the open batch context allocated (0 before it
            exists, or when unknown); read into ``Stats.kv_bytes``.
        llm_closed: True once the model the backend runs on was freed (the ``Llama``
            closed): the generator then refuses to run (``GeneratorClosed``).

    Members, all required: the attributes above; :meth:`capabilities` (what the
    backend can do); text: :meth:`tokenize`, :meth:`detokenize`; the batch context:
    :meth:`open_batch`, :meth:`start_seq`, :meth:`trim`, :meth:`copy_seq`,
    :meth:`save_seq`, :meth:`load_seq`, :meth:`seq_pos_min`, :meth:`decode`,
    :meth:`take_logprobs`, :meth:`take_scores`, :meth:`clear`, :meth:`close`; one at a
    time: :meth:`generate_alone`, :meth:`score_alone`, :meth:`release_alone`.
    """

    n_vocab: int
    n_ctx: int
    eog_ids: frozenset[int]

    @property
    def kv_bytes(self) -> int: ...

    @property
    def llm_closed(self) -> bool: ...

    def capabilities(self) -> BackendCapabilities:
        """What this backend can do. Read once, before the first batch context; the
        answer must not change afterwards."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``, special tokens parsed, BOS as the model wants.

        Raises:
            BackendError: the text cannot be tokenized.
        """
        ...

    def detokenize(self, tokens: Sequence[int]) -> str:
        """The text of ``tokens``, decoded from all their bytes at once."""
        ...

    def open_batch(self, slots: int, n_ctx_seq: int, n_batch: int) -> BatchLimits:
        """Create the batch context (once).

        Raises:
            BatchUnavailable: it cannot be created; the message says why.
        """
        ...

    def start_seq(self, seq_id: int, sampling: SamplingParams) -> None:
        """Give sequence ``seq_id`` a fresh sampler chain built from ``sampling``.

        Its KV cache (or recurrent state) is left as it is: the engine trims or copies it
        before feeding the rest of the new prompt.

        Raises:
            BackendError: the chain cannot be built.
        """
        ...

    def trim(self, seq_id: int, n_keep: int) -> bool:
        """Keep positions [0, n_keep) of ``seq_id`` and remove the rest
        (``llama_memory_seq_rm(mem, seq_id, n_keep, -1)``).

        Returns:
            True when done. False when the memory refused a partial removal (recurrent
            and hybrid models keep one state per sequence, not one per position): the
            sequence's cache is then in an unknown state and must be emptied with
            ``trim(seq_id, 0)``, which is never refused.
        """
        ...

    def copy_seq(self, src: int, dst: int) -> None:
        """Make ``dst``'s cache a copy of ``src``'s whole cache (every position, or the
        recurrent state), replacing what ``dst`` held. The sampler chains are untouched.

        Raises:
            BackendError: the copy failed (``dst`` is then in an unknown state).
        """
        ...

    def save_seq(self, seq_id: int) -> Any:
        """A copy of sequence ``seq_id``'s whole cache (``llama_state_seq_get_data``);
        ``len(state)`` is its size in bytes. Called only with ``can_save``.

        Raises:
            BackendError: the state cannot be read.
        """
        ...

    def load_seq(self, seq_id: int, state: Any) -> None:
        """Make ``seq_id``'s cache the ``state`` of :meth:`save_seq`, replacing what it
        held (``llama_state_seq_set_data``). Called only with ``can_save``.

        Raises:
            BackendError: the state was refused (the sequence is then unknown).
        """
        ...

    def seq_pos_min(self, seq_id: int) -> int | None:
        """The oldest position sequence ``seq_id`` still holds in every layer
        (``llama_memory_seq_pos_min``; for a sliding-window model, in its window
        layers); -1 when it holds nothing, ``None`` when the backend cannot tell (then
        only a cache the prompt continues whole is reused). Called only with
        ``n_swa`` > 0."""
        ...

    def decode(self, spans: Sequence[Span]) -> list[int]:
        """Decode ``spans`` (<= n_batch tokens in all) in one ``llama_decode``.

        Returns:
            one sampled token id per span with ``logits=True``, in span order; each is
            sampled by that span's sequence's chain (:meth:`start_seq`) from the logits
            of its last token (followed by one per id of ``Span.share``).

        Raises:
            DecodeError: ``llama_decode`` returned non-zero (``.code``).
            SampleErrors: some sequences' grammars reached a dead end
                (:mod:`llamabatch.engine.seq_errors`); the other rows were sampled.
        """
        ...

    def take_logprobs(self) -> list[tuple[tuple[int, float], ...] | None]:
        """The log-probabilities of the tokens produced since the previous call: one
        entry per token returned by the last :meth:`decode` (in its order) or per token
        pulled from :meth:`generate_alone`; each entry is ``(token_id, logprob)`` pairs,
        or ``None`` when the sequence's ``SamplingParams.logprobs`` is ``None``. Called
        only when some sequence asked for logprobs."""
        ...

    def take_scores(self) -> list[tuple[tuple[float, ...], ...]]:
        """Label scores of the last :meth:`decode`: one entry per span with
        ``targets`` (in span order), one tuple per token of the span, holding
        ``log_softmax(logits of that row)[t]`` for each ``t`` of that row's targets
        (empty where a row has none). Called only with ``can_score``."""
        ...

    def clear(self) -> None:
        """Remove every sequence from the cache (``llama_memory_seq_rm`` of each seq id);
        a no-op without a batch context."""
        ...

    def generate_alone(self, tokens: Sequence[int], sampling: SamplingParams) -> Iterator[int]:
        """Generate after ``tokens`` one token at a time, outside the batch context.

        The iterator never stops by itself; the caller applies the stop rule and closes it.

        Raises:
            BackendError: the prompt cannot be decoded (when iterated).
        """
        ...

    def score_alone(
        self, tokens: Sequence[int], targets: Sequence[Sequence[int]]
    ) -> list[tuple[float, ...]]:
        """Label scores outside the batch context: evaluate ``tokens`` from position 0
        (a prefix the one-at-a-time context already holds may be reused) and return,
        per position, the log-softmax of that position's logits at each id of
        ``targets[j]`` (``targets`` as long as ``tokens``). Called only with
        ``can_score``."""
        ...

    def release_alone(self) -> None:
        """Give the model's own state back as it was before the items completed alone
        since the last call (for a ``Llama``: its KV cache and settings); until then it
        may keep the last such item, so the next one reuses their shared prefix. A
        no-op for a backend with nothing to give back."""
        ...

    def close(self) -> None:
        """Free the batch context (idempotent). The model stays loaded."""
        ...

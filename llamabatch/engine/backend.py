"""The Backend protocol: what the scheduler needs from llama.cpp, in token ids.

The scheduler (``scheduler.py``) drives a backend and never imports ``_ffi``. Two
backends exist: :class:`llamabatch.llamacpp.backend.LlamaBackend` (llama.cpp through a
loaded ``llama_cpp.Llama``) and :class:`llamabatch.testing.FakeBackend` (no library).

Optional methods (looked up with ``getattr``/``hasattr``, so older backends still satisfy
the protocol):

``take_logprobs() -> list[tuple[tuple[int, float], ...] | None]``
    the log-probabilities of the tokens produced since the previous call: one entry per
    token returned by the last ``decode`` (in its order) or per token pulled from
    ``generate_alone``; each entry is ``(token_id, logprob)`` pairs, or ``None`` when the
    sequence's ``SamplingParams.logprobs`` is ``None``. Without it, ``Completion.logprobs``
    stays ``None``.

``save_seq(seq_id) -> state`` and ``load_seq(seq_id, state) -> None``
    a copy of one sequence's whole cache (``llama_state_seq_get_data``; ``len(state)`` is
    its size in bytes) and putting it back into a sequence, replacing what it held
    (``llama_state_seq_set_data``); both raise ``BackendError`` on failure (a failed load
    leaves the sequence unknown). Without both (or with ``can_copy`` False), no state is
    kept in host memory (``BatchGenerator(cache_ram_mib=...)`` has no effect).

``take_scores() -> list[tuple[tuple[float, ...], ...]]``
    label scores (``SamplingParams(score_choices=True)``): one entry per span of the
    last ``decode`` with ``targets`` (in span order), one tuple per token of the span,
    holding ``log_softmax(logits of that row)[t]`` for each ``t`` of that row's
    targets (empty where a row has none). Its presence says that ``decode`` honours
    ``Span.targets``; without it, scored items are completed alone.

``score_alone(tokens, targets) -> list[tuple[float, ...]]``
    the same outside the batch context: evaluate ``tokens`` from position 0 (a prefix
    the one-at-a-time context already holds may be reused) and return, per position,
    the log-softmax of that position's logits at each id of ``targets[j]`` (``targets``
    as long as ``tokens``). Without it, a scored item that cannot run in a slot fails
    with an error naming the backend.

``can_share_rows: bool``
    True when ``decode`` honours ``Span.share`` (absent means False: then the ``n``
    replies of a prompt run as separate sequences, each reusing the cache as usual).

``n_swa: int`` and ``seq_pos_min(seq_id) -> int``
    the sliding window of the batch context's window layers, in positions
    (``llama_model_n_swa``; 0 when the model has none or its cache keeps every position,
    ``swa_full``), and the oldest position sequence ``seq_id`` still holds in every layer
    (``llama_memory_seq_pos_min``; -1 when it holds nothing). With ``n_swa`` > 0 a cache
    is cut back to a prefix (own, copied or loaded from host memory) only where its
    window still holds that prefix's end (:func:`llamabatch.engine.window.window_holds`);
    without ``seq_pos_min`` only a cache the prompt continues whole is reused. Without
    ``n_swa`` (or 0) no window is assumed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

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
            their log-softmax (the optional ``take_scores``). ``None``: no scores.
        share: with ``logits``, more sequences whose chains also sample their first
            token from this span's last row (the ``n`` replies of one prompt; the
            optional ``can_share_rows``): ``decode`` returns, for this span, its own
            token and then one per id of ``share``, in that order.
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


@runtime_checkable
class Backend(Protocol):
    """What the scheduler calls. All token ids are Python ints.

    Attributes:
        n_vocab: size of the vocabulary; valid ids are [0, n_vocab).
        n_ctx: tokens of the one-at-a-time context (prompt + reply of an item alone).
        max_slots: most sequences a batch context can hold
            (``llama_max_parallel_sequences()``).
        eog_ids: every end-of-generation token (``llama_vocab_is_eog``).
        partial_trim: False when the model's memory is known to refuse
            :meth:`trim` to a position > 0 (recurrent and hybrid models); then only an
            exact copy of a sequence ending where the new prompt diverges is reused.
            Backends without the attribute are treated as True (the engine still
            copes with a refused trim).
        can_copy: False when :meth:`copy_seq` is not available (then no prefix is
            copied between slots); absent means True.
    """

    n_vocab: int
    n_ctx: int
    max_slots: int
    eog_ids: frozenset[int]

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

    def decode(self, spans: Sequence[Span]) -> list[int]:
        """Decode ``spans`` (<= n_batch tokens in all) in one ``llama_decode``.

        Returns:
            one sampled token id per span with ``logits=True``, in span order; each is
            sampled by that span's sequence's chain (:meth:`start_seq`) from the logits
            of its last token (followed by one per id of ``Span.share``).

        Raises:
            DecodeError: ``llama_decode`` returned non-zero (``.code``).
        """
        ...

    def clear(self, n_seqs: int | None = None) -> None:
        """Remove sequences [0, n_seqs) from the cache (every sequence when ``None``)."""
        ...

    def generate_alone(self, tokens: Sequence[int], sampling: SamplingParams) -> Iterator[int]:
        """Generate after ``tokens`` one token at a time, outside the batch context.

        The iterator never stops by itself; the caller applies the stop rule and closes it.

        Raises:
            BackendError: the prompt cannot be decoded (when iterated).
        """
        ...

    def close(self) -> None:
        """Free the batch context (idempotent). The model stays loaded."""
        ...

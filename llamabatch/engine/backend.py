"""The Backend protocol: what the engine needs from a model, in token ids.

The engine never imports ``_ffi`` or ``llamacpp``. Two backends exist:
:class:`llamabatch.llamacpp.backend.LlamaBackend` (a loaded ``llama_cpp.Llama``) and
:class:`llamabatch.testing.FakeBackend` (no library). A custom backend implements the
fifteen members of :class:`Backend`, each typed: what it can do is declared once, as data
(:class:`BackendInfo`); a step goes in and comes out as data (:class:`Span`,
:class:`StepResult`); each operation on the sequences is a method of its own, and a saved
cache is a :class:`SeqState`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..params import SamplingParams
from .step import SeqOutput, Span, StepResult, Targets

__all__ = [
    "Backend",
    "BackendInfo",
    "BatchLimits",
    "SeqState",
    "SlotMemory",
    "Vocab",
]


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What the batch context allocated (read back after creation).

    Attributes:
        n_seq_max: sequences (``llama_n_seq_max``).
        n_ctx_seq: tokens per sequence (``llama_n_ctx_seq``; llama.cpp pads to 256).
        n_batch: most tokens per decode (``llama_n_batch``).
        n_ctx: tokens of the whole context (``llama_n_ctx``).
        kv_bytes: bytes of KV cache allocated (0 when unknown).
    """

    n_seq_max: int
    n_ctx_seq: int
    n_batch: int
    n_ctx: int
    kv_bytes: int = 0


@dataclass(frozen=True, slots=True)
class SlotMemory:
    """Room for a batch context's KV cache (``slots="auto"``).

    Attributes:
        where: the memory: a device name (``"Vulkan0"``, ``"CUDA0+CUDA1"``) or ``"host"``.
        free_bytes: bytes free there now (``ggml_backend_dev_memory``; for the host, the
            memory available to programs).
        bytes_per_slot: KV cache bytes of one sequence of the asked ``n_ctx_seq``.
        exact: ``bytes_per_slot`` is exact (False: an estimate, e.g. a sliding window or
            recurrent state).
    """

    where: str
    free_bytes: int
    bytes_per_slot: int
    exact: bool = True


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """What a backend is and can do; read once, never changes.

    Attributes:
        n_ctx: tokens of the one-at-a-time context (prompt + reply of an item alone).
        max_slots: most sequences of a batch context (``llama_max_parallel_sequences``).
        can_copy: :meth:`Backend.copy_seq` works; False: no prefix is copied between slots.
        can_save: :meth:`Backend.save_seq` / :meth:`Backend.load_seq` work (host-memory
            states, checkpoints).
        partial_trim: :meth:`Backend.trim` may keep a position > 0 (False for recurrent and
            hybrid memories; True is not a promise: a refused trim is learned from).
        n_swa: the window of sliding-window layers in positions, 0 without one: a prompt
            that fills it cannot be cut back to once decoded past, so a run that comes
            back to it keeps a checkpoint (a saved state).
        can_score: ``Span.targets`` and scoring alone work.
        min_score_run: fewest tokens of a sequence decoded in the call that scores a row
            (llama.cpp: 2, as its one-token kernels round differently).
        lock: held around every call (for a ``Llama``: :func:`llamabatch.llm_lock`);
            ``None``: the generator makes its own.
        check_batch_params: ``(slots, n_ctx_seq, n_batch) -> None``, raising
            ``ValueError`` for sizes the library would abort on; ``None``: no limits.
        device: the GPU (or other accelerator) whose logits the batch context reads, by
            name (``"Vulkan0"``), or ``None`` on the host CPU; batched steps on a device
            are checked against one at a time by default (``BatchConfig.check_device``).
        slot_memory: ``(n_ctx_seq) -> SlotMemory``, the room for slots of that size
            (``slots="auto"``); ``None``: unknown.
        backend_sampling: plain chains started with ``host=False`` sample on ``device``
            (llama.cpp's backend sampling): ``True`` as asked; ``None``: asked for, and where
            the device check runs the engine uses it only once that check verified it (else it
            starts every chain with ``host=True``); ``False``: every chain samples on the host.
        compute_key: what decides how a batch context computes, besides its size: the
            model, the device and the settings that choose its kernels (llama.cpp: the
            model file, offloaded layers, flash attention, KV types). The device check's
            verdict for an equal key and size is reused in this process
            (:data:`~llamabatch.engine.device_check.CHECKS`); ``None``: never reused.
        backend_sampling_off: why ``backend_sampling`` is False on a device that could sample
            (said in ``Stats.backend_sampling``); ``None``: nothing to say.
    """

    n_ctx: int
    max_slots: int
    can_copy: bool = True
    can_save: bool = False
    partial_trim: bool = True
    n_swa: int = 0
    can_score: bool = False
    min_score_run: int = 1
    lock: AbstractContextManager[Any] | None = None
    check_batch_params: Callable[[int, int, int], None] | None = None
    device: str | None = None
    slot_memory: Callable[[int], SlotMemory] | None = None
    backend_sampling: bool | None = False
    compute_key: Hashable | None = None
    backend_sampling_off: str | None = None


@dataclass(frozen=True, slots=True, eq=False)
class SeqState:
    """One sequence's cache as :meth:`Backend.save_seq` copied it, to be given back to
    :meth:`Backend.load_seq` of the same backend; the engine keeps it and never looks inside.

    Attributes:
        data: the backend's own copy (llama.cpp: the host buffer that
            ``llama_state_seq_get_data`` wrote).
        nbytes: its size in bytes (what it takes of ``cache_ram_mib``).
    """

    data: object
    nbytes: int


@runtime_checkable
class Vocab(Protocol):
    """The model's vocabulary.

    Attributes:
        n_vocab: valid token ids are [0, n_vocab).
        eog_ids: every end-of-generation token (``llama_vocab_is_eog``).
    """

    n_vocab: int
    eog_ids: frozenset[int]

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``, special tokens parsed, BOS as the model wants.

        Raises:
            BackendError: the text cannot be tokenized.
        """
        ...

    def detokenize(self, tokens: Sequence[int]) -> str:
        """The text of ``tokens``, decoded from all their bytes at once.

        A vocabulary may also have ``detokenize_bytes(tokens) -> bytes``, their bytes: a
        reply is then read as ``Llama.create_completion`` reads it (a reply cut inside a
        UTF-8 character takes the tokens that finish it, bytes that are not UTF-8 are
        dropped; :mod:`llamabatch.engine.request`); without it, as its text.
        """
        ...


@runtime_checkable
class Backend(Protocol):
    """What the engine calls. Token ids are Python ints.

    A backend call that fails raises: ``BackendError`` (``DecodeError`` from
    :meth:`run`), ``GrammarError`` for a refused grammar, or any exception; the engine
    empties the caches and completes the items in flight alone.
    """

    @property
    def info(self) -> BackendInfo:
        """What the backend is and can do."""
        ...

    @property
    def vocab(self) -> Vocab:
        """The model's vocabulary."""
        ...

    @property
    def closed(self) -> bool:
        """True once the model is gone (the ``Llama`` was closed)."""
        ...

    def open(self, slots: int, n_ctx_seq: int, n_batch: int) -> BatchLimits:
        """Create the batch context (closing one made before).

        Raises:
            BatchUnavailable: it cannot be created; the message says why.
        """
        ...

    # -- operations on the sequences of the batch context (after open) -------------------
    def start_seq(self, seq_id: int, sampling: SamplingParams, host: bool = False) -> None:
        """A fresh sampler chain for ``seq_id`` from ``sampling``; its cache stays.
        ``host``: the chain samples on the host, so its rows can be read as numbers.

        Raises:
            GrammarError: the grammar is refused (no cache changed).
        """
        ...

    def trim(self, seq_id: int, n_keep: int) -> bool:
        """Keep positions [0, n_keep) of ``seq_id``'s cache. False when the memory refused
        (the cache is then unknown until trimmed to 0, which is never refused)."""
        ...

    def copy_seq(self, src: int, dst: int) -> None:
        """``dst``'s cache becomes a copy of ``src``'s whole cache (``info.can_copy``)."""
        ...

    def save_seq(self, seq_id: int) -> SeqState:
        """A copy of ``seq_id``'s cache (``info.can_save``)."""
        ...

    def load_seq(self, seq_id: int, state: SeqState) -> None:
        """``seq_id``'s cache becomes ``state``, which :meth:`save_seq` returned."""
        ...

    def cut_floor(self, seq_id: int) -> int:
        """The smallest ``n`` > 0 that ``seq_id``'s cache can be cut back to and decoded on
        from (0: any; a cut to 0 or to the whole cache is always fine): the one question
        asked before a cut inside a cache (with ``info.partial_trim``)."""
        ...

    def clear(self) -> None:
        """Empty every sequence; each is started again before it is decoded (a no-op
        without a batch context)."""
        ...

    def run(self, spans: Sequence[Span]) -> StepResult:
        """Decode ``spans`` (<= n_batch tokens) in one call and read their rows.

        Raises:
            DecodeError: the decode failed (``.code``).
        """
        ...

    def run_alone(
        self, tokens: Sequence[int], sampling: SamplingParams | None, targets: Targets | None
    ) -> Iterator[SeqOutput]:
        """Work on ``tokens`` outside the batch context: with ``sampling``, generate after
        them, one output per token, without end (the caller stops); with ``targets`` (one
        tuple per token), one output holding their scores.

        Raises (when iterated):
            BackendError: the prompt cannot be decoded.
            GrammarError: the grammar is refused.
        """
        ...

    def release_alone(self) -> None:
        """Give the model's own state back as it was before the items :meth:`run_alone` ran
        since the last release (for a ``Llama``: its KV cache and settings)."""
        ...

    def close(self) -> None:
        """Free the batch context (idempotent). The model stays loaded."""
        ...

"""The Backend protocol: what the engine needs from a model, in token ids.

The engine never imports ``_ffi`` or ``llamacpp``. Two backends exist:
:class:`llamabatch.llamacpp.backend.LlamaBackend` (a loaded ``llama_cpp.Llama``) and
:class:`llamabatch.testing.FakeBackend` (no library). A custom backend implements the
eight members of :class:`Backend`; what it can do is declared once, as data
(:class:`BackendInfo`), and the operations on sequences are data too
(:data:`SeqOp`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..params import SamplingParams
from .step import SeqOutput, Span, StepResult, Targets

__all__ = [
    "Backend",
    "BackendInfo",
    "BatchLimits",
    "Clear",
    "Copy",
    "CutFloor",
    "Load",
    "Release",
    "Save",
    "SeqOp",
    "SlotMemory",
    "Start",
    "Trim",
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
        can_copy: :class:`Copy` works; False: no prefix is copied between slots.
        can_save: :class:`Save` / :class:`Load` work (host-memory states, checkpoints).
        partial_trim: :class:`Trim` may keep a position > 0 (False for recurrent and
            hybrid memories; True is not a promise: a refused trim is learned from).
        n_swa: the window of sliding-window layers in positions, 0 without one; a cache
            is then cut back only where :class:`CutFloor` allows.
        can_score: ``Span.targets`` and scoring alone work.
        can_share_rows: ``Span.share`` works.
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
    """

    n_ctx: int
    max_slots: int
    can_copy: bool = True
    can_save: bool = False
    partial_trim: bool = True
    n_swa: int = 0
    can_score: bool = False
    can_share_rows: bool = False
    min_score_run: int = 1
    lock: AbstractContextManager[Any] | None = None
    check_batch_params: Callable[[int, int, int], None] | None = None
    device: str | None = None
    slot_memory: Callable[[int], SlotMemory] | None = None


# -- operations on sequences (Backend.apply) ------------------------------------------
@dataclass(frozen=True, slots=True)
class Start:
    """A fresh sampler chain for ``seq_id`` from ``sampling``; its cache stays. ``shares``:
    other sequences' chains may sample from its rows (``Span.share``). Returns ``None``;
    raises ``GrammarError`` when the grammar is refused."""

    seq_id: int
    sampling: SamplingParams
    shares: bool = False


@dataclass(frozen=True, slots=True)
class Trim:
    """Keep positions [0, n_keep) of ``seq_id``. Returns False when the memory refused
    (the cache is then unknown until trimmed to 0, which is never refused)."""

    seq_id: int
    n_keep: int


@dataclass(frozen=True, slots=True)
class Copy:
    """``dst``'s cache becomes a copy of ``src``'s whole cache. Returns ``None``."""

    src: int
    dst: int


@dataclass(frozen=True, slots=True)
class Save:
    """A copy of ``seq_id``'s cache; ``len(state)`` is its size in bytes."""

    seq_id: int


@dataclass(frozen=True, slots=True)
class Load:
    """``seq_id``'s cache becomes ``state`` (of :class:`Save`). Returns ``None``."""

    seq_id: int
    state: Any


@dataclass(frozen=True, slots=True)
class CutFloor:
    """The smallest ``n`` > 0 that ``seq_id``'s cache can be cut back to and decoded on
    from (0: any; a cut to 0 or to the whole cache is always fine). Asked only with
    ``n_swa`` > 0."""

    seq_id: int


@dataclass(frozen=True, slots=True)
class Clear:
    """Empty every sequence of the batch context (a no-op without one)."""


@dataclass(frozen=True, slots=True)
class Release:
    """Give the model's own state back as it was before the items run alone since the
    last release (for a ``Llama``: its KV cache and settings)."""


SeqOp = Start | Trim | Copy | Save | Load | CutFloor | Clear | Release


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
        """The text of ``tokens``, decoded from all their bytes at once."""
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

    def apply(self, op: SeqOp) -> Any:
        """Do one operation on the sequences' state (see each op for what it returns)."""
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

    def close(self) -> None:
        """Free the batch context (idempotent). The model stays loaded."""
        ...

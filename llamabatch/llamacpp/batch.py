"""LlamaBatch: a fixed-capacity builder of one ``llama_batch`` (llama.h), filled through numpy
views. It refuses what would make ``llama_decode`` fail or abort: more rows than the
capacity, a sequence id outside [0, n_seq_max), a negative position, an empty run."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import _ffi
from .._util.closing import Closing


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value >= high):
        valid = f"[{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"{name}={value!r} is out of range: valid is an integer {valid}")
    return int(value)


class LlamaBatch(Closing):
    """One ``llama_batch_init(capacity, 0, 1)`` allocation, reused across decodes: ``capacity``
    tokens at most (the context's ``n_batch``), sequence ids in [0, n_seq_max). ValueError
    when either is < 1, LibraryError when llama-cpp-python or ``llama_batch_init`` is missing."""

    def __init__(self, capacity: int, n_seq_max: int) -> None:
        self.capacity = _check_int("capacity", capacity, 1)
        self.n_seq_max = _check_int("n_seq_max", n_seq_max, 1)
        lib = _ffi.load()
        lib.symbols.require("batch_init", "batch_free")
        self._buf = lib.batch_buffers(self.capacity)
        self._n = 0
        self._arange = np.arange(self.capacity, dtype=np.int32)

    @property
    def n_tokens(self) -> int:
        """Rows filled since the last :meth:`clear`."""
        return self._n

    @property
    def free(self) -> int:
        """Rows still available."""
        return self.capacity - self._n

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._buf.closed

    @property
    def native(self) -> _ffi.BatchBuffers:
        """The underlying buffers (for ``BatchContext.decode``)."""
        return self._buf

    def _need(self, k: int) -> int:
        if self._buf.closed:
            raise ValueError("the LlamaBatch is closed")
        if k > self.capacity - self._n:
            raise ValueError(
                f"{k} more token(s) would exceed the batch capacity: "
                f"{self._n} of {self.capacity} rows are used"
            )
        return self._n

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token of ``seq_id`` at ``pos``; its batch index. ValueError when the batch is
        full, ``seq_id`` is outside [0, n_seq_max) or ``pos`` < 0."""
        seq_id = _check_int("seq_id", seq_id, 0, self.n_seq_max)
        pos = _check_int("pos", pos, 0)
        i = self._need(1)
        buf = self._buf
        buf.token[i], buf.pos[i], buf.seq_id[i], buf.logits[i] = token, pos, seq_id, logits
        self._n = i + 1
        buf.set_n_tokens(self._n)
        return i

    def add_run(
        self, tokens: Sequence[int] | np.ndarray, pos0: int, seq_id: int, logits_last: bool
    ) -> int:
        """Append ``tokens`` of ``seq_id`` at positions pos0, pos0 + 1, ...; only the last may
        request logits. Returns the batch index of the last token. ValueError for an empty run,
        not enough room, ``seq_id`` outside [0, n_seq_max) or ``pos0`` < 0."""
        seq_id = _check_int("seq_id", seq_id, 0, self.n_seq_max)
        pos0 = _check_int("pos0", pos0, 0)
        k = len(tokens)
        if k == 0:
            raise ValueError("tokens is empty: a run needs at least one token")
        i = self._need(k)
        j = i + k
        buf = self._buf
        buf.token[i:j] = tokens
        np.add(self._arange[:k], pos0, out=buf.pos[i:j])
        buf.seq_id[i:j] = seq_id
        buf.logits[i : j - 1] = 0
        buf.logits[j - 1] = logits_last
        self._n = j
        buf.set_n_tokens(j)
        return j - 1

    def add_steps(self, tokens: list[int], positions: list[int], seq_ids: list[int]) -> int:
        """Append one token per sequence, each requesting logits (a reply step), in one write
        per array; the batch index of the first. ValueError as :meth:`add` or for lists of
        unequal length."""
        k = len(tokens)
        if k == 0 or len(positions) != k or len(seq_ids) != k:
            raise ValueError(
                f"{k} tokens, {len(positions)} positions, {len(seq_ids)} seq ids: give one "
                "of each per step, at least one"
            )
        _check_int("seq_id", min(seq_ids), 0, self.n_seq_max)
        _check_int("seq_id", max(seq_ids), 0, self.n_seq_max)
        _check_int("pos", min(positions), 0)
        i = self._need(k)
        j = i + k
        buf = self._buf
        buf.token[i:j] = tokens
        buf.pos[i:j] = positions
        buf.seq_id[i:j] = seq_ids
        buf.logits[i:j] = 1
        self._n = j
        buf.set_n_tokens(j)
        return i

    def request_logits(self, i: int) -> None:
        """Have filled row ``i`` output logits too (label scores read several rows of a run);
        ValueError for a row not filled."""
        i = _check_int("i", i, 0, self._n)
        self._buf.logits[i] = 1

    def clear(self) -> None:
        """Forget every row; the allocation is kept."""
        self._n = 0
        if not self._buf.closed:
            self._buf.set_n_tokens(0)

    def close(self) -> None:
        """Free the ``llama_batch`` (``llama_batch_free``); idempotent."""
        self._n = 0
        self._buf.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self._n}/{self.capacity} rows"
        return f"LlamaBatch({state}, n_seq_max={self.n_seq_max})"

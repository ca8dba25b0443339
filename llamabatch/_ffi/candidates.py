"""Token candidates (``llama_token_data_array``) over one row of logits, for samplers applied
by hand (a grammar checked lazily, log-probabilities): the steps of
``llama_sampler_sample`` (llama-sampler.cpp) one by one, rows in a numpy structured array
of llama.h's ``llama_token_data`` layout."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..errors import GrammarError
from .handles import ContextHandle

#: llama.h ``llama_token_data``: ``{llama_token id; float logit; float p;}``.
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class Candidates:
    """A reusable ``llama_token_data_array`` of ``n_vocab`` rows; ``module`` is
    ``llama_cpp.llama_cpp``, ``fn`` the resolved functions."""

    def __init__(self, module: Any, fn: dict[str, Any], n_vocab: int) -> None:
        if ctypes.sizeof(module.llama_token_data) != TOKEN_DATA.itemsize:
            raise GrammarError(
                "llama_token_data is not {int32, float, float} in this "
                "llama-cpp-python; cannot check a grammar lazily"
            )
        self.n_vocab = n_vocab
        self.rows = np.zeros(n_vocab, dtype=TOKEN_DATA)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._data = self.rows.ctypes.data_as(ctypes.POINTER(module.llama_token_data))
        self._array = module.llama_token_data_array(self._data, n_vocab, -1, False)
        self._ref = ctypes.byref(self._array)
        self._one = np.zeros(1, dtype=TOKEN_DATA)
        one = self._one.ctypes.data_as(ctypes.POINTER(module.llama_token_data))
        self._one_array = module.llama_token_data_array(one, 1, -1, False)
        self._one_ref = ctypes.byref(self._one_array)
        self._logits_ith = fn["get_logits_ith"]
        self._apply = fn["sampler_apply"]

    def logits(self, ctx: ContextHandle, i: int) -> np.ndarray:
        """A view of ``llama_get_logits_ith(ctx, i)`` (float32[n_vocab], valid until the next
        decode); the caller checked that row ``i`` has logits."""
        ptr = self._logits_ith(ctx.ctx, i)
        if not ptr:
            raise GrammarError(f"llama_get_logits_ith returned NULL for row {i}")
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def fill(self, logits: np.ndarray, ids: np.ndarray | None = None) -> None:
        """``rows[j] = {id, logits[id], 0}`` for the ``j``-th of ``ids`` (int, ascending; every
        id of the row when None), ``size = len(ids)``, ``selected = -1``."""
        if ids is None:
            rows, ids, size = self.rows, self._ids, self.n_vocab
        else:
            size = len(ids)
            rows = self.rows[:size]
            logits = logits[ids]
        rows["id"] = ids
        rows["logit"] = logits
        rows["p"] = 0.0
        self._array.data = self._data  # a stage may have moved it (XTC drops the top rows)
        self._array.size, self._array.selected, self._array.sorted = size, -1, False

    def _first(self) -> int:
        """The row ``data`` points at: stages may drop leading rows by moving it (XTC)."""
        moved = ctypes.cast(self._array.data, ctypes.c_void_p).value or 0
        return (moved - self.rows.ctypes.data) // TOKEN_DATA.itemsize

    def any_finite(self) -> bool:
        """True when some row has a finite logit; False after a grammar stage: a dead end."""
        first = self._first()
        return bool(np.isfinite(self.rows["logit"][first : first + int(self._array.size)]).any())

    def apply(self, sampler: Any) -> None:
        """``llama_sampler_apply(sampler, &array)`` (stages may sort and shrink it)."""
        self._apply(sampler, self._ref)

    def selected(self) -> tuple[int, float]:
        """The id and logit at ``selected`` after a selecting stage; GrammarError when nothing was
        selected."""
        k, size = int(self._array.selected), int(self._array.size)
        if not 0 <= k < size:
            raise GrammarError(f"the sampler selected no token (selected={k}, size={size})")
        row = self.rows[self._first() + k]
        return int(row["id"]), float(row["logit"])

    def allows(self, sampler: Any, token: int) -> bool:
        """True when ``sampler`` (a grammar) leaves ``token`` a finite logit, applied to a one-row
        array (as llama.cpp's common sampler checks)."""
        self._one[0] = (token, 0.0, 0.0)
        self._one_array.size, self._one_array.selected, self._one_array.sorted = 1, -1, False
        self._apply(sampler, self._one_ref)
        return bool(np.isfinite(self._one[0]["logit"]))

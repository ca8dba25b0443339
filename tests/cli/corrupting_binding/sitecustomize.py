"""A stand-in for a GPU backend with a multi-sequence defect (as llama.cpp #28537 on HIP):
the real llama-cpp-python, whose logits are wrong for every row of a ``llama_decode`` that
mixes a prompt (several tokens of one sequence) with other sequences' one-token steps,
while every call reports success. Put this directory first on ``PYTHONPATH``: Python
imports this ``sitecustomize`` at start-up, before llamabatch resolves the binding's
functions; tests only."""

from __future__ import annotations

import collections
import ctypes

import llama_cpp.llama_cpp as _binding
import numpy as np

#: Added to the logits of even token ids in a corrupted row.
SHIFT = 4.0

_decode = _binding.llama_decode
_logits_ith = _binding.llama_get_logits_ith
_state = {"mixed": False, "calls": 0}
_done: set[tuple[int, int]] = set()


def _is_mixed(batch) -> bool:
    per_seq = collections.Counter(batch.seq_id[i][0] for i in range(batch.n_tokens))
    return len(per_seq) > 1 and max(per_seq.values()) > 1 and min(per_seq.values()) == 1


def llama_decode(ctx, batch):
    _state["mixed"], _state["calls"] = _is_mixed(batch), _state["calls"] + 1
    return _decode(ctx, batch)


def llama_get_logits_ith(ctx, i):
    ptr = _logits_ith(ctx, i)
    key = (_state["calls"], int(i))
    if ptr and _state["mixed"] and key not in _done:
        _done.add(key)
        model = _binding.llama_get_model(ctx)
        n_vocab = _binding.llama_vocab_n_tokens(_binding.llama_model_get_vocab(model))
        row = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), (n_vocab,))
        row[::2] += SHIFT
    return ptr


_binding.llama_decode = llama_decode
_binding.llama_get_logits_ith = llama_get_logits_ith

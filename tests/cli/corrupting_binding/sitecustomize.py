"""A stand-in for a GPU backend with a multi-sequence defect: the real llama-cpp-python,
whose logits are wrong for the rows of some ``llama_decode`` calls while every call reports
success. Put this directory first on ``PYTHONPATH``: Python imports this ``sitecustomize``
at start-up, before llamabatch resolves the binding's functions; tests only.

``LLAMABATCH_CORRUPT`` picks the defect (every one needs another sequence's one-token step
in the same call):

- ``mixed`` (default): a call mixing a prompt (several tokens of one sequence) with other
  sequences' one-token steps, as llama.cpp #28537 on HIP;
- ``long``: a call in which a prompt goes past ``n_ubatch`` tokens (llamabatch's contexts
  have ``n_ubatch == n_batch``, so such a prompt is decoded over several calls), as
  llama.cpp #28211 on HIP;
- ``refill``: a prompt decoded from position 0 into a sequence removed
  (``llama_memory_seq_rm``) while other sequences kept their cache, as one request's KV
  leaking into another (llama.cpp #28056).
"""

from __future__ import annotations

import collections
import ctypes
import itertools
import os

import llama_cpp.llama_cpp as _binding
import numpy as np

#: Added to the logits of even token ids in a corrupted row.
SHIFT = 4.0

MODE = os.environ.get("LLAMABATCH_CORRUPT", "mixed")

_decode = _binding.llama_decode
_logits_ith = _binding.llama_get_logits_ith
_seq_rm = _binding.llama_memory_seq_rm
_state = {"bad": False, "calls": 0}
_done: set[tuple[int, int]] = set()
_gen = itertools.count(1)
_holding: dict[int, int] = {}  # seq id -> generation of the cache it holds
_freed: dict[int, dict[int, int]] = {}  # seq id -> what the others held when it was removed


def llama_memory_seq_rm(mem, seq_id, p0, p1):
    seq = int(seq_id)
    if int(p0) <= 0 and int(p1) < 0:  # the whole sequence
        _holding.pop(seq, None)
        _freed[seq] = dict(_holding)
    return _seq_rm(mem, seq_id, p0, p1)


def _is_bad(ctx, batch) -> bool:
    per_seq = collections.Counter(batch.seq_id[i][0] for i in range(batch.n_tokens))
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for i in range(batch.n_tokens):
        s, p = batch.seq_id[i][0], batch.pos[i]
        first.setdefault(s, p)
        last[s] = p
    beside = len(per_seq) > 1 and min(per_seq.values()) == 1
    prompts = [s for s, n in per_seq.items() if n > 1]
    bad = False
    if MODE == "mixed":
        bad = beside and bool(prompts)
    elif MODE == "long":
        n_ubatch = _binding.llama_n_ubatch(ctx)
        bad = beside and any(last[s] + 1 > n_ubatch for s in prompts)
    elif MODE == "refill":
        for s in prompts:
            held = _freed.get(s)
            if beside and first[s] == 0 and held:
                bad = bad or any(_holding.get(o) == g for o, g in held.items())
    for s in per_seq:
        if first[s] == 0:
            _holding[s] = next(_gen)
        _freed.pop(s, None)
    return bad


def llama_decode(ctx, batch):
    _state["bad"], _state["calls"] = _is_bad(ctx, batch), _state["calls"] + 1
    return _decode(ctx, batch)


def llama_get_logits_ith(ctx, i):
    ptr = _logits_ith(ctx, i)
    key = (_state["calls"], int(i))
    if ptr and _state["bad"] and key not in _done:
        _done.add(key)
        model = _binding.llama_get_model(ctx)
        n_vocab = _binding.llama_vocab_n_tokens(_binding.llama_model_get_vocab(model))
        row = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), (n_vocab,))
        row[::2] += SHIFT
    return ptr


_binding.llama_decode = llama_decode
_binding.llama_get_logits_ith = llama_get_logits_ith
_binding.llama_memory_seq_rm = llama_memory_seq_rm

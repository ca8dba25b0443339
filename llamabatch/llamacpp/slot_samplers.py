"""The sampler chain of each sequence of a batch context, on the host or on the model's
device (llama.cpp's backend sampling, ``llama_set_sampler``: the chain's leading stages run
in the decode's graph and only the chosen token comes back; no grammar stage; a sequence
with an attached chain gets no raw logits). See docs/performance.md.
"""

from __future__ import annotations

from typing import Any

from .. import _ffi
from .._util.closing import Closing
from ..params import SamplingParams
from .context import BatchContext
from .sampler import SeqSampler, samples_on_backend

#: Why chains do not sample on the device unless asked (``backend_sampling=True``).
CHAIN_CHANGES = (
    "not asked for (backend_sampling=True): a chain attached, replaced or detached "
    "(llama_set_sampler) after the batch context decoded corrupted the heap at its next "
    "decode on a Vulkan device, other GPU backends were not tried, and a batch changes "
    "chains whenever a slot takes an item of other sampling settings (llama-cpp-python 0.3.36)"
)


def backend_sampling_refused(device: str | None) -> str | None:
    """Why the chains of a batch context whose logits are on ``device`` do not sample there
    by default, or ``None`` on the CPU (``device`` ``None``): :data:`CHAIN_CHANGES` (seen on
    Mesa's lavapipe; the CPU build does not corrupt; the device check cannot try that call
    order, which ends the process where the defect is)."""
    return None if device is None else CHAIN_CHANGES


class SlotSamplers(Closing):
    """One :class:`SeqSampler` per started sequence of ``ctx``. With ``on_backend``, a
    plain chain (:func:`~.sampler.samples_on_backend`) not asked to sample on the host
    (``host``) is attached to ``ctx``; the rest sample on the host. An attached chain stays
    with its sequence for the next request with an equal chain but the seed (each attach
    makes llama.cpp rebuild its graphs).
    """

    def __init__(self, llm: Any, ctx: BatchContext, on_backend: bool) -> None:
        self._llm, self._ctx, self.on_backend = llm, ctx, on_backend
        self._samplers: dict[int, SeqSampler] = {}
        self._candidates: _ffi.Candidates | None = None  # one for every chain: a row at a time
        self._closed = False

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._samplers

    def __getitem__(self, seq_id: int) -> SeqSampler:
        return self._samplers[seq_id]

    @property
    def attached(self) -> set[int]:
        """The seq ids whose chain is attached to the context."""
        return {sid for sid, sampler in self._samplers.items() if sampler.attached}

    def start(self, seq_id: int, params: SamplingParams, host: bool = False) -> None:
        """A fresh chain for ``seq_id`` from ``params``; ``host``: on the host, its rows read
        as numbers. GrammarError (nothing changed) when llama.cpp refuses the grammar."""
        if self._candidates is None:
            self._candidates = _ffi.load().samplers.candidates(self._ctx.n_vocab)
        fresh = SeqSampler(self._llm, params, candidates=self._candidates)
        old = self._samplers.get(seq_id)
        backend = self.on_backend and not host and samples_on_backend(params)
        if backend and old is not None and old.attached and old.key == fresh.key:
            fresh.carry_into(old)  # same stages, the fresh seed: no new attach
            fresh.close()
            return
        ctx = self._ctx
        if backend:  # replaces (so releases) the chain attached before, if any; refused:
            fresh.attached = ctx.set_sampler(seq_id, fresh.chain)  # llama.cpp detached it
        elif old is not None and old.attached:
            ctx.set_sampler(seq_id, None)
        self._samplers[seq_id] = fresh
        if old is not None:
            old.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Detach the attached chains (while the context is open), then free every chain;
        idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._ctx.closed:  # a freed context holds no chain any more
            for seq_id in sorted(self.attached):
                self._ctx.set_sampler(seq_id, None)
        for sampler in self._samplers.values():
            sampler.close()
        self._samplers.clear()

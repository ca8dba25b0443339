"""SeqSampler: one sequence's llama.cpp sampler chain, built like ``Llama.generate``'s.

The chain is llama-cpp-python's ``Llama._init_sampler`` (0.3.x), stage for stage:

* ``temperature > 0``: penalties(n_vocab, last_n, repeat, freq, present) → top_k(k) →
  typical(p, min_keep=1) → top_p(p, 1) → min_p(p, 1) → temp(t) → dist(seed);
* ``temperature == 0``: penalties(...) → greedy.

``llama_sampler_sample`` (llama.h) applies the chain to the logits of one batch row and
*accepts* the chosen token into the chain (penalty history, dist's RNG): it must not be
accepted again. Prompt tokens are not fed to the history, as in ``Llama.generate``.
"""

from __future__ import annotations

import weakref
from typing import Any

from .. import _ffi
from ..params import SamplingParams

#: ``min_keep`` of typical/top_p/min_p in ``Llama._init_sampler`` (``max(1, n_probs=0)``).
MIN_KEEP = 1


def _n_vocab(lib: _ffi.Library, source: Any) -> int:
    if isinstance(source, _ffi.ModelHandle):
        return lib.n_vocab(lib.vocab(source))
    n_vocab = getattr(source, "n_vocab", None)
    if callable(n_vocab):
        return int(n_vocab())
    raise TypeError(f"expected a llama_cpp.Llama or a ModelHandle, got {type(source).__name__}")


class SeqSampler:
    """One sampler chain (``llama_sampler_chain_init``) for one sequence.

    Args:
        source: a ``llama_cpp.Llama`` or a model handle (for ``n_vocab``, which the
            penalties stage needs).
        params: the sampling parameters.

    Raises:
        LibraryError: a sampler symbol is missing in the installed llama-cpp-python.
        MemoryError: llama.cpp returned NULL for a stage.
    """

    def __init__(self, source: Any, params: SamplingParams) -> None:
        lib = _ffi.load()
        self.params = params
        self._chains = chains = lib.samplers
        n_vocab = _n_vocab(lib, source)
        chain = chains.new_chain()
        self._finalizer = weakref.finalize(self, chains.free, chain)
        self._chain = chain
        chains.add_penalties(chain, n_vocab, params.penalty_last_n, params.repeat_penalty,
                             params.frequency_penalty, params.presence_penalty)
        if params.is_greedy:
            chains.add_greedy(chain)
        else:
            chains.add_top_k(chain, params.top_k)
            chains.add_typical(chain, params.typical_p, MIN_KEEP)
            chains.add_top_p(chain, params.top_p, MIN_KEEP)
            chains.add_min_p(chain, params.min_p, MIN_KEEP)
            chains.add_temp(chain, params.temperature)
            chains.add_dist(chain, params.effective_seed)

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return not self._finalizer.alive

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise ValueError("the SeqSampler is closed")

    def sample(self, ctx: Any, i: int) -> int:
        """Sample (and accept) the next token from batch row ``i`` of ``ctx``'s last decode.

        Args:
            ctx: a ``BatchContext`` (``handle`` and ``check_output`` are used).
            i: the batch index of a token decoded with logits.

        Returns:
            the token id (``llama_sampler_sample``).

        Raises:
            ValueError: the sampler or the context is closed.
            IndexError: row ``i`` has no logits (checked first: llama.cpp would abort).
        """
        self._check_open()
        handle = ctx.handle
        ctx.check_output(i)
        return self._chains.sample(self._chain, handle, i)

    def stage_names(self) -> list[str]:
        """The chain's stage names in order (``llama_sampler_chain_get`` +
        ``llama_sampler_name``); a no-op stage may carry a leading ``?``."""
        self._check_open()
        return self._chains.stage_names(self._chain)

    def close(self) -> None:
        """Free the chain and its stages (``llama_sampler_free``); idempotent."""
        self._finalizer()

    def __enter__(self) -> SeqSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

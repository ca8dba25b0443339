"""The one sampler chain of every item, batched or alone: :class:`SeqSampler`, one
sequence's llama.cpp chain built from :data:`llamabatch.params.STAGES` stage for stage as
llama-cpp-python's ``Llama._init_sampler`` (0.3.x) builds ``Llama.generate``'s."""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _ffi
from .._util.closing import Closing
from ..errors import GrammarDeadEnd, GrammarError
from ..params import PENALTY_FIELDS, STAGES, SamplingParams
from .constraints import grammar_of


def _vocab(lib: _ffi.Library, source: Any) -> _ffi.VocabHandle:
    if isinstance(source, _ffi.ModelHandle):
        return lib.vocab(source)
    if callable(getattr(source, "n_vocab", None)):
        return lib.vocab(_ffi.model_of(source))
    raise TypeError(f"expected a llama_cpp.Llama or a ModelHandle, got {type(source).__name__}")


def top_logprobs(logits: np.ndarray, token: int, n: int) -> tuple[tuple[int, float], ...]:
    """The ``n`` likeliest ``(token_id, logprob)`` of a row of raw logits, likeliest first,
    then ``token`` if not among them; logprob = ``log_softmax(logits)``, as
    ``Llama.logits_to_logprobs``."""
    row = logits.astype(np.float64)
    top = row.max()
    logz = top + math.log(float(np.exp(row - top).sum()))
    ids = np.argpartition(-row, n)[:n] if 0 < n < row.size else np.arange(min(n, row.size))
    ids = ids[np.argsort(-row[ids], kind="stable")]
    pairs = [(int(t), float(row[t] - logz)) for t in ids]
    if token not in {t for t, _ in pairs}:
        pairs.append((token, float(row[token] - logz)))
    return tuple(pairs)


def penalties_off(params: SamplingParams) -> bool:
    """True when the penalties stage is a no-op (llama.cpp builds an empty ``?penalties``:
    ``llama_sampler_penalties::is_disabled``, its floats compared as C floats)."""
    repeat, freq, present = np.float32(
        (params.repeat_penalty, params.frequency_penalty, params.presence_penalty)
    )
    return params.penalty_last_n == 0 or (repeat == 1 and freq == 0 and present == 0)


def samples_on_backend(params: SamplingParams) -> bool:
    """True when ``params``' chain may run on the model's device (llama.cpp's backend
    sampling): no grammar (llama.cpp has no backend grammar stage), no active penalties, no
    logprobs and no scores of labels or of the prompt (they read rows' logits on the host)."""
    return (
        params.constraint is None
        and params.logprobs is None
        and not params.scores_labels
        and not params.score_prompt
        and penalties_off(params)
    )


def top_k_superset(logits: np.ndarray, k: int) -> np.ndarray | None:
    """Ascending ids of at least the ``k`` largest logits of a row: those not below the
    smallest maximum of ``k`` equal blocks (each block holds one), a few ``k`` on a model's
    row. None when that is the whole row or fewer than ``k`` (a NaN)."""
    n = logits.size // k * k
    ids = np.flatnonzero(logits >= logits[:n].reshape(k, -1).max(axis=1).min())
    return ids if k <= ids.size < logits.size else None


def chain_key(params: SamplingParams, grammar: str | None) -> tuple[object, ...]:
    """What :class:`SeqSampler` builds from ``params`` into its chain (``grammar``: the text of
    a grammar stage in it), all but the seed: chains with equal keys have the same stages with
    the same settings (``llama_sampler_copy`` can carry one's state into the other)."""
    penalties = (*(getattr(params, name) for name in PENALTY_FIELDS), grammar)
    if params.is_greedy:
        return (*penalties, "greedy")
    return (
        *penalties,
        *(
            (stage.init, *(getattr(params, name) for name in stage.fields))
            for stage in STAGES
            if stage.is_built(params)
        ),
    )


def token_logsoftmax(logits: np.ndarray, ids: Sequence[int]) -> tuple[tuple[float, ...], float]:
    """``log_softmax(logits)[t]`` (natural log) for each ``t`` of ``ids``, and the row's largest
    ``log_softmax``; ``logits`` is one row of n_vocab, summed in float64."""
    top = logits.max()
    logz = float(top) + math.log(float(np.exp(logits - top).sum(dtype=np.float64)))
    return tuple(float(logits[t]) - logz for t in ids), float(top) - logz


#: The root rule of the probe grammar of :meth:`SeqSampler._is_complete`.
PROBE_ROOT = "llamabatch-complete"


class SeqSampler(Closing):
    """One sampler chain (``llama_sampler_chain_init``) for one sequence, batched or alone:
    penalties → greedy at ``temperature == 0``, else penalties →
    :data:`~llamabatch.params.STAGES` (top_k → typical → top_p → min_p → xtc where it acts →
    temp → dist(seed)); a grammar right after penalties. Prompt tokens are not fed to the
    penalty history, as in ``Llama.generate``.

    Args:
        source: a ``llama_cpp.Llama`` or a model handle (the penalties stage needs n_vocab).
        lazy_grammar: check a grammar only on the token the chain picked, as llama.cpp's
            ``common/sampling.cpp`` does (docs/outputs.md); False runs it over the whole
            vocabulary like ``Llama``, where a dead end aborts the process (tests only).
        candidates: a :class:`~llamabatch._ffi.Candidates` of n_vocab rows to use (shared by
            the samplers of one context, which sample one row at a time), else its own.

    Attributes:
        key: :func:`chain_key` of ``params``.
        attached: the chain samples on the model's device (set by whoever attached it).

    Raises:
        LibraryError: a sampler symbol is missing in the installed llama-cpp-python.
        GrammarError: llama.cpp refused the grammar, or the json_schema cannot be compiled.
        MemoryError: llama.cpp returned NULL for a stage.
    """

    def __init__(
        self,
        source: Any,
        params: SamplingParams,
        *,
        lazy_grammar: bool = True,
        candidates: _ffi.Candidates | None = None,
    ) -> None:
        lib = _ffi.load()
        self.params = params
        self._chains = chains = lib.samplers
        vocab = _vocab(lib, source)
        n_vocab = lib.n_vocab(vocab)
        grammar_text = grammar_of(params)  # GrammarError before anything is allocated
        self.key = chain_key(params, None if lazy_grammar else grammar_text)
        chain = chains.new_chain()
        self._finalizer = weakref.finalize(self, chains.free, chain)
        self._chain = chain
        self._grammar: _ffi.SamplerHandle | None = None
        self._grammar_text, self._vocab = grammar_text, vocab
        self._accepted: list[int] = []  # the tokens accepted into the lazily checked grammar
        self._candidates = candidates
        self.attached = False
        # The first stage that reads the whole row, where nothing before it changes the row:
        # greedy is the row's first maximum (llama_sampler_greedy_apply); top_k keeps the same
        # tokens of a superset of them, so the chain runs on that (no full-row copy).
        plain = grammar_text is None and penalties_off(params)
        self._argmax = plain and params.is_greedy
        self._top_k = (
            params.top_k if plain and not self._argmax and 0 < params.top_k < n_vocab else 0
        )
        chains.add_penalties(
            chain,
            n_vocab,
            params.penalty_last_n,
            params.repeat_penalty,
            params.frequency_penalty,
            params.presence_penalty,
        )
        if grammar_text is not None:
            grammar = chains.new_grammar(vocab, grammar_text)
            if lazy_grammar:
                self._grammar_finalizer = weakref.finalize(self, chains.free, grammar)
                self._grammar = grammar
            else:
                chains.add_to(chain, grammar)
        if self._candidates is None and (
            self._grammar is not None or params.logprobs is not None or self._top_k
        ):
            self._candidates = chains.candidates(n_vocab)
        if params.is_greedy:
            chains.add(chain, "greedy")
        else:
            for stage in STAGES:
                if stage.is_built(params):
                    chains.add(chain, stage.init, *stage.args(params))

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return not self._finalizer.alive

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise ValueError("the SeqSampler is closed")

    @property
    def chain(self) -> _ffi.SamplerHandle:
        """The ``llama_sampler`` chain (to attach it to a context for backend sampling)."""
        self._check_open()
        return self._chain

    @property
    def n_accepted(self) -> int:
        """Tokens accepted into the lazily checked grammar."""
        return len(self._accepted)

    def sample(self, ctx: Any, i: int) -> int | None:
        """Sample and accept (``llama_sampler_sample``) the next token from row ``i`` of the last
        decode of ``ctx`` (a ``BatchContext``); where the chain is attached to ``ctx``, the token
        its backend sampling chose. ``None`` (nothing accepted) when the grammar is complete and
        allows no token: with no end-of-generation token in the vocabulary, which llama.cpp's
        grammar allows only there, the reply ends there. ValueError when the sampler or context
        is closed, IndexError when row ``i`` has no logits (llama.cpp would abort),
        GrammarDeadEnd when the grammar allows no token and is not complete (nothing
        accepted)."""
        self._check_open()
        handle = ctx.handle
        ctx.check_output(i)
        if self._grammar is not None:
            return self._sample_lazily(self._candidates.logits(handle, i))
        if not self.attached and (self._argmax or self._top_k):
            row = ctx.logits(i, copy=False)
            if self._argmax:
                return int(row.argmax())
            ids = top_k_superset(row, self._top_k)
            if ids is not None:
                cand = self._candidates
                cand.fill(row, ids)
                cand.apply(self._chain.chain)
                token = cand.selected()[0]
                self._chains.accept(self._chain, token)
                return token
        return self._chains.sample(self._chain, handle, i)

    def logprobs(self, ctx: Any, i: int, token: int) -> tuple[tuple[int, float], ...]:
        """The :func:`top_logprobs` of row ``i`` of the last decode of ``ctx`` (``params.logprobs``
        of them, then ``token``); ValueError when ``params.logprobs`` is not set."""
        n = self.params.logprobs
        if n is None or self._candidates is None:
            raise ValueError("this chain was built without logprobs (SamplingParams.logprobs)")
        return top_logprobs(self._candidates.logits(ctx.handle, i), token, n)

    def carry_into(self, other: SeqSampler) -> None:
        """Make ``other`` (an equal :attr:`key`) continue as this chain would: its RNG and penalty
        state (``llama_sampler_copy``), its ``params``. ValueError for another key or a grammar
        checked lazily (its state is not in the chain)."""
        self._check_open()
        other._check_open()
        if other.key != self.key or self._grammar is not None or other._grammar is not None:
            raise ValueError(
                "carry_into needs two chains built alike (equal SamplingParams but the seed) "
                "and no grammar checked lazily"
            )
        self._chains.copy_state(self._chain, other._chain)
        other.params = self.params

    def _sample_lazily(self, logits: np.ndarray) -> int | None:
        cand, chains, chain, grammar = (self._candidates, self._chains, self._chain, self._grammar)
        cand.fill(logits)
        cand.apply(chain.chain)
        token, _ = cand.selected()
        if not cand.allows(grammar.chain, token):
            cand.fill(logits)
            cand.apply(grammar.chain)  # masks what the grammar forbids with -inf
            if not cand.any_finite():  # a dead end: accept nothing (llama.cpp aborts)
                if self._is_complete(logits):
                    return None
                raise GrammarDeadEnd(
                    "the grammar allows no token of the vocabulary here (a dead end: e.g. "
                    "a NUL character in a literal, or an empty character class)",
                    self.n_accepted,
                )
            cand.apply(chain.chain)
            token, logit = cand.selected()
            if not math.isfinite(logit) or not cand.allows(grammar.chain, token):
                raise GrammarDeadEnd(
                    "the sampler chain kept no token the grammar allows", self.n_accepted
                )
        chains.accept(grammar, token)  # an allowed token only: llama.cpp aborts otherwise
        chains.accept(chain, token)
        self._accepted.append(token)
        return token

    def _is_complete(self, logits: np.ndarray) -> bool:
        """True when the grammar, which allows no token here, holds a complete sentence: a
        probe grammar (the grammar's ``root`` followed by one or more characters) fed the same
        tokens allows some token exactly when one of the grammar's stacks is empty
        (llama-grammar.cpp, ``llama_grammar_apply_impl``: there only an end-of-generation
        token may follow)."""
        probe_text = f"{self._grammar_text}\n{PROBE_ROOT} ::= root [^\\x00]+\n"
        chains, cand = self._chains, self._candidates
        try:
            probe = chains.new_grammar(self._vocab, probe_text, PROBE_ROOT)
        except GrammarError:  # a grammar whose text cannot be extended: say it is a dead end
            return False
        try:
            for token in self._accepted:  # each allowed by the grammar, so by the probe
                chains.accept(probe, token)
            cand.fill(logits)
            cand.apply(probe.chain)
            return cand.any_finite()
        finally:
            chains.free(probe)

    def stage_names(self) -> list[str]:
        """The chain's stage names in order; a no-op stage may carry a leading ``?``."""
        self._check_open()
        return self._chains.stage_names(self._chain)

    def close(self) -> None:
        """Free the chain and its stages (``llama_sampler_free``); idempotent."""
        if self._grammar is not None:
            self._grammar_finalizer()
        self._finalizer()

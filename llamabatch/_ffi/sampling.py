"""Sampler chains (llama.h ``llama_sampler_*``), built stage by stage."""

from __future__ import annotations

import inspect
from typing import Any

from ..errors import GrammarError, LibraryError
from .candidates import Candidates
from .handles import ContextHandle, SamplerHandle, VocabHandle, expect
from .resolve import Symbols


def _arity(fn: Any) -> int:
    argtypes = getattr(fn, "argtypes", None)
    if argtypes is not None:
        return len(argtypes)
    return len(inspect.signature(fn).parameters)


class SamplerChains:
    """Create, fill, inspect, sample from and free sampler chains."""

    def __init__(self, symbols: Symbols, module: Any = None) -> None:
        self._module = module
        self._fn = symbols.fn
        self._symbols = symbols
        self._sample = symbols.fn["sampler_sample"]

    def new_chain(self) -> SamplerHandle:
        """``llama_sampler_chain_init(llama_sampler_chain_default_params())``; LibraryError when a
        sampler symbol is missing, MemoryError when llama.cpp returns NULL."""
        self._symbols.require(
            "chain_default_params", "chain_init", "chain_add", "sampler_sample", "sampler_free"
        )
        chain = self._fn["chain_init"](self._fn["chain_default_params"]())
        if not chain:
            raise MemoryError("llama_sampler_chain_init returned NULL")
        return SamplerHandle(chain)

    def _add(self, chain: SamplerHandle, stage: Any, what: str) -> None:
        if not stage:
            raise MemoryError(f"llama_sampler_init_{what} returned NULL")
        self._fn["chain_add"](chain.chain, stage)  # the chain now owns the stage

    def add_penalties(
        self,
        chain: SamplerHandle,
        n_vocab: int,
        last_n: int,
        repeat: float,
        freq: float,
        present: float,
    ) -> None:
        """Append ``llama_sampler_init_penalties`` (history of the last ``last_n`` tokens). It takes
        ``n_vocab`` first from llama-cpp-python 0.3.35 on, not before: the bound arity decides."""
        expect(chain, SamplerHandle)
        fn = self._fn["init_penalties"]
        arity = _arity(fn)
        if arity == 5:
            stage = fn(n_vocab, last_n, repeat, freq, present)
        elif arity == 4:
            stage = fn(last_n, repeat, freq, present)
        else:
            raise LibraryError(
                f"llama-cpp-python {self._symbols.version}: "
                f"llama_sampler_init_penalties takes {arity} arguments; "
                "llamabatch knows the 4- and 5-argument forms"
            )
        self._add(chain, stage, "penalties")

    def add(self, chain: SamplerHandle, stage: str, *args: object) -> None:
        """Append ``llama_sampler_init_<stage>(*args)`` (``"top_k"``, ``"dist"``, ``"xtc"``...: a
        role of :data:`~.resolve.CANDIDATES`); LibraryError when the binding lacks it."""
        expect(chain, SamplerHandle)
        role = "init_" + stage
        self._symbols.require(role)
        self._add(chain, self._fn[role](*args), stage)

    def new_grammar(self, vocab: VocabHandle, grammar: str, root: str = "root") -> SamplerHandle:
        """``llama_sampler_init_grammar(vocab, grammar, root)``: a grammar stage on its own (free it
        with :meth:`free`, or hand it to :meth:`add_to`). LibraryError when the symbol is
        missing; GrammarError when llama.cpp refused the grammar (NULL: a parse error, an
        undefined rule, left recursion, no ``root``)."""
        expect(vocab, VocabHandle)
        self._symbols.require("init_grammar")
        try:
            text, name = grammar.encode("utf-8"), root.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise GrammarError(f"the grammar is not valid Unicode text: {exc}") from None
        if b"\0" in text:
            raise GrammarError("the grammar holds a NUL character")
        stage = self._fn["init_grammar"](vocab.vocab, text, name)
        if not stage:
            raise GrammarError(
                "llama.cpp refused the grammar (llama_sampler_init_grammar "
                "returned NULL: a GBNF parse error, an undefined rule, left "
                f"recursion or no '{root}' rule; llama.cpp's log says which)"
            )
        return SamplerHandle(stage)

    def add_to(self, chain: SamplerHandle, stage: SamplerHandle) -> None:
        """Append ``stage`` (from :meth:`new_grammar`) to ``chain``, which then owns it."""
        expect(chain, SamplerHandle)
        self._fn["chain_add"](chain.chain, stage.chain)

    def accept(self, sampler: SamplerHandle, token: int) -> None:
        """``llama_sampler_accept``. A grammar must allow ``token`` (:meth:`Candidates.allows`):
        llama.cpp aborts otherwise."""
        self._fn["sampler_accept"](sampler.chain, token)

    def candidates(self, n_vocab: int) -> Candidates:
        """A reusable :class:`Candidates` array of ``n_vocab`` rows; LibraryError when
        ``llama_sampler_apply`` / ``llama_sampler_accept`` is missing."""
        self._symbols.require("sampler_apply", "sampler_accept", "get_logits_ith")
        return Candidates(self._module, self._fn, n_vocab)

    def stage_names(self, chain: SamplerHandle) -> list[str]:
        """``llama_sampler_name`` of each stage, in order; a no-op stage may be named with a leading
        ``?`` (e.g. ``?penalties``)."""
        expect(chain, SamplerHandle)
        self._symbols.require("chain_n", "chain_get", "sampler_name")
        n = int(self._fn["chain_n"](chain.chain))
        names = (self._fn["sampler_name"](self._fn["chain_get"](chain.chain, i)) for i in range(n))
        return [name.decode("utf-8", errors="replace") for name in names]

    def attach(self, ctx: ContextHandle, seq_id: int, chain: SamplerHandle | None) -> bool:
        """``llama_set_sampler(ctx, seq_id, chain)``: llama.cpp runs ``chain`` on the model's
        device for ``seq_id``'s output rows (the stages it can, a prefix of the chain), and
        ``llama_sampler_sample`` returns the token it chose; ``None`` detaches. The chain must
        stay alive while attached and may be attached once in its life (llama.cpp asserts).
        Returns False when llama.cpp refused it (then nothing is attached)."""
        expect(ctx, ContextHandle)
        return bool(
            self._fn["set_sampler"](ctx.ctx, seq_id, None if chain is None else chain.chain)
        )

    def copy_state(self, src: SamplerHandle, dst: SamplerHandle) -> None:
        """``llama_sampler_copy(src, dst)``: ``dst`` continues as ``src`` would (RNG state,
        penalty history). Both must be built stage for stage alike (llama.cpp asserts)."""
        expect(src, SamplerHandle)
        expect(dst, SamplerHandle)
        self._fn["sampler_copy"](src.chain, dst.chain)

    def sample(self, chain: SamplerHandle, ctx: ContextHandle, i: int) -> int:
        """``llama_sampler_sample(chain, ctx, i)``: samples and accepts the token."""
        return int(self._sample(chain.chain, ctx.ctx, i))

    def free(self, chain: SamplerHandle) -> None:
        """``llama_sampler_free(chain)`` (frees every stage the chain owns)."""
        expect(chain, SamplerHandle)
        self._fn["sampler_free"](chain.chain)

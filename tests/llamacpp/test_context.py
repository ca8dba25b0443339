"""BatchContext on the real model: limits read back, shared weights, memory, lifetime."""

from __future__ import annotations

import dataclasses
import os
import types

import pytest

from llamabatch import _ffi
from llamabatch._ffi.library import Library
from llamabatch._ffi.memory import bind_memory
from llamabatch._ffi.resolve import resolve
from llamabatch._ffi.sampling import SamplerChains
from llamabatch.engine.backend import BatchLimits
from llamabatch.errors import LibraryError
from llamabatch.llamacpp.batch import LlamaBatch
from llamabatch.llamacpp.context import BatchContext

real_model = pytest.mark.real_model


def prompt(llm, text: str) -> list[int]:
    chat = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    return llm.tokenize(chat.encode(), add_bos=True, special=True)


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


@real_model
def test_limits_are_read_back(llm):
    with BatchContext(llm, slots=2, n_ctx_seq=512, n_batch=128) as ctx:
        assert ctx.limits == BatchLimits(n_seq_max=2, n_ctx_seq=512, n_batch=128, n_ctx=1024)


@real_model
def test_n_ctx_seq_padding_is_reported(llm):
    with BatchContext(llm, slots=4, n_ctx_seq=1000) as ctx:
        assert ctx.limits == BatchLimits(n_seq_max=4, n_ctx_seq=1024, n_batch=512, n_ctx=4096)


@real_model
def test_weights_are_shared_not_loaded_again(llm, model_path):
    before = rss_bytes()
    with (
        BatchContext(llm, slots=2, n_ctx_seq=256, n_batch=64) as ctx,
        LlamaBatch(ctx.limits.n_batch, ctx.limits.n_seq_max) as batch,
    ):
        assert ctx.model == _ffi.model_of(llm)
        batch.add_run(prompt(llm, "Say hi."), 0, 0, True)
        assert ctx.decode(batch) == 0
        grown = rss_bytes() - before
    assert grown < os.path.getsize(model_path) / 2, f"RSS grew by {grown} bytes"


@real_model
def test_clear_empties_sequences(llm):
    tokens = prompt(llm, "Name a color.")
    with BatchContext(llm, slots=3, n_ctx_seq=256) as ctx, LlamaBatch(512, 3) as batch:
        for seq in range(3):
            batch.add_run(tokens, 0, seq, True)
        assert ctx.decode(batch) == 0
        assert [ctx.seq_pos_max(s) for s in range(3)] == [len(tokens) - 1] * 3
        ctx.clear([0, 2])
        assert [ctx.seq_pos_max(s) for s in range(3)] == [-1, len(tokens) - 1, -1]
        ctx.clear_all()
        assert [ctx.seq_pos_max(s) for s in range(3)] == [-1, -1, -1]
        with pytest.raises(ValueError, match=r"seq_id=3 .* \[0, 3\)"):
            ctx.clear([3])


@real_model
def test_close_twice_and_closed(llm):
    ctx = BatchContext(llm, slots=1, n_ctx_seq=256)
    assert not ctx.closed
    ctx.close()
    ctx.close()
    assert ctx.closed
    with pytest.raises(ValueError, match="closed"):
        ctx.seq_pos_max(0)
    with pytest.raises(ValueError, match="closed"):
        _ = ctx.handle


@real_model
def test_injected_decode_failure_returns_its_code(llm):
    seen = []

    def hook(n_tokens: int) -> int:
        seen.append(n_tokens)
        return 1

    with (
        BatchContext(llm, slots=1, n_ctx_seq=256, decode_hook=hook) as ctx,
        LlamaBatch(512, 1) as batch,
    ):
        batch.add_run(prompt(llm, "Hi"), 0, 0, True)
        assert ctx.decode(batch) == 1
        assert seen == [batch.n_tokens]
        assert ctx.seq_pos_max(0) == -1


@real_model
def test_abort_callback_aborts_the_decode(llm):
    with BatchContext(llm, slots=1, n_ctx_seq=256) as ctx, LlamaBatch(512, 1) as batch:
        batch.add_run(prompt(llm, "Hi"), 0, 0, True)
        ctx.set_abort_callback(lambda: True)
        assert ctx.decode(batch) == 2
        ctx.set_abort_callback(None)
        ctx.clear([0])
        assert ctx.decode(batch) == 0


@real_model
def test_decode_refuses_more_than_n_batch(llm):
    with BatchContext(llm, slots=1, n_ctx_seq=256, n_batch=16) as ctx:
        n = ctx.limits.n_batch  # 16, or 64 where llama.cpp raises a smaller n_batch (0.3.16)
        with LlamaBatch(n + 4, 1) as batch:
            batch.add_run(list(range(1, n + 5)), 0, 0, True)
            with pytest.raises(ValueError, match=rf"{n + 4} tokens: valid is \[1, {n}\]"):
                ctx.decode(batch)
            batch.clear()
            with pytest.raises(ValueError, match=r"0 tokens"):
                ctx.decode(batch)


@real_model
def test_too_many_slots_is_a_value_error(llm):
    ceiling = _ffi.load().max_parallel_sequences()
    with pytest.raises(
        ValueError,
        match=rf"slots={ceiling + 1} is out of range: valid is "
        rf"an integer in \[1, {ceiling}\]",
    ):
        BatchContext(llm, slots=ceiling + 1, n_ctx_seq=256)


# -- symbol resolution across llama-cpp-python versions (fake bindings, no library) --------


def fake_binding(**functions) -> types.SimpleNamespace:
    return types.SimpleNamespace(**functions)


def test_missing_essential_symbol_names_it_and_the_version():
    symbols = resolve(fake_binding(llama_decode=lambda *a: 0), "0.3.99-test")
    with pytest.raises(
        LibraryError,
        match=r"0\.3\.99-test has no llama_init_from_model "
        r"/ llama_new_context_with_model",
    ):
        Library(fake_binding(), symbols).require_batching()
    with pytest.raises(LibraryError, match="llama_memory_seq_rm / llama_kv_self_seq_rm"):
        symbols.require("memory")
    with pytest.raises(LibraryError, match="llama_batch_init"):
        symbols.fn["batch_init"](8, 0, 1)


def test_older_names_are_found():
    calls = []
    binding = fake_binding(
        llama_new_context_with_model=lambda m, p: 7,
        llama_token_is_eog=lambda v, t: t == 2,
        llama_kv_self_clear=lambda ctx: calls.append(("clear", ctx)),
        llama_kv_self_seq_rm=lambda ctx, s, p0, p1: calls.append(("rm", ctx, s, p0, p1)) or 1,
        llama_kv_self_seq_pos_max=lambda ctx, s: 41,
    )
    symbols = resolve(binding, "0.3.8-test")
    assert symbols.names["init_context"] == "llama_new_context_with_model"
    assert symbols.names["vocab_is_eog"] == "llama_token_is_eog"
    memory = bind_memory(symbols, 1234)
    assert memory.api == "llama_kv_self"
    memory.clear(True)
    assert memory.seq_rm(3) is True and memory.seq_pos_max(3) == 41
    assert calls == [("clear", 1234), ("rm", 1234, 3, -1, -1)]


def test_fallbacks_for_optional_symbols():
    binding = fake_binding(
        llama_n_ctx=lambda c: 4096, llama_n_seq_max=lambda c: 4, llama_n_batch=lambda c: 512
    )
    lib = Library(binding, resolve(binding, "0.3.16-test"))
    assert lib.max_parallel_sequences() == _ffi.FALLBACK_MAX_PARALLEL_SEQUENCES
    sizes = lib.context_sizes(_ffi.ContextHandle(99))
    assert sizes == {"n_ctx": 4096, "n_ctx_seq": 1024, "n_seq_max": 4, "n_batch": 512}
    with pytest.raises(TypeError, match="expected a ContextHandle, got ModelHandle"):
        lib.context_sizes(_ffi.ModelHandle(99))


def test_handles_are_distinct_frozen_types_with_their_own_field():
    model, ctx = _ffi.ModelHandle(99), _ffi.ContextHandle(99)
    assert model == _ffi.ModelHandle(99) and hash(model) == hash(_ffi.ModelHandle(99))
    assert model != ctx  # same address, another kind of pointer
    assert (model.model, ctx.ctx) == (99, 99)
    with pytest.raises(AttributeError):  # what a hot path does with a wrong handle
        _ = ctx.model
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.model = 1


@pytest.mark.parametrize("arity", [4, 5])
def test_penalties_arity_follows_the_binding(arity):
    added = []

    def penalties_5(n_vocab, last_n, repeat, freq, present):
        return ("penalties", n_vocab, last_n, repeat, freq, present)

    def penalties_4(last_n, repeat, freq, present):
        return ("penalties", last_n, repeat, freq, present)

    binding = fake_binding(
        llama_sampler_init_penalties=penalties_5 if arity == 5 else penalties_4,
        llama_sampler_chain_add=lambda chain, stage: added.append(stage),
    )
    chains = SamplerChains(resolve(binding, "test"))
    chains.add_penalties(_ffi.SamplerHandle("chain"), 49152, 64, 1.1, 0.0, 0.0)
    expected = (49152, 64, 1.1, 0.0, 0.0) if arity == 5 else (64, 1.1, 0.0, 0.0)
    assert added == [("penalties", *expected)]

"""The installed llama-cpp-python, whatever its version: what the fallbacks of ``_ffi``
stand in for works on it for real (``scripts/compat-matrix`` runs this file on every
version of the matrix; the fakes of tests/llamacpp/test_context.py only check the logic).

- ``llama_n_ctx_seq`` (absent from older bindings; then n_ctx // n_seq_max): each
  sequence really holds the number of tokens reported, no more is promised.
- ``llama_sampler_init_penalties`` (4 arguments before 0.3.35, 5 after): penalties give
  the same greedy replies batched as through ``Llama.generate`` alone.
- the memory API generation found (``llama_memory_*`` / ``llama_kv_self_*``): clearing a
  sequence empties it and leaves the others.
"""

from __future__ import annotations

import pytest
from agreement import assert_completions_agree

from llamabatch import BatchGenerator, SamplingParams, _ffi
from llamabatch.llamacpp.batch import LlamaBatch
from llamabatch.llamacpp.context import BatchContext

pytestmark = pytest.mark.real_model


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def test_every_symbol_batching_needs_resolves_on_this_binding():
    lib = _ffi.load()
    lib.require_batching()
    assert lib.symbols.memory[0] in ("llama_memory", "llama_kv_self", "llama_kv_cache")
    assert lib.max_parallel_sequences() >= 4


@pytest.mark.parametrize("slots, n_ctx_seq", [(2, 300), (3, 512)])
def test_each_sequence_holds_the_n_ctx_seq_reported(llm, slots, n_ctx_seq):
    tokens = llm.tokenize(b"one two three four five six seven eight nine ten " * 60)
    with (
        BatchContext(llm, slots=slots, n_ctx_seq=n_ctx_seq, n_batch=256) as ctx,
        LlamaBatch(ctx.limits.n_batch, ctx.limits.n_seq_max) as batch,
    ):
        held = ctx.limits.n_ctx_seq
        assert held >= n_ctx_seq and len(tokens) >= held
        for seq in range(slots):  # every sequence filled to the last cell
            for start in range(0, held, ctx.limits.n_batch):
                run = tokens[start : min(start + ctx.limits.n_batch, held)]
                batch.clear()
                batch.add_run(run, start, seq, True)
                assert ctx.decode(batch) == 0, (seq, start)
            assert ctx.seq_pos_max(seq) == held - 1
        ctx.clear([0])
        assert [ctx.seq_pos_max(s) for s in range(slots)] == [-1] + [held - 1] * (slots - 1)


def test_penalties_give_the_same_greedy_replies_batched_and_alone(llm, reference):
    prompts = [
        chat(q)
        for q in (
            "List five fruits.",
            "Count from one to ten in words.",
            "Name three colours.",
            "Write the word hello three times.",
        )
    ]
    sampling = SamplingParams(
        temperature=0.0, repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.1
    )
    plain = SamplingParams(temperature=0.0)
    with BatchGenerator(llm, slots=4, n_ctx_seq=256, max_tokens=16, sampling=sampling) as gen:
        batched = gen.complete_many(prompts)
    with BatchGenerator(llm, slots=1, max_tokens=16, sampling=sampling) as gen:
        alone = gen.complete_many(prompts)
    with BatchGenerator(llm, slots=1, max_tokens=16, sampling=plain) as gen:
        unpenalized = gen.complete_many(prompts)
    assert [c.path for c in batched] == ["batch"] * 4
    assert_completions_agree(reference, llm, prompts, batched, alone, n=6)  # to a near tie
    # the penalties took part: some reply differs from the unpenalized one
    assert [c.token_ids for c in alone] != [c.token_ids for c in unpenalized]

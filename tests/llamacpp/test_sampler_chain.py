"""SeqSampler on the real model: Llama.generate's chain order, greedy, seeded dist."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from llamabatch.llamacpp.batch import LlamaBatch
from llamabatch.llamacpp.context import BatchContext
from llamabatch.llamacpp.sampler import SeqSampler, top_k_superset
from llamabatch.params import SamplingParams

pytestmark = pytest.mark.real_model

#: ``Llama._init_sampler`` (llama-cpp-python 0.3.x), llama.cpp's stage names.
FULL_CHAIN = ["penalties", "top-k", "typical", "top-p", "min-p", "temp", "dist"]


@contextlib.contextmanager
def decoded_chat(llm, question: bytes):
    """A context whose last decode left logits at batch row ``row``: ``(ctx, row)``."""
    chat = b"<|im_start|>user\n" + question + b"<|im_end|>\n<|im_start|>assistant\n"
    tokens = llm.tokenize(chat, add_bos=True, special=True)
    with BatchContext(llm, slots=1, n_ctx_seq=256) as ctx, LlamaBatch(512, 1) as batch:
        row = batch.add_run(tokens, 0, 0, True)
        assert ctx.decode(batch) == 0
        yield ctx, row


@pytest.fixture(scope="module")
def decoded(llm):
    with decoded_chat(llm, b"Name a fruit.") as found:
        yield found


def names(sampler: SeqSampler) -> list[str]:
    return [name.lstrip("?") for name in sampler.stage_names()]  # "?x": a no-op stage


def test_chain_order_is_llama_generate_s(llm):
    params = SamplingParams(
        temperature=0.7, top_k=20, top_p=0.9, min_p=0.1, typical_p=0.8, repeat_penalty=1.1, seed=1
    )
    with SeqSampler(llm, params) as sampler:
        assert sampler.stage_names() == FULL_CHAIN
    with SeqSampler(llm, SamplingParams()) as sampler:  # defaults: no-op stages kept
        assert names(sampler) == FULL_CHAIN


def test_xtc_is_a_stage_after_min_p_only_where_it_acts(llm):
    params = SamplingParams(temperature=0.7, xtc_probability=0.5, xtc_threshold=0.2, seed=1)
    with SeqSampler(llm, params) as sampler:
        assert names(sampler) == [*FULL_CHAIN[:5], "xtc", *FULL_CHAIN[5:]]
    with SeqSampler(llm, SamplingParams(temperature=0.7, xtc_threshold=0.2)) as sampler:
        assert names(sampler) == FULL_CHAIN  # probability 0: the binding's chain


def test_temperature_zero_is_penalties_then_greedy(llm):
    with SeqSampler(llm, SamplingParams(temperature=0)) as sampler:
        assert names(sampler) == ["penalties", "greedy"]


def test_greedy_is_argmax_of_the_logits(llm, decoded):
    ctx, row = decoded
    logits = ctx.logits(row)
    assert logits.shape == (llm.n_vocab(),) and logits.dtype == np.float32
    with SeqSampler(llm, SamplingParams(temperature=0)) as sampler:
        assert sampler.sample(ctx, row) == int(np.argmax(logits))


def test_seeded_dist_is_reproducible(llm, decoded):
    ctx, row = decoded
    hot = dict(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0)

    def draws(seed: int) -> list[int]:
        with SeqSampler(llm, SamplingParams(seed=seed, **hot)) as sampler:
            return [sampler.sample(ctx, row) for _ in range(12)]

    assert draws(42) == draws(42)
    assert draws(42) != draws(43)


def test_a_row_without_logits_is_refused_not_aborted(llm, decoded):
    ctx, row = decoded
    with SeqSampler(llm, SamplingParams(temperature=0)) as sampler:
        with pytest.raises(IndexError, match=f"rows with logits: \\[{row}\\]"):
            sampler.sample(ctx, row - 1)
        with pytest.raises(IndexError):
            ctx.logits(row + 1)


def test_close_is_idempotent(llm, decoded):
    ctx, row = decoded
    sampler = SeqSampler(llm, SamplingParams())
    sampler.close()
    sampler.close()
    assert sampler.closed
    with pytest.raises(ValueError, match="closed"):
        sampler.sample(ctx, row)


def llama_cpp_sample(sampler: SeqSampler, ctx: BatchContext, row: int) -> int:
    """llama.cpp's own ``llama_sampler_sample`` on ``sampler``'s chain (copies the whole row)."""
    from llama_cpp import llama_cpp

    return int(llama_cpp.llama_sampler_sample(sampler.chain.chain, ctx.handle.ctx, row))


@pytest.mark.parametrize("top_k", [1, 5, 40, 1000])
def test_top_k_on_a_superset_draws_what_llama_cpp_draws(llm, decoded, top_k):
    ctx, row = decoded
    params = SamplingParams(temperature=1.5, top_k=top_k, top_p=0.95, min_p=0.01, seed=7)
    with SeqSampler(llm, params) as ours, SeqSampler(llm, params) as theirs:
        drawn = [ours.sample(ctx, row) for _ in range(40)]
        assert drawn == [llama_cpp_sample(theirs, ctx, row) for _ in range(40)]
    assert top_k == 1 or len(set(drawn)) > 1  # the draws did vary
    if top_k <= 40:  # a model's row: the chain ran on a superset much smaller than the row
        assert top_k <= len(top_k_superset(ctx.logits(row), top_k)) < llm.n_vocab() // 10


def test_greedy_takes_the_first_of_tied_maxima_as_llama_cpp(llm):
    with decoded_chat(llm, b"Name a colour.") as (ctx, row):  # its own: the row is changed
        logits = ctx.logits(row, copy=False)  # llama.cpp's own buffer
        best = int(np.argmax(logits))
        tied = best + 1 + int(np.argmax(logits[best + 1 :]))
        logits[tied] = logits[best] = logits[best] + 1  # two equal maxima, `best` first
        with SeqSampler(llm, SamplingParams(temperature=0)) as ours:
            with SeqSampler(llm, SamplingParams(temperature=0)) as theirs:
                assert ours.sample(ctx, row) == llama_cpp_sample(theirs, ctx, row) == best

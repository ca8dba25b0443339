"""A real sliding-window model: gemma-3-270m Q4_K_M, prompts longer than its window.

gemma 3 interleaves sliding-window attention layers (a window of 512 tokens, GGUF key
``gemma3.attention.sliding_window``) with global ones. With ``swa_full=False`` the
sliding-window layers keep only the last 512 positions of each sequence in their own KV
cache, so a prompt of 600+ tokens makes llama.cpp evict cells while it prefills: in the
batch context, per sequence, in several 512-token chunks. Greedy replies in a batch of 4
must equal the replies completed one at a time through the ``Llama``.

The prompts are ones the model is confident about (continue a count, continue a
repeated phrase); llama.cpp's CPU kernels are not batch-invariant, so the first 4 tokens
are compared until their first near tie (``tests/agreement.py``).
"""

from __future__ import annotations

import inspect

import pytest
from agreement import Reference, assert_completions_agree

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0.0)
COMPARED_TOKENS = 4


def count(start: int, n: int, step: int = 1) -> str:
    return ", ".join(str(start + step * k) for k in range(n)) + ", "


PROMPTS = [
    count(1, 150),  # ... 149, 150, -> 151
    count(2000, 120),  # four-digit numbers
    count(10, 130, 10),  # steps of ten
    "red green blue yellow " * 130 + "red green",  # a repeated phrase
]


@pytest.fixture(scope="module")
def gemma3(gemma3_path):
    import llama_cpp

    kwargs = (
        {"swa_full": False}
        if "swa_full" in inspect.signature(llama_cpp.Llama.__init__).parameters
        else {}
    )
    llm = llama_cpp.Llama(
        model_path=str(gemma3_path), n_ctx=2048, n_threads=2, verbose=False, **kwargs
    )
    yield llm
    llm.close()


def test_the_model_has_a_512_token_window_and_the_prompts_cross_it(gemma3):
    assert gemma3.metadata["general.architecture"] == "gemma3"
    window = int(gemma3.metadata["gemma3.attention.sliding_window"])
    assert window == 512
    lengths = [len(gemma3.tokenize(p.encode())) for p in PROMPTS]
    assert all(window < n < 1024 - 16 for n in lengths), lengths
    assert max(lengths) > 600


def test_batched_replies_equal_replies_alone_past_the_window(gemma3, gemma3_path):
    with BatchGenerator(
        gemma3, slots=4, n_ctx_seq=1024, max_tokens=COMPARED_TOKENS, sampling=GREEDY
    ) as gen:
        batched = gen.complete_many(PROMPTS)
        stats = gen.stats
        kv_after = [gen.backend.batch_context.seq_pos_max(s) for s in range(4)]
    with BatchGenerator(gemma3, slots=1, max_tokens=COMPARED_TOKENS, sampling=GREEDY) as gen:
        alone = gen.complete_many(PROMPTS)
    assert stats.items_batched == 4 and stats.batching_enabled
    assert [c.path for c in batched] == ["batch"] * 4
    assert [c.path for c in alone] == ["alone"] * 4
    # no leak: each sequence holds at most one item's prompt + reply (emptied, or kept
    # for prefix reuse, depending on the engine), never more
    longest = max(c.n_prompt_tokens + c.n_tokens for c in batched)
    assert all(-1 <= pos < longest for pos in kv_after), (kv_after, longest)
    for b in batched:
        assert b.n_tokens == COMPARED_TOKENS, (b.index, b.text)
    reference = Reference(gemma3_path, n_ctx=1024)
    try:
        assert_completions_agree(reference, gemma3, PROMPTS, batched, alone)
    finally:
        reference.close()
    # the model is right about what comes next, so the comparison is of confident tokens
    assert batched[0].text.startswith("151")
    assert batched[1].text.startswith("2120")
    assert batched[2].text.startswith("1310")
    assert batched[3].text.startswith(" blue")

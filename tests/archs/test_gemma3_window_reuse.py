"""Prefix reuse on a real sliding-window model: gemma-3-270m, window 512, ``swa_full=False``.

A is a ~290-token prefix S (which holds a code word) and ~2,400 more tokens; B is S and a
question about the code word. After A ran, a slot (or a state saved in host memory, or
the ``Llama`` itself, for items alone) holds S, but its window layers kept only A's last
512 positions: reusing S there would answer from a hole. B must answer as a fresh
``Llama`` does (compared up to a near tie: ``tests/agreement.py``), and the counters show
that the stale S was not reused. With ``swa_full=True`` the window layers keep every
position, and S is reused.
"""

from __future__ import annotations

import pytest
from agreement import Reference, divergence

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0.0)
MAX_TOKENS = 6
WINDOW = 512

S = (
    "Read this note carefully. The secret code word is PINEAPPLE. "
    + "Keep the code word in mind, you will be asked about it later. " * 21
)
FILLER = "The weather report says the wind comes from the west and the sky stays grey. "
A = S + FILLER * 150 + "\nSummary of the weather:"
B = S + "\nQuestion: what was the secret code word?\nAnswer: The secret code word was"
X = "Count on: 1, 2, 3, 4, 5,"  # short prompts that share nothing with S
Y = "Colours: red, green, blue, red, green,"
Z = "Days: Monday, Tuesday, Wednesday,"


def llama(path, swa_full: bool):
    import llama_cpp

    return llama_cpp.Llama(
        model_path=str(path), n_ctx=4096, n_threads=2, swa_full=swa_full, verbose=False
    )


@pytest.fixture(scope="module")
def windowed(gemma3_path):
    llm = llama(gemma3_path, swa_full=False)
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def fresh_b(gemma3_path):
    """B's greedy reply from a ``Llama`` that never saw A, and B's token ids."""
    llm = llama(gemma3_path, swa_full=False)
    with BatchGenerator(llm, slots=1, max_tokens=MAX_TOKENS, sampling=GREEDY) as gen:
        done = gen.complete_many([B])[0]
    tokens = llm.tokenize(B.encode(), add_bos=True, special=True)
    llm.close()
    assert done.error is None
    return done, tokens


@pytest.fixture(scope="module")
def reference(gemma3_path):
    ref = Reference(gemma3_path, n_ctx=512, kwargs={"swa_full": False})
    yield ref
    ref.close()


def n_tokens(llm, text: str) -> int:
    return len(llm.tokenize(text.encode(), add_bos=True, special=True))


def test_the_prompts_cross_the_window_as_the_case_needs(windowed):
    assert int(windowed.metadata["gemma3.attention.sliding_window"]) == WINDOW
    n_s, n_a, n_b = (n_tokens(windowed, t) for t in (S, A, B))
    assert 250 < n_s < WINDOW and n_a > n_s + 4 * WINDOW and n_b < WINDOW


def generator(llm, **kw) -> BatchGenerator:
    return BatchGenerator(
        llm, slots=2, n_ctx_seq=3072, max_tokens=MAX_TOKENS, sampling=GREEDY, **kw
    )


def assert_like_fresh(reference, got, fresh_b) -> None:
    want, tokens = fresh_b
    assert got.error is None, got.error
    divergence(reference, tokens, got.token_ids, want.token_ids, label="B")


def test_a_slot_whose_window_moved_past_the_prefix_is_not_reused(windowed, fresh_b, reference):
    with generator(windowed) as gen:
        assert all(c.ok for c in gen.complete_many([A, X]))
        cached = gen.stats.prompt_tokens_cached
        got = gen.complete_many([B, Y])
        stats = gen.stats
    assert [c.path for c in got] == ["batch", "batch"]
    assert stats.prompt_tokens_cached - cached < 16  # at most BOS and a word, never S
    assert_like_fresh(reference, got[0], fresh_b)


def test_a_state_in_host_memory_whose_window_moved_past_the_prefix_is_not_loaded(
    windowed, fresh_b, reference
):
    with generator(windowed, cache_ram_mib=512) as gen:
        assert all(c.ok for c in gen.complete_many([A, X]))
        assert all(c.ok for c in gen.complete_many([Y, Z]))  # A's slot is saved
        saves, loads = gen.stats.cache_ram_saves, gen.stats.cache_ram_loads
        cached = gen.stats.prompt_tokens_cached
        got = gen.complete_many([B, X])
        stats = gen.stats
    assert saves >= 1
    assert stats.cache_ram_loads == loads  # A's state shares S with B, but not its window
    assert stats.prompt_tokens_cached - cached < n_tokens(windowed, X) + 16
    assert_like_fresh(reference, got[0], fresh_b)


def test_an_item_alone_after_a_does_not_reuse_the_stale_prefix(windowed, fresh_b, reference):
    with BatchGenerator(windowed, slots=1, max_tokens=MAX_TOKENS, sampling=GREEDY) as gen:
        got = gen.complete_many([A, B])
    assert [c.path for c in got] == ["alone", "alone"]
    assert_like_fresh(reference, got[1], fresh_b)


def test_with_swa_full_the_prefix_is_reused(gemma3_path, fresh_b, reference):
    llm = llama(gemma3_path, swa_full=True)
    try:
        with generator(llm) as gen:
            assert all(c.ok for c in gen.complete_many([A, X]))
            cached = gen.stats.prompt_tokens_cached
            got = gen.complete_many([B, Y])
            stats = gen.stats
        n_s = n_tokens(llm, S)
    finally:
        llm.close()
    assert stats.prompt_tokens_cached - cached >= n_s - 2
    assert_like_fresh(reference, got[0], fresh_b)


CODE_WORDS = ["PINEAPPLE", "BANANA", "MANGO"]


def test_labels_scored_alone_after_a_do_not_reuse_the_stale_prefix(windowed, gemma3_path):
    """The ``Llama`` holds A; B's labels, scored alone, come out as from a fresh
    ``Llama(logits_all=True)`` (within 0.05 nats or 1 %, the label tests' tolerance), not
    from A's hole."""
    import llama_cpp
    from agreement import reference_logprob

    scored = SamplingParams(choices=CODE_WORDS, score_choices=True)
    with BatchGenerator(windowed, slots=1, max_tokens=MAX_TOKENS, sampling=GREEDY) as gen:
        got = gen.complete_many([A, B], [GREEDY, scored])
    assert [c.path for c in got] == ["alone", "alone"]
    assert got[1].error is None, got[1].error
    ref = llama_cpp.Llama(
        model_path=str(gemma3_path),
        n_ctx=1024,
        n_threads=2,
        logits_all=True,
        swa_full=False,
        verbose=False,
    )
    try:
        want = {w: reference_logprob(ref, B, w) for w in CODE_WORDS}
    finally:
        ref.close()
    for word, lp in want.items():
        assert abs(got[1].choice_logprobs[word] - lp) <= max(0.05, 0.01 * abs(lp)), (word, got[1])

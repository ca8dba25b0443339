"""Issue 2 on the real model (SmolLM2-135M-Instruct Q4_1): batching keeps results right.

Each test builds its own BatchGenerator on the session's ``llm`` and closes it. Replies of
two paths (batched and alone, a cache hit and a prefill) are compared until their first
near tie (``tests/agreement.py``): llama.cpp's logits depend on the ubatch split and the
CPU, so no exact equality past a near tie is promised.
"""

from __future__ import annotations

import logging

import pytest
from agreement import assert_completions_agree

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model

FRUITS = (
    "apple",
    "banana",
    "grape",
    "mango",
    "pear",
    "orange",
    "cherry",
    "berry",
    "peach",
    "lemon",
    "lime",
    "citrus",
    "pineapple",
    "kiwi",
    "plum",
    "melon",
    "coconut",
    "avocado",
    "papaya",
    "fig",
)

QUESTIONS = (
    "Which fruit is used to make wine?",
    "What is the most popular fruit in the world?",
    "List three fruits.",
    "Name three fruits that are red.",
    "Give an example of a tropical fruit.",
)


def chat(question: str) -> str:
    return (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    )


FRUIT_PROMPTS = [chat(q) for q in QUESTIONS]
GREEDY = SamplingParams(temperature=0.0)


def names_a_fruit(text: str) -> bool:
    return any(fruit in text.lower() for fruit in FRUITS)


def complete(llm, prompts, **kwargs):
    with BatchGenerator(llm, **kwargs) as gen:
        return gen.complete_many(prompts), gen.stats


@pytest.mark.parametrize("slots", [4, 1])
def test_fruit_prompts_name_a_fruit_in_a_batch_and_alone(llm, slots):
    sampling = SamplingParams(temperature=0.1, seed=7)
    results, stats = complete(
        llm, FRUIT_PROMPTS, slots=slots, n_ctx_seq=512, max_tokens=32, sampling=sampling
    )
    assert [c.index for c in results] == list(range(5))
    for c in results:
        assert c.error is None and names_a_fruit(c.text), (c.index, c.text)
    if slots == 4:
        assert stats.items_batched == 5  # the fifth refills a slot
        assert [c.path for c in results] == ["batch"] * 5
    else:
        assert stats.items_batched == 0 and {c.path for c in results} == {"alone"}


def test_greedy_batch_equals_alone_on_the_first_8_tokens(llm, reference):
    batched, stats = complete(
        llm, FRUIT_PROMPTS, slots=4, n_ctx_seq=512, max_tokens=8, sampling=GREEDY
    )
    alone, _ = complete(llm, FRUIT_PROMPTS, slots=1, max_tokens=8, sampling=GREEDY)
    assert stats.items_batched == 5
    assert_completions_agree(reference, llm, FRUIT_PROMPTS, batched, alone, n=8)
    for b in batched:
        assert b.text == llm.detokenize(list(b.token_ids)).decode("utf-8", "replace")


def test_mixed_lengths_keep_input_order(llm, reference):
    padding = "Here is some context that makes the prompt longer. " * 30
    questions = [q if k % 2 else padding + q for k, q in enumerate(QUESTIONS * 2)]
    prompts = [chat(q) for q in questions]
    results, stats = complete(
        llm, prompts, slots=3, n_ctx_seq=1024, n_batch=256, max_tokens=8, sampling=GREEDY
    )
    alone, _ = complete(llm, prompts, slots=1, max_tokens=8, sampling=GREEDY)
    assert [c.index for c in results] == list(range(len(prompts)))
    assert stats.items_batched == len(prompts)
    lengths = [c.n_prompt_tokens for c in results]
    assert lengths == [len(llm.tokenize(p.encode(), special=True)) for p in prompts]
    assert_completions_agree(reference, llm, prompts, results, alone, n=4)


def test_too_long_and_empty_prompts_keep_their_places(llm):
    too_long_for_seq = chat("Tell me about fruit. " * 120)  # ~700 tokens > 512 - 16
    too_long_for_model = "fruit " * 3000  # > the Llama's n_ctx
    prompts = [
        FRUIT_PROMPTS[0],
        "",
        too_long_for_seq,
        FRUIT_PROMPTS[1],
        too_long_for_model,
        FRUIT_PROMPTS[2],
    ]
    results, stats = complete(llm, prompts, slots=3, n_ctx_seq=512, max_tokens=16, sampling=GREEDY)
    assert [c.index for c in results] == list(range(6))
    assert results[1].finish_reason == "error" and "empty" in results[1].error
    assert results[2].error is None and results[2].path == "alone"
    assert results[4].finish_reason == "error" and "n_ctx" in results[4].error
    for k in (0, 3, 5):
        assert results[k].error is None and results[k].text
    assert results[3].path == "batch" and results[5].path == "batch"


def test_a_batch_that_cannot_be_created_is_retried_smaller(llm, caplog):
    huge = 1 << 22  # tokens per sequence: a KV cache of hundreds of GB, refused (NULL)
    with caplog.at_level(logging.INFO, logger="llamabatch"):
        with BatchGenerator(llm, slots=4, n_ctx_seq=huge, max_tokens=4, sampling=GREEDY) as gen:
            results = gen.complete_many(FRUIT_PROMPTS * 2)
            limits, stats = gen.limits, gen.stats
    # 4 and 2 sequences of 2**22 tokens fail; then 2 of the Llama's n_ctx (2048), the
    # most one item can use, are created: one line per try
    tries = [r.getMessage() for r in caplog.records if "could not be created" in r.getMessage()]
    assert len(tries) == 2 and "4 sequences x 4194304" in tries[0], tries
    assert (limits.n_seq_max, limits.n_ctx_seq) == (2, llm.n_ctx())
    assert (stats.batch_slots, stats.batch_n_ctx_seq) == (2, llm.n_ctx())
    assert stats.batching_enabled and stats.items_batched == 10
    assert all(c.error is None for c in results)


def test_nothing_leaks_between_items_of_a_slot(llm, reference):
    probe = FRUIT_PROMPTS[4]
    fresh, _ = complete(
        llm, [probe, FRUIT_PROMPTS[0]], slots=2, n_ctx_seq=512, max_tokens=12, sampling=GREEDY
    )
    after, stats = complete(
        llm,
        FRUIT_PROMPTS[:4] + [probe, FRUIT_PROMPTS[0]],
        slots=2,
        n_ctx_seq=512,
        max_tokens=12,
        sampling=GREEDY,
    )
    assert stats.items_batched == 6 and stats.prompt_tokens_cached > 0  # slots reused
    assert after[4].path == "batch"
    # a leak would change the reply; a near tie may (the cache path differs)
    assert_completions_agree(reference, llm, [probe], after[4:5], fresh[:1], max_divergent=1)


SYSTEM = (
    "<|im_start|>system\nYou label support tickets. Answer with one word: the "
    "category of the ticket, one of billing, login, shipping, refund, bug, other. "
    + "Read the whole ticket before answering. " * 12
    + "<|im_end|>\n"
)
TICKETS = (
    "I was charged twice this month.",
    "I cannot log in since yesterday.",
    "My parcel has not arrived.",
    "Please give me my money back.",
    "The app crashes when I press save.",
    "What are your opening hours?",
    "My password reset email never came.",
    "The invoice shows the wrong amount.",
    "The tracking number does not work.",
    "The button does nothing on Android.",
)


def ticket(text: str) -> str:
    return f"{SYSTEM}<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def test_greedy_equals_alone_with_a_shared_system_prompt_across_refills_and_reuse(llm, reference):
    """Issue 11: the shared prefix is prefilled once and copied, slots are refilled as
    items end and reuse their caches; every reply's first 8 tokens agree with the reply
    completed alone (up to a near tie)."""
    prompts = [ticket(t) for t in TICKETS]
    with BatchGenerator(
        llm, slots=3, n_ctx_seq=512, n_batch=128, max_tokens=8, sampling=GREEDY, min_copy_tokens=16
    ) as gen:
        batched = gen.complete_many(prompts)
        again = gen.complete_many(prompts[::-1])  # every slot reuses its cache
        stats = gen.stats
    alone, _ = complete(llm, prompts, slots=1, max_tokens=8, sampling=GREEDY)
    assert {c.path for c in batched + again} == {"batch"}
    assert stats.prefix_copies >= 2  # the first fill shared it
    n_prompt = sum(c.n_prompt_tokens for c in batched + again)
    assert stats.prompt_tokens_cached > n_prompt / 2
    assert stats.prompt_tokens_cached + stats.prompt_tokens_prefilled == n_prompt
    assert_completions_agree(reference, llm, prompts, batched, alone, n=8)
    assert_completions_agree(reference, llm, prompts[::-1], again, alone[::-1], n=8)


OTHER = (
    "<|im_start|>system\nYou translate short messages into French. Keep names as "
    "they are. " + "Never add a comment of your own. " * 12 + "<|im_end|>\n"
)


def test_greedy_equals_alone_when_a_template_comes_back_from_host_memory(llm, reference):
    """A second template takes every slot, then the first comes back: its slots' states
    were saved in host memory (``cache_ram_mib``) and are loaded, not prefilled again;
    every reply's first 8 tokens agree with the reply completed alone (up to a near tie)."""
    first = [ticket(t) for t in TICKETS[:3]]
    other = [
        f"{OTHER}<|im_start|>user\n{t}<|im_end|>\n<|im_start|>assistant\n" for t in TICKETS[3:6]
    ]
    back = [ticket(t) for t in TICKETS[6:9]]
    prompts = first + other + back
    with BatchGenerator(
        llm,
        slots=3,
        n_ctx_seq=512,
        n_batch=128,
        max_tokens=8,
        sampling=GREEDY,
        min_copy_tokens=16,
        cache_ram_mib=64,
    ) as gen:
        batched = gen.complete_many(prompts)
        stats = gen.stats
    alone, _ = complete(llm, prompts, slots=1, max_tokens=8, sampling=GREEDY)
    assert {c.path for c in batched} == {"batch"}
    assert stats.cache_ram_saves >= 1 and stats.cache_ram_loads >= 1
    assert_completions_agree(reference, llm, prompts, batched, alone, n=8)

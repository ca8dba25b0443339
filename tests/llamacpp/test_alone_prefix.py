"""Items completed alone share a prompt prefix through the caller's ``Llama`` cache.

Completing an item alone runs ``Llama.generate``, which reuses the longest prefix its KV
cache holds. Between the items alone of one run the cache keeps the last item's tokens,
so a system prompt they share is prefilled once, as in the caller's own loop of
``create_completion``; the ``Llama`` is put back as the caller left it at the end of the
run and before each page ``iter_groups`` yields (the caller may use it in between).
"""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model

SYSTEM = (
    "<|im_start|>system\nYou label support tickets. Answer with one word: billing, "
    "login, bug, shipping or other. Read the whole ticket before you answer, and "
    "answer with the label only, in lower case, with no punctuation.<|im_end|>\n"
)
TICKETS = ("I was charged twice.", "I cannot log in.", "The app crashes.", "My parcel is late.")
PROMPTS = [f"{SYSTEM}<|im_start|>user\n{t}<|im_end|>\n<|im_start|>assistant\n" for t in TICKETS]
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture()
def counted(llm, monkeypatch):
    """The tokens ``llm`` evaluates (``Llama.eval`` calls), counted."""
    seen: list[int] = []
    original = llm.eval

    def eval_(tokens):
        seen.append(len(tokens))
        return original(tokens)

    monkeypatch.setattr(llm, "eval", eval_)
    llm.reset()
    return seen


def test_items_alone_in_one_run_prefill_their_shared_system_prompt_once(llm, counted):
    n_system = len(llm.tokenize(SYSTEM.encode(), add_bos=True, special=True))
    n_prompts = [len(llm.tokenize(p.encode(), add_bos=True, special=True)) for p in PROMPTS]
    with BatchGenerator(llm, slots=1, max_tokens=3, sampling=GREEDY) as gen:
        out = gen.complete_many(PROMPTS)
    assert all(c.ok and c.path == "alone" for c in out)
    prefilled = sum(n for n in counted if n > 1)  # prompt evals; replies go 1 by 1
    assert prefilled <= sum(n_prompts) - (len(PROMPTS) - 1) * (n_system - 2)
    assert llm.n_tokens == 0  # given back as it was: empty


def test_iter_groups_gives_the_llama_back_before_each_page(llm, counted):
    with BatchGenerator(llm, slots=1, max_tokens=3, sampling=GREEDY) as gen:
        pages = gen.iter_groups(PROMPTS)
        for page in pages:
            assert page[0].ok and page[0].path == "alone"
            assert llm.n_tokens == 0  # the caller may use it now
    assert llm.n_tokens == 0


def test_replies_alone_are_the_same_with_a_shared_cache(llm):
    with BatchGenerator(llm, slots=1, max_tokens=8, sampling=GREEDY) as gen:
        together = [c.token_ids for c in gen.complete_many(PROMPTS)]
        apart = [gen.complete_many([p])[0].token_ids for p in PROMPTS]
    assert together == apart

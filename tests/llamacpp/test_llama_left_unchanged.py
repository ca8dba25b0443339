"""Issue 10, fault 3: the caller's ``Llama`` answers after our calls exactly as a
``Llama`` we never touched (same seed, same calls), reply for reply.

Two ``Llama`` objects on the test model, both ``seed=42``: one is used by llamabatch
(items alone and in a batch, with our own seed and penalty window), the other is not;
then both get the same ``create_completion`` calls (sampled, with a repeat penalty, so
the seed chain, the sampler and ``last_n_tokens_size`` all show in the replies).
"""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model

OURS = SamplingParams(temperature=0.7, seed=7, penalty_last_n=3, repeat_penalty=1.5)


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


CALLER_PROMPTS = [
    chat("Write a short line about the sea."),
    chat("Name three fruits."),
    chat("Write a short line about the sea."),
]


def caller_replies(llm) -> list[str]:
    return [
        llm.create_completion(p, max_tokens=12, temperature=0.9, repeat_penalty=1.3)["choices"][0][
            "text"
        ]
        for p in CALLER_PROMPTS
    ]


#: A prompt longer than a slot of 256 tokens (but within the Llama's 512): completed
#: alone through the caller's Llama, whatever the slots.
LONG = chat("Label this: " + "the printer jams again and again, " * 40)


def use(llm, slots: int) -> None:
    with BatchGenerator(llm, slots=slots, n_ctx_seq=256, max_tokens=6, sampling=OURS) as gen:
        out = gen.complete_many(
            [
                chat("Label this: my card was charged twice."),
                chat("Label this: the app crashes."),
                LONG,
                chat("Label this: password reset."),
            ]
        )
    assert all(c.ok for c in out)
    assert "alone" in {c.path for c in out}  # slots=1: all; slots=2: the long one


@pytest.mark.parametrize("slots", [1, 2])
def test_a_fresh_llama_we_used_answers_like_an_untouched_one(pair, slots):
    used, untouched = pair
    use(used, slots)
    assert caller_replies(used) == caller_replies(untouched)


@pytest.mark.parametrize("slots", [1, 2])
def test_a_llama_in_use_answers_like_an_untouched_one_after_our_call(pair, slots):
    """The caller had its own prompt cached and seed chain advanced before our call."""
    used, untouched = pair
    before = [caller_replies(llm) for llm in pair]
    assert before[0] == before[1]
    use(used, slots)
    assert caller_replies(used) == caller_replies(untouched)


def test_a_cached_prompt_is_still_reused_correctly(pair):
    """Our prompt extends the caller's cached one: the cache is cut back to the caller's
    tokens and the next call continues from them as an untouched ``Llama`` does."""
    used, untouched = pair
    prompt = CALLER_PROMPTS[0]
    for llm in pair:
        llm.create_completion(prompt, max_tokens=4, temperature=0)
    with BatchGenerator(used, slots=1, max_tokens=4, sampling=OURS) as gen:
        assert gen.complete_many([prompt + "The"])[0].ok
    again = [
        llm.create_completion(prompt, max_tokens=12, temperature=0.9, seed=3)["choices"][0]["text"]
        for llm in pair
    ]
    assert again[0] == again[1]


#: The caller's prompt (multi-token, chat-formatted); ours shares only its first three
#: tokens (``<|im_start|>user\n``).
CAT = chat("Write two sentences about cats.")


def test_the_callers_next_sampled_call_is_the_one_it_would_have_made(model_path):
    """A sampled call, one item alone through the same ``Llama``, the same call again:
    the ``Llama``'s cache comes back as it was (``n_tokens``, ``input_ids``, the cells),
    not cut back to the three tokens the prompts share, so its next call decodes the
    same tokens in the same split as an untouched ``Llama``'s and gives the same reply
    with the same log-probabilities, bit for bit (llama.cpp's logits depend on the
    split: a cut-back cache would decode the rest of the prompt in one longer batch)."""
    import llama_cpp

    def make():
        return llama_cpp.Llama(
            model_path=str(model_path),
            n_ctx=512,
            n_threads=1,
            seed=123,
            logits_all=True,
            verbose=False,
        )

    def call(llm):
        choice = llm.create_completion(CAT, max_tokens=16, temperature=0.8, logprobs=3)
        return choice["choices"][0]["text"], choice["choices"][0]["logprobs"]["top_logprobs"]

    used, untouched = make(), make()
    try:
        assert call(used) == call(untouched)
        n = untouched.n_tokens
        with BatchGenerator(used, slots=1, max_tokens=6, sampling=OURS) as gen:
            assert gen.complete_many([chat("Label this: the app crashes.")])[0].path == "alone"
        assert used.n_tokens == n
        assert list(used.input_ids[:n]) == list(untouched.input_ids[:n])
        assert call(used) == call(untouched)
    finally:
        used.close()
        untouched.close()


#: Our items, completed alone one after the other (``slots=1``), and what the caller does
#: with the same ``Llama`` between them (under its lock): sampled calls without a seed
#: (each advances the seed chain) and a ``set_seed``. No prompt shares its first word with
#: another, so each call decodes its whole prompt on either ``Llama``, in the same split.
OUR_ITEMS = ["apple, apple, apple,", "river, river, river,", "stone, stone, stone,"]


def _sampled(llm, prompt: str) -> str:
    return llm.create_completion(prompt, max_tokens=10, temperature=1.0)["choices"][0]["text"]


BETWEEN = [
    lambda llm: _sampled(llm, "Once upon a time"),
    lambda llm: llm.set_seed(77),
]
AFTER = [
    lambda llm: _sampled(llm, "The weather today is"),
    lambda llm: _sampled(llm, "My favourite colour is"),
]


def _ours_between(llm, how: str) -> list:
    """Our items alone, the caller's steps in :data:`BETWEEN` between them (inside the lazy
    input of ``complete_many``, or in the done-callbacks of submitted items, which run on
    the engine thread between its steps), then the steps of :data:`AFTER`."""
    from llamabatch import llm_lock

    seen: list = []
    gen = BatchGenerator(llm, slots=1, lookahead=1, max_tokens=6, sampling=OURS)
    with gen:
        if how == "complete_many":

            def items():
                for k, item in enumerate(OUR_ITEMS):
                    if k:
                        seen.append(BETWEEN[k - 1](llm))
                    yield item

            out = gen.complete_many(items())
        else:

            def caller_step(k: int):
                def step(_future) -> None:
                    with llm_lock(llm):
                        seen.append(BETWEEN[k](llm))

                return step

            with gen.lock:  # all wait together: no release of the Llama in between
                futures = [gen.submit(item) for item in OUR_ITEMS]
                for k, f in enumerate(futures[:-1]):
                    f.add_done_callback(caller_step(k))
            out = [f.result(timeout=120) for f in futures]
    assert [c.path for c in out] == ["alone"] * len(OUR_ITEMS) and all(c.ok for c in out)
    return seen + [step(llm) for step in AFTER]


@pytest.mark.parametrize("how", ["complete_many", "submit"])
def test_the_callers_calls_between_our_items_alone_stand(pair, how):
    """The caller's seed advances and its ``set_seed`` between our items are not undone
    after each of them: its replies are an untouched ``Llama``'s, call for call."""
    used, untouched = pair
    want = [step(untouched) for step in BETWEEN + AFTER]
    got = _ours_between(used, how)
    assert got == want
    assert len(set(filter(None, got))) == 3  # no reply repeated from a seed put back

"""``llamabatch.create_completions`` / ``create_chat_completions`` against the binding's own
``create_completion`` / ``create_chat_completion`` on the test model: the same keys and
types, replies that agree (the suite's rule), ``n`` choices, the logprobs layout."""

from __future__ import annotations

import pytest
from agreement import assert_replies_agree, prompt_ids

import llamabatch
from llamabatch import SamplingParams

pytestmark = pytest.mark.real_model

WORDS = "apple pear river stone cloud green seven table music paper".split()
PROMPTS = [f"{w}, {w}, {w}, {w}," for w in WORDS] + [
    f"{a} {b}, {a} {b}, {a} {b}," for a, b in zip(WORDS, WORDS[1:] + WORDS[:1], strict=True)
]


def _shape(value: object) -> object:
    """Keys and value types of a response, recursively (lists: their first item's)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def _ids(llm, text: str) -> list[int]:
    return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))


def test_twenty_prompts_give_the_bindings_dicts_and_agreeing_texts(llm, reference):
    assert len(PROMPTS) == 20
    got = llamabatch.create_completions(llm, PROMPTS, max_tokens=16, temperature=0)
    want = [llm.create_completion(p, max_tokens=16, temperature=0) for p in PROMPTS]
    assert [_shape(g) for g in got] == [_shape(w) for w in want]
    assert [g["usage"]["prompt_tokens"] for g in got] == [w["usage"]["prompt_tokens"] for w in want]
    eog = frozenset({llm.token_eos()})
    assert_replies_agree(
        reference,
        [prompt_ids(llm, p) for p in PROMPTS],
        [_ids(llm, g["choices"][0]["text"]) for g in got],
        [_ids(llm, w["choices"][0]["text"]) for w in want],
        eog,
        max_divergent=0.1,
    )


def test_chat_dicts_and_texts_follow_create_chat_completion(llm, reference):
    chats = [[{"role": "user", "content": p}] for p in PROMPTS[:6]]
    got = llamabatch.create_chat_completions(llm, chats, max_tokens=12, temperature=0)
    want = [llm.create_chat_completion(m, max_tokens=12, temperature=0) for m in chats]
    assert [_shape(g) for g in got] == [_shape(w) for w in want]
    assert [g["usage"]["prompt_tokens"] for g in got] == [w["usage"]["prompt_tokens"] for w in want]
    assert all(g["id"].startswith("chatcmpl-") for g in got)
    n_same = sum(
        g["choices"][0]["message"] == w["choices"][0]["message"]
        for g, w in zip(got, want, strict=True)
    )
    assert n_same >= 5, [(g["choices"], w["choices"]) for g, w in zip(got, want, strict=True)]


def test_n_choices_and_the_logprobs_layout_match_the_binding(llm, model_path):
    import llama_cpp

    with llamabatch.BatchGenerator(llm, slots=2) as gen:
        (three,) = gen.create_completions(PROMPTS[:1], n=3, max_tokens=4, seed=1)
        got = gen.create_completions(PROMPTS[:2], logprobs=2, max_tokens=6, temperature=0)
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    full = llama_cpp.Llama(model_path=str(model_path), n_ctx=256, logits_all=True, verbose=False)
    try:  # the binding's logprobs need logits_all
        want = full.create_completion(PROMPTS[0], logprobs=2, max_tokens=6, temperature=0)
    finally:
        full.close()
    g, w = got[0]["choices"][0]["logprobs"], want["choices"][0]["logprobs"]
    assert list(g) == list(w) == ["tokens", "text_offset", "token_logprobs", "top_logprobs"]
    assert g["tokens"] == w["tokens"] and g["text_offset"] == w["text_offset"]
    assert [list(t) for t in g["top_logprobs"]] == [list(t) for t in w["top_logprobs"]]
    for a, b in zip(g["token_logprobs"], w["token_logprobs"], strict=True):
        assert abs(a - float(b)) < 0.2  # the ubatch split moves log-probs (agreement.py)


def test_an_unsupported_keyword_is_refused_by_name(llm):
    with pytest.raises(ValueError, match="logits_processor"):
        llamabatch.create_completions(llm, PROMPTS[:2], logits_processor=[lambda i, s: s])
    with pytest.raises(ValueError, match="function_call"):
        llamabatch.create_chat_completions(
            llm, [[{"role": "user", "content": "hi"}]], function_call="auto"
        )


def test_an_item_too_long_for_a_slot_is_completed_alone_in_its_place(llm):
    """Failed before: the one-at-a-time path passed score_prompt to Llama.generate."""
    long = "apple, " * 300
    with llamabatch.BatchGenerator(llm, slots=2, n_ctx_seq=256) as gen:
        out = gen.create_completions([long, PROMPTS[0], PROMPTS[1]], max_tokens=4, temperature=0)
    assert [r["choices"][0]["finish_reason"] for r in out] == ["length"] * 3
    assert all("error" not in r for r in out)
    assert gen.stats.items_alone >= 1


@pytest.fixture
def own_llm(model_path):
    """A ``Llama`` with its own seed and penalty window (not the defaults)."""
    import llama_cpp

    model = llama_cpp.Llama(
        model_path=str(model_path),
        n_ctx=512,
        n_threads=2,
        seed=7,
        last_n_tokens_size=2,
        verbose=False,
    )
    yield model
    model.close()


def _texts(responses: list[dict]) -> list[str]:
    return [r["choices"][0]["text"] for r in responses]


def test_the_llamas_penalty_window_is_the_default(own_llm):
    kwargs = {"max_tokens": 12, "temperature": 0, "repeat_penalty": 1.5}
    got = llamabatch.create_completions(own_llm, PROMPTS[:4], **kwargs)
    want = [own_llm.create_completion(p, **kwargs) for p in PROMPTS[:4]]
    assert _texts(got) == _texts(want)


def test_seed_none_is_derived_from_the_llamas_seed_as_the_binding_does(own_llm):
    kwargs = {"max_tokens": 8, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    first = llamabatch.create_completions(own_llm, PROMPTS[:4], **kwargs)
    again = llamabatch.create_completions(own_llm, PROMPTS[:4], **kwargs)
    with llamabatch.BatchGenerator(own_llm, slots=1) as gen:
        alone = gen.create_completions(PROMPTS[:4], **kwargs)
    assert own_llm._seed == 7  # the Llama is left as it was
    want = [own_llm.create_completion(p, **kwargs) for p in PROMPTS[:4]]
    assert _texts(first) == _texts(again) == _texts(alone)
    assert sum(g == w for g, w in zip(_texts(first), _texts(want), strict=True)) >= 3


def test_json_object_replies_are_the_bindings(llm):
    from llama_cpp.llama_grammar import JSON_GBNF

    from llamabatch.llamacpp import constraints

    assert constraints._JSON_GBNF == JSON_GBNF  # the copy for installs without the module
    chats = [[{"role": "user", "content": f"Describe {w} as JSON."}] for w in WORDS[:3]]
    kwargs = {"max_tokens": 12, "temperature": 0, "response_format": {"type": "json_object"}}
    got = llamabatch.create_chat_completions(llm, chats, **kwargs)
    want = [llm.create_chat_completion(m, **kwargs) for m in chats]
    same = sum(
        g["choices"][0]["message"] == w["choices"][0]["message"]
        for g, w in zip(got, want, strict=True)
    )
    assert same >= 2, [(g["choices"], w["choices"]) for g, w in zip(got, want, strict=True)]


#: Prompts whose greedy replies cut characters of several bytes at small max_tokens.
MULTIBYTE = ["Chinese: 你好，世界。我们", "Emoji: I love 🍕 and 🎉 and", "日本語の文章：今日は"]


def test_a_reply_cut_inside_a_character_is_finished_as_the_binding_does(llm):
    want, got = {}, {}
    for m in (1, 2, 3):
        for p in MULTIBYTE:
            llm.reset()  # each prompt decoded whole, as our paths decode it
            r = llm.create_completion(p, max_tokens=m, temperature=0)
            want[p, m] = (r["choices"][0]["text"], r["usage"]["completion_tokens"])
        out = llamabatch.create_completions(llm, MULTIBYTE, max_tokens=m, temperature=0)
        for p, r in zip(MULTIBYTE, out, strict=True):
            got[p, m] = (r["choices"][0]["text"], r["usage"]["completion_tokens"])
    assert got == want
    assert want[MULTIBYTE[0], 2] == ("的美", 4)  # the example: 2 more tokens finish 美
    assert all("\ufffd" not in text for text, _ in got.values())
    with llamabatch.BatchGenerator(llm, slots=1) as gen:  # the one-at-a-time path
        alone = gen.complete_many(MULTIBYTE, SamplingParams(max_tokens=2, temperature=0))
    assert [c.text for c in alone] == [want[p, 2][0] for p in MULTIBYTE]

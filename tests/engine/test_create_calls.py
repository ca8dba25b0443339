"""``create_completions`` / ``create_chat_completions`` on the fake backend: the response
dicts' shape, ``n`` choices, the logprobs layout, and keywords refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from llamabatch import BatchGenerator
from llamabatch.testing import FakeBackend

REPLIES = {"text": "one two", "long": "a b c d e f"}
KEYS = {"id", "object", "created", "model", "choices", "usage"}


def _gen(**kwargs: object) -> BatchGenerator:
    return BatchGenerator(backend=FakeBackend(REPLIES), slots=2, **kwargs)


def test_one_dict_per_prompt_in_order_with_the_bindings_keys():
    with _gen() as gen:
        out = gen.create_completions(["long", "text", "long"], max_tokens=3, temperature=0)
        full = gen.create_completions(["text"], max_tokens=20, temperature=0)[0]
    assert [set(r) for r in out] == [KEYS] * 3
    assert [r["choices"][0]["text"] for r in out] == ["a b", "one", "a b"]  # byte tokens
    assert [r["choices"][0]["finish_reason"] for r in out] == ["length"] * 3
    r = full
    assert (r["choices"][0]["text"], r["choices"][0]["finish_reason"]) == ("one two", "stop")
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    assert set(r["choices"][0]) == {"text", "index", "logprobs", "finish_reason"}
    assert r["choices"][0]["logprobs"] is None
    assert r["usage"]["total_tokens"] == r["usage"]["prompt_tokens"] + 7
    assert isinstance(r["created"], int) and r["model"] == "FakeBackend"


def test_n_gives_n_choices_and_usage_counts_every_reply():
    with _gen() as gen:
        (r,) = gen.create_completions(["text"], n=3, seed=5, model="mine")
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert r["usage"]["completion_tokens"] == 21 and r["model"] == "mine"


def test_logprobs_in_the_bindings_layout():
    with _gen() as gen:
        (r,) = gen.create_completions(["text"], logprobs=2, temperature=0)
    lp = r["choices"][0]["logprobs"]
    assert set(lp) == {"tokens", "text_offset", "token_logprobs", "top_logprobs"}
    assert "".join(lp["tokens"]) == "one two"
    assert lp["text_offset"][0] == len("text")  # the binding's: len(prompt) + text before
    assert lp["text_offset"] == sorted(lp["text_offset"])
    assert lp["token_logprobs"] == [0.0] * 7  # the fake's replies are certain
    assert lp["top_logprobs"][0] == {"o": 0.0}


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"echo": True}, "echo"),
        ({"suffix": "x"}, "suffix"),
        ({"logit_bias": {1: 2.0}}, "logit_bias"),
        ({"mirostat_mode": 2}, "mirostat_mode"),
        ({"colour": "red"}, "colour"),
        ({"stream": True}, "stream"),
    ],
)
def test_a_keyword_the_batch_path_cannot_honour_is_refused_by_name(kwargs, named):
    with _gen() as gen, pytest.raises(ValueError, match=named):
        gen.create_completions(["text"], **kwargs)


def test_chat_refuses_tools_and_one_conversation_instead_of_a_list():
    with _gen() as gen:
        with pytest.raises(ValueError, match="tools"):
            gen.create_chat_completions([[{"role": "user", "content": "x"}]], tools=[{}])
        with pytest.raises(ValueError, match="tool_choice"):
            gen.create_chat_completions([[{"role": "user", "content": "x"}]], tool_choice="auto")
        with pytest.raises(TypeError, match="one conversation"):
            gen.create_chat_completions([{"role": "user", "content": "x"}])
        with pytest.raises(TypeError, match="prompts is one str"):
            gen.create_completions("text")


def test_a_failed_item_keeps_the_keys_and_says_why_in_its_place():
    with _gen() as gen:
        out = gen.create_completions(["text", [10**6], "text"], max_tokens=20)
    assert [r["choices"][0]["finish_reason"] for r in out] == ["stop", "error", "stop"]
    assert "error" in out[1] and "error" not in out[0]
    assert set(out[1]) == KEYS | {"error"}


@pytest.mark.parametrize("max_tokens", [3, 3.0, "numpy.int64"])
def test_max_tokens_of_any_integer_type_is_honoured_like_the_binding(max_tokens):
    value = np.int64(3) if max_tokens == "numpy.int64" else max_tokens
    with _gen() as gen:
        (r,) = gen.create_completions(["long"], max_tokens=value, temperature=0)
    assert r["usage"]["completion_tokens"] == 3
    assert r["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("max_tokens", ["3", 3.5])
def test_max_tokens_that_is_no_integer_is_refused_by_name(max_tokens):
    with _gen() as gen, pytest.raises(ValueError, match="max_tokens"):
        gen.create_completions(["long"], max_tokens=max_tokens)


def test_numpy_numbers_are_numbers():
    with _gen() as gen:
        (r,) = gen.create_completions(
            ["long"], max_tokens=np.int32(2), temperature=np.float32(0.0), top_k=np.int64(5)
        )
    assert r["usage"]["completion_tokens"] == 2


def test_no_tools_given_as_an_empty_list_is_accepted_as_the_binding_does():
    with _gen() as gen:
        (r,) = gen.create_chat_completions(
            [[{"role": "user", "content": "text"}]], tools=[], tool_choice="none", temperature=0
        )
        (p,) = gen.create_completions(["text"], echo=False, logit_bias={}, temperature=0)
    assert r["object"] == "chat.completion"
    assert "chat template" in r["error"]  # it reached the items (the fake has no template)
    assert p["choices"][0]["text"] == "one two"

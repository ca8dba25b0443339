"""What ``complete_many`` / ``iter_groups`` / ``chat`` take: strings, token ids, chat
messages and mapping items with their own fields, in order; a bad item ends with its own
error and costs the others nothing."""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.chat import ChatTemplate
from llamabatch.testing import AloneCall, FakeBackend, StartSeqCall

TEMPLATE = ChatTemplate("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}[a]")
REPLIES = {"text": "one two", "long": "a b c d e f", "[user]hi[a]": "hello"}


def test_every_kind_of_item_completes_in_order_and_a_bad_mapping_has_its_own_error():
    """Failed before: complete_many refused mapping items and messages."""
    fake = FakeBackend(REPLIES)
    gen = BatchGenerator(backend=fake, slots=2, max_tokens=20, sampling=SamplingParams(seed=1))
    items = [
        {"prompt": "long", "max_tokens": 3, "temperature": 0},
        {"messages": [{"role": "user", "content": "hi"}]},
        "text",
        list(b"text"),
        {"prompt": "text", "colour": "red"},
        {"prompt": "text", "top_p": 7},
        {"prompt": "text", "messages": [{"role": "user", "content": "hi"}]},
    ]
    out = gen.chat([], template=TEMPLATE)  # nothing to do
    assert out == []
    out = gen.complete_many(items)
    assert [c.index for c in out] == list(range(len(items)))
    assert (out[0].text, out[0].finish_reason) == ("a b", "length")  # its own max_tokens
    assert "a chat needs a chat template" in out[1].error  # a backend and no Llama
    assert out[2].text == out[3].text == "one two"
    assert "unknown item field(s) 'colour'" in out[4].error
    assert "top_p=7.0 is out of range" in out[5].error
    assert "exactly one of" in out[6].error
    assert all(c.finish_reason == "error" and c.n_prompt_tokens == 0 for c in out[4:])
    started = {c.sampling.temperature for c in fake.calls(StartSeqCall)}
    assert started == {0.0, 0.8}  # the item's own field over the generator's sampling


def test_chat_takes_sampling_and_the_template_formats_messages_items_too():
    fake = FakeBackend(REPLIES)
    gen = BatchGenerator(backend=fake, slots=2)
    greedy = SamplingParams(temperature=0, max_tokens=1)
    out = gen.chat([[{"role": "user", "content": "hi"}]], greedy, template=TEMPLATE)
    assert (out[0].text, out[0].finish_reason) == ("h", "length")
    assert [c.sampling for c in fake.calls(AloneCall)] == [greedy]  # one item: alone


def test_one_item_mapping_is_refused_as_a_list_of_items():
    gen = BatchGenerator(backend=FakeBackend(REPLIES), slots=2)
    with pytest.raises(TypeError, match="a list of items"):
        gen.complete_many({"prompt": "text"})


@pytest.mark.real_model
def test_on_the_model_messages_items_complete_as_chat_does(llm):
    messages = [{"role": "user", "content": "Name a colour."}]
    greedy = SamplingParams(temperature=0)
    with BatchGenerator(llm, slots=2, max_tokens=4, sampling=greedy) as gen:
        out = gen.complete_many(
            [{"prompt": "The sky is", "max_tokens": 4}, {"messages": messages}, "text", [1, 2, 3]]
        )
        chat = gen.chat([messages])
    assert [c.index for c in out] == [0, 1, 2, 3] and all(c.ok for c in out), out
    # the same chat tokens (the replies may differ: batched and alone round differently)
    assert out[1].n_prompt_tokens == chat[0].n_prompt_tokens > 20 and out[1].text

"""The stop rule (``llamabatch.engine.request.check_stop``) and its effect through the
generator, on the fake backend: EOG, stop_token_ids, stop strings (also split across
tokens), length, in that order, the same in a batch and alone."""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.engine.request import Request, check_stop
from llamabatch.testing import AloneCall, FakeBackend, StartSeqCall
from llamabatch.testing.replies import EOG_ID, byte_text, byte_tokens


class Reply:
    """A request's reply under the stop rule, read as the tests read it."""

    def __init__(self, max_tokens, eog, detokenize, stop=(), stop_ids=()):
        sampling = SamplingParams(stop=stop, stop_token_ids=stop_ids)
        self.req = Request(0, [1], sampling)
        self.req.max_tokens = max_tokens
        self.req.bind(detokenize, eog)

    def add(self, token: int):
        return check_stop(self.req, token)

    finish_reason = property(lambda self: self.req.finish_reason)
    token_ids = property(lambda self: self.req.token_ids)
    text = property(lambda self: self.req.reply_text)


def reply(max_tokens: int = 50, stop: tuple[str, ...] = (), stop_ids: tuple[int, ...] = ()):
    return Reply(max_tokens, {EOG_ID}, byte_text, stop, stop_ids)


def feed(r: Reply, tokens: list[int]) -> int:
    """Add tokens until the reply finishes; return how many were taken."""
    for n, token in enumerate(tokens, start=1):
        if r.add(token):
            return n
    return len(tokens)


def test_eog_stops_and_is_not_kept() -> None:
    r = reply()
    assert feed(r, byte_tokens("ab") + [EOG_ID, 99]) == 3
    assert (r.finish_reason, r.token_ids, r.text) == ("stop", [97, 98], "ab")


def test_a_stop_token_id_stops_and_is_not_kept() -> None:
    r = reply(stop_ids=(ord("x"),))
    feed(r, byte_tokens("abxcd"))
    assert (r.finish_reason, r.text) == ("stop", "ab")


def test_length_keeps_the_last_token() -> None:
    r = reply(max_tokens=3)
    assert feed(r, byte_tokens("abcdef")) == 3
    assert (r.finish_reason, r.text) == ("length", "abc")


def test_eog_comes_before_length() -> None:
    r = reply(max_tokens=2)
    feed(r, [97, EOG_ID])
    assert (r.finish_reason, r.token_ids) == ("stop", [97])


def test_a_stop_string_cuts_the_text_and_keeps_the_tokens_up_to_it() -> None:
    r = reply(stop=("END",))
    assert feed(r, byte_tokens("label: bugEND and more")) == len("label: bugEND")
    assert r.finish_reason == "stop"
    assert r.text == "label: bug"
    assert byte_text(r.token_ids) == "label: bugEND"  # as create_completion counts them


def test_a_stop_string_split_across_tokens_is_found() -> None:
    # multi-character tokens via a detokenizer: 1 -> "foo\n", 2 -> "\nbar", 3 -> "baz"
    vocab = {1: "foo\n", 2: "\nbar", 3: "baz"}
    r = Reply(10, {0}, lambda ids: "".join(vocab[i] for i in ids), ("\n\n",))
    assert feed(r, [1, 2, 3]) == 2
    assert (r.text, r.token_ids, r.finish_reason) == ("foo", [1, 2], "stop")


def test_the_earliest_of_several_stop_strings_wins() -> None:
    vocab = {1: "a;b.c"}
    r = Reply(10, set(), lambda ids: "".join(vocab[i] for i in ids), (".", ";"))
    r.add(1)
    assert r.text == "a"


def test_a_stop_string_inside_a_multibyte_character_needs_the_whole_character() -> None:
    r = reply(stop=("é",))
    assert feed(r, byte_tokens("aé") + byte_tokens("zz")) == 3
    assert r.text == "a"


def test_a_stop_string_on_the_last_allowed_token_says_stop_not_length() -> None:
    r = reply(max_tokens=3, stop=("c",))
    feed(r, byte_tokens("abc"))
    assert (r.finish_reason, r.text) == ("stop", "ab")


def test_adding_after_the_end_is_an_error() -> None:
    r = reply(max_tokens=1)
    r.add(97)
    with pytest.raises(ValueError, match="already finished"):
        r.add(98)


REPLIES = {"p1": "yes. no", "p2": "maybe. x", "p3": "nothing here", "p4": "a.b"}


@pytest.mark.parametrize("slots", [1, 2, 4])
def test_stop_strings_and_ids_are_the_same_batched_and_alone(slots: int) -> None:
    sampling = SamplingParams(stop=["."], stop_token_ids=[ord("x")])
    gen = BatchGenerator(backend=FakeBackend(REPLIES), slots=slots, sampling=sampling)
    done = gen.complete_many(list(REPLIES))
    assert [(c.text, c.finish_reason) for c in done] == [
        ("yes", "stop"),
        ("maybe", "stop"),
        ("nothing here", "stop"),
        ("a", "stop"),
    ]
    assert done[0].token_ids == tuple(byte_tokens("yes."))
    if slots > 1:
        assert {c.path for c in done} == {"batch"}


def test_sampling_max_tokens_caps_each_reply() -> None:
    gen = BatchGenerator(
        backend=FakeBackend(REPLIES), slots=2, max_tokens=50, sampling=SamplingParams(max_tokens=3)
    )
    assert [c.text for c in gen.complete_many(list(REPLIES))] == ["yes", "may", "not", "a.b"]


def test_the_backend_gets_the_constraint_in_both_paths() -> None:
    fake = FakeBackend(REPLIES)
    sampling = SamplingParams(choices=["yes", "no"])
    BatchGenerator(backend=fake, slots=2, sampling=sampling).complete_many(["p1", "p2", "p3"])
    starts = fake.calls(StartSeqCall)
    assert starts and all(c.sampling.choices == ("yes", "no") for c in starts)
    BatchGenerator(backend=fake, slots=1, sampling=sampling).complete_many(["p4"])
    alone = fake.calls(AloneCall)
    assert alone and all(c.sampling.choices == ("yes", "no") for c in alone)


@pytest.mark.parametrize("method", ["complete_many", "iter_groups"])
def test_one_string_instead_of_a_list_is_a_type_error(method: str) -> None:
    gen = BatchGenerator(backend=FakeBackend(), slots=2)
    with pytest.raises(TypeError, match="list"):
        result = getattr(gen, method)("one prompt")
        list(result)


@pytest.mark.parametrize("slots", [1, 3])
def test_logprobs_have_one_entry_per_reply_token_in_both_paths(slots: int) -> None:
    gen = BatchGenerator(
        backend=FakeBackend(REPLIES), slots=slots, sampling=SamplingParams(logprobs=1, stop=["."])
    )
    for c in gen.complete_many(list(REPLIES)):
        assert c.logprobs is not None and len(c.logprobs) == c.n_tokens
        assert [entry[0][0] for entry in c.logprobs] == list(c.token_ids)


def test_no_logprobs_unless_asked() -> None:
    gen = BatchGenerator(backend=FakeBackend(REPLIES), slots=2)
    assert all(c.logprobs is None for c in gen.complete_many(list(REPLIES)))


def test_chat_formats_each_conversation_and_keeps_refused_ones_in_place() -> None:
    from llamabatch.chat import ChatTemplate

    template = ChatTemplate(
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}[assistant]"
    )
    replies = {"[user]hi[assistant]": "hello", "[user]yo[assistant]": "hey"}
    gen = BatchGenerator(backend=FakeBackend(replies), slots=2)
    done = gen.chat(
        [
            [{"role": "user", "content": "hi"}],
            [{"role": "user"}],
            [{"role": "user", "content": "yo"}],
        ],
        template=template,
    )
    assert [c.text for c in done] == ["hello", "", "hey"]
    assert done[1].finish_reason == "error" and done[1].error == '"messages"[0] has no "content"'
    with pytest.raises(TypeError, match="list of conversations"):
        gen.chat([{"role": "user", "content": "hi"}], template=template)
    with pytest.raises(TypeError):
        gen.chat("hi", template=template)


def test_the_fake_oracle_applies_the_engines_stop_rule_stop_strings_included() -> None:
    fake = FakeBackend({"hi": "hello world", "ok": "a<b>c"})
    sampling = [SamplingParams(stop=["wor"]), SamplingParams(stop_token_ids=[ord(">")])]
    with BatchGenerator(backend=fake, slots=2, max_tokens=20) as gen:
        out = gen.complete_many(["hi", "ok"], sampling)
    for prompt, s, c in zip(["hi", "ok"], sampling, out):
        exp = fake.expected(prompt, 20, s)
        assert (c.token_ids, c.finish_reason, c.text) == (
            exp.token_ids,
            exp.finish_reason,
            exp.text,
        )
    assert [c.text for c in out] == ["hello ", "a<b"]

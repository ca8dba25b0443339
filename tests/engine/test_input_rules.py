"""Input rules with no llama.cpp: a choices reply cut by max_tokens, the seed range, a
memoryview prompt, NUL characters in choices and grammars, groups nested too deep, and the
custom_id of a rejected OpenAI request line."""

from __future__ import annotations

import json
from array import array

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.cli.job.input import BadLine, read_prompts
from llamabatch.errors import GrammarError
from llamabatch.llamacpp.constraints import grammar_of
from llamabatch.llamacpp.dead_ends import MAX_GROUP_DEPTH, check_literals
from llamabatch.testing import FakeBackend

YES = SamplingParams(choices=["yes", "no"])


@pytest.mark.parametrize("slots", [1, 2])
def test_a_choices_reply_cut_by_max_tokens_is_an_error_not_a_fragment(slots):
    fake = FakeBackend({"q": "yes", "r": "no"})
    gen = BatchGenerator(backend=fake, slots=slots, max_tokens=8)
    short = SamplingParams(choices=["yes", "no"], max_tokens=1)
    out = gen.complete_many(["q", "r", "q"], [short, YES, YES])
    assert out[0].finish_reason == "error" and out[0].text == ""
    assert "before it was one of the choices" in out[0].error and "'y'" in out[0].error
    assert [(c.text, c.finish_reason) for c in out[1:]] == [("no", "stop"), ("yes", "stop")]
    # a reply that is a whole choice when max_tokens ends it is kept
    exact = SamplingParams(choices=["yes", "no"], max_tokens=2)
    assert gen.complete_many(["r"], [exact])[0].text == "no"


def test_seed_4294967295_is_refused_as_llama_cpps_random_seed_marker():
    with pytest.raises(ValueError, match="LLAMA_DEFAULT_SEED") as info:
        SamplingParams(seed=2**32 - 1)
    assert "[0, 4294967294]" in str(info.value)
    assert SamplingParams(seed=2**32 - 2).seed == 2**32 - 2
    assert SamplingParams(seed=0).effective_seed == 0
    with pytest.raises(ValueError, match="seed=4294967296"):
        SamplingParams(seed=2**32)


def test_a_memoryview_of_utf8_bytes_is_read_as_text_not_token_ids():
    fake = FakeBackend({"apple": "fruit", "kale": "vegetable"})
    gen = BatchGenerator(backend=fake, slots=2, max_tokens=16)
    prompts = [memoryview(b"apple"), memoryview(bytearray(b"kale")), memoryview(b"\xff")]
    out = gen.complete_many(prompts)
    assert [c.text for c in out[:2]] == ["fruit", "vegetable"]
    assert "not valid UTF-8" in out[2].error
    ids = memoryview(array("i", list(b"kale")))  # integers of another format: token ids
    assert gen.complete_many([ids])[0].text == "vegetable"


class CountingFake(FakeBackend):
    """A fake whose tokenizer counts the characters it is given."""

    tokenized = 0

    @property
    def vocab(self):
        vocab, outer = super().vocab, self

        class Counting:
            n_vocab, eog_ids, detokenize = vocab.n_vocab, vocab.eog_ids, vocab.detokenize

            def tokenize(self, text):
                outer.tokenized += len(text)
                return vocab.tokenize(text)

        return Counting()


def test_a_text_far_longer_than_the_context_is_refused_before_tokenizing_it():
    """A 5 MB line against a 4096-token context is its item's error at once (it was
    tokenized first: minutes and gigabytes for a 50 MB line); the others complete."""
    fake = CountingFake({"apple": "fruit"}, n_ctx=4096)
    huge = "x" * (4096 * 1024 + 1)
    with BatchGenerator(backend=fake, slots=2, max_tokens=16) as gen:
        out = gen.complete_many(["apple", huge, "apple"])
    assert [c.text for c in (out[0], out[2])] == ["fruit", "fruit"]
    assert out[1].error.startswith(f"prompt has {len(huge)} characters: far more than")
    assert "n_ctx=4096" in out[1].error and "shorten it" in out[1].error
    assert fake.tokenized < len(huge)


def test_a_nul_in_a_choice_is_that_items_error_naming_the_choice():
    with pytest.raises(GrammarError, match=r"choices\[1\]='N/A\\x00' holds a NUL") as info:
        grammar_of(SamplingParams(choices=["ok", "N/A\x00"]))
    assert "position 3" in str(info.value)


@pytest.mark.parametrize(
    "grammar, where",
    [
        ('root ::= "yes\\x00"', "line 1, column 14"),
        ('root ::= "a"\nb ::= "x\\u0000y"', "line 2, column 9"),
        ('root ::= "\\U00000000"', "line 1, column 11"),
    ],
)
def test_a_nul_in_a_grammar_literal_is_refused_with_its_place(grammar, where):
    with pytest.raises(GrammarError, match="NUL") as info:
        grammar_of(SamplingParams(grammar=grammar))
    assert where in str(info.value)


@pytest.mark.parametrize(
    "grammar, where",
    [
        ('root ::= "x" [^\\x00-\\U0010FFFF]', "line 1, column 14"),  # leaves nothing
        ('root ::= "a"\nb ::= [\\x00]', "line 2, column 7"),  # NUL alone
        ('root ::= [^\\x01-\\x7f\\x80-\\U0010FFFF] "a"', "line 1, column 10"),
    ],
)
def test_a_class_matching_no_character_but_nul_is_refused_with_its_place(grammar, where):
    with pytest.raises(GrammarError, match="matches no character but NUL") as info:
        grammar_of(SamplingParams(grammar=grammar))
    assert where in str(info.value)


def _nested(depth: int, inner: str = '"a"') -> str:
    return "root ::= " + "(" * depth + inner + ")" * depth


def test_groups_nested_beyond_the_limit_are_refused_with_their_place():
    grammar_of(SamplingParams(grammar=_nested(MAX_GROUP_DEPTH)))  # the limit itself passes
    with pytest.raises(GrammarError, match=f"nested {MAX_GROUP_DEPTH + 1} deep") as info:
        grammar_of(SamplingParams(grammar=_nested(MAX_GROUP_DEPTH + 1)))
    assert f"line 1, column {10 + MAX_GROUP_DEPTH}" in str(info.value)
    assert "use rules instead" in str(info.value)


def test_parentheses_in_literals_classes_and_comments_are_no_groups():
    deep = "(" * (2 * MAX_GROUP_DEPTH)
    grammar_of(SamplingParams(grammar=_nested(MAX_GROUP_DEPTH, f'"{deep}" [{deep}] # {deep}\n')))
    siblings = "root ::= " + " ".join(["(" * MAX_GROUP_DEPTH + '"a"' + ")" * MAX_GROUP_DEPTH] * 3)
    grammar_of(SamplingParams(grammar=siblings))  # depth is per nesting, not per count


@pytest.mark.parametrize(
    "grammar",
    [
        'root ::= [^"\\\\\\x00-\\x1F] "ok"',  # a class may name NUL among other characters
        'root ::= "a\\"\\x01" # a comment with "\\x00"',
        'root ::= "\\\\x00"',  # an escaped backslash, then the text x00
        'root ::= [^\\x00-\\U0010FFFE] [\\]] [-] [a-] "[" [^\\]]* "]"',  # classes that match
        'root ::= "[^\\x01-\\U0010FFFF]"',  # brackets inside a string literal are no class
    ],
)
def test_grammars_without_a_nul_literal_pass(grammar):
    check_literals(grammar)


def test_a_rejected_openai_request_keeps_its_readable_custom_id(tmp_path):
    lines = [
        {"custom_id": "r1", "url": "/v1/completions", "body": {"prompt": "a"}},
        {"custom_id": "ticket-7", "url": "/v1/embeddings", "body": {"input": "x"}},
        {"custom_id": "r3", "url": "/v1/completions", "body": {"max_tokens": 4}},  # no prompt
        {"custom_id": 5, "url": "/v1/completions", "body": {"prompt": "c"}},
    ]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    entries = read_prompts(path, skip_bad=True)
    assert [type(e).__name__ for e in entries] == ["LineItem", "BadLine", "BadLine", "BadLine"]
    assert [e.id for e in entries] == ["r1", "ticket-7", "r3", 4]  # not a string: line number
    assert all(e.error.startswith(f"line {e.line}:") for e in entries if isinstance(e, BadLine))


@pytest.mark.parametrize("slots", [1, 2])
def test_a_prompt_longer_than_the_context_reports_its_length_and_n_ctx(slots):
    gen = BatchGenerator(backend=FakeBackend({"ok": "fine"}, n_ctx=16), slots=slots, max_tokens=4)
    long, ok = gen.complete_many(["x" * 20, "ok"])
    assert long.finish_reason == "error" and long.n_prompt_tokens == 20  # not 0
    assert "prompt has 20 tokens" in long.error and "n_ctx=16" in long.error
    assert ok.ok and ok.n_prompt_tokens == 2


def test_choices_given_as_one_string_is_refused_on_every_path(tmp_path):
    with pytest.raises(ValueError, match=r"choices='bug,billing' is one string.*\['bug,billing'\]"):
        SamplingParams(choices="bug,billing")
    path = tmp_path / "lines.jsonl"
    path.write_text(json.dumps({"prompt": "a", "choices": "bug,billing"}) + "\n", encoding="utf-8")
    (entry,) = read_prompts(path, skip_bad=True)
    assert isinstance(entry, BadLine) and "choices='bug,billing' is one string" in entry.error
    assert SamplingParams(stop="END").stop == ("END",)  # one stop string is the binding's


@pytest.mark.parametrize(
    "body, named",
    [
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"logit_bias": {"12": 5}}, "logit_bias"),
        ({"echo": True}, "echo"),
        ({"suffix": "end"}, "suffix"),
    ],
)
def test_an_openai_body_field_that_cannot_be_honoured_is_the_lines_error(tmp_path, body, named):
    chat = {"custom_id": "c", "url": "/v1/chat/completions"}
    lines = [
        {**chat, "body": {"messages": [{"role": "user", "content": "x"}], **body}},
        {**chat, "body": {"messages": [{"role": "user", "content": "x"}], "tools": []}},
        {"custom_id": "p", "url": "/v1/completions", "body": {"prompt": "a", "echo": False}},
    ]
    lines[1]["custom_id"] = "off"
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    warnings: list[str] = []
    bad, off, plain = read_prompts(path, skip_bad=True, warn=warnings.append)
    assert isinstance(bad, BadLine) and bad.id == "c" and f"sets {named}" in bad.error
    assert type(off).__name__ == type(plain).__name__ == "LineItem"
    assert warnings == []  # the off values change nothing and need no warning

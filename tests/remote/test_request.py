"""How an item becomes a request body: endpoints, sampling fields, constraints, errors."""

from __future__ import annotations

import json
import re

import pytest

from llamabatch import SamplingParams
from llamabatch.remote import build_request, choices_grammar
from llamabatch.remote.request import BadItem


def test_a_prompt_goes_to_completions_with_the_generators_sampling():
    sampling = SamplingParams(temperature=0.2, top_k=7, top_p=0.9, min_p=0.1, seed=5)
    req = build_request("hi", sampling, max_tokens=12)
    assert req.endpoint == "/v1/completions"
    body = req.body
    assert body["prompt"] == "hi" and body["stream"] is False and body["max_tokens"] == 12
    assert (body["temperature"], body["top_k"], body["top_p"], body["min_p"], body["seed"]) == (
        0.2,
        7,
        0.9,
        0.1,
        5,
    )
    assert body["repeat_last_n"] == 64 and "grammar" not in body and "stop" not in body


def test_no_seed_means_none_is_sent_and_the_server_picks_one():
    assert "seed" not in build_request("hi", SamplingParams(), 4).body


def test_messages_go_to_chat_completions():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    req = build_request(messages, SamplingParams(), 4)
    assert req.endpoint == "/v1/chat/completions" and req.body["messages"] == messages


def test_token_ids_and_bytes_are_prompts():
    assert build_request([1, 2, 3], SamplingParams(), 4).body["prompt"] == [1, 2, 3]
    assert build_request("é".encode(), SamplingParams(), 4).body["prompt"] == "é"


def test_an_item_mapping_overrides_the_generator_fields():
    item = {"prompt": "x", "max_tokens": 3, "temperature": 0, "stop": "\n", "seed": 9}
    body = build_request(item, SamplingParams(temperature=0.7), 50).body
    assert (body["max_tokens"], body["temperature"], body["stop"], body["seed"]) == (
        3,
        0,
        ["\n"],
        9,
    )


def test_choices_become_a_grammar_of_exactly_those_labels():
    grammar = choices_grammar(["billing", "bug", 'say "hi"'])
    assert grammar == 'root ::= "billing" | "bug" | "say \\"hi\\""'
    body = build_request({"prompt": "x", "choices": ["a", "b"]}, SamplingParams(), 4).body
    assert body["grammar"] == 'root ::= "a" | "b"'


def test_a_json_schema_is_compiled_to_a_grammar_by_llama_cpp_python():
    schema = {
        "type": "object",
        "properties": {"label": {"enum": ["x", "y"]}},
        "required": ["label"],
    }
    for given in (schema, json.dumps(schema)):
        grammar = build_request({"prompt": "p", "json_schema": given}, SamplingParams(), 4).body[
            "grammar"
        ]
        assert re.search(r"^root ::=", grammar, re.M) and '\\"x\\"' in grammar


def test_grammar_and_response_format_pass_through():
    fmt = {"type": "json_object"}
    body = build_request(
        {
            "messages": [{"role": "user", "content": "q"}],
            "grammar": 'root ::= "a"',
            "response_format": fmt,
        },
        SamplingParams(),
        4,
    ).body
    assert body["grammar"] == 'root ::= "a"' and body["response_format"] == fmt


def test_sampling_fields_of_issue_12_are_read_when_present():
    """What SamplingParams looks like once issue 12's fields exist: read with getattr."""
    sampling = SamplingParams()
    fields = {"stop": ["END"], "choices": ["a", "b"], "max_tokens": 7}
    proxy = type("P", (), {n: getattr(sampling, n) for n in SamplingParams.__slots__})()
    proxy.__dict__.update(fields)
    body = build_request("x", proxy, 50).body
    assert body["stop"] == ["END"] and body["grammar"] == 'root ::= "a" | "b"'
    assert body["max_tokens"] == 7


@pytest.mark.parametrize(
    "item, message",
    [
        ({"prompt": "x", "choices": []}, "non-empty list"),
        ({"prompt": "x", "choices": "ab"}, "non-empty list"),
        ({"prompt": "x", "choices": ["a", ""]}, "non-empty string"),
        ({"prompt": "x", "json_schema": "{not json"}, "json_schema cannot be compiled"),
        ({"prompt": "x", "grammar": "root ::= x", "choices": ["a"]}, "at most one of"),
        ({"prompt": "x", "messages": []}, "exactly one of"),
        ({"prompt": "x", "colour": 1}, "unknown item field.*'colour'"),
        ({"messages": "hi"}, "messages must be a list"),
        ([], "expected a str"),
        (3.5, "prompt is float"),
    ],
)
def test_bad_items_are_named(item, message):
    with pytest.raises(BadItem, match=message):
        build_request(item, SamplingParams(), 4)

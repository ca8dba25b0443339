"""How an item becomes a request body: endpoints, sampling fields, constraints, errors."""

from __future__ import annotations

import json
import re

import pytest

from llamabatch import SamplingParams
from llamabatch.errors import BadItem
from llamabatch.llamacpp.constraints import choices_grammar
from llamabatch.remote import build_request


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
    assert grammar == 'root ::= "billing" | "bug" | "say \\"hi\\""\n'
    body = build_request({"prompt": "x", "choices": ["a", "b"]}, SamplingParams(), 4).body
    assert body["grammar"] == 'root ::= "a" | "b"\n'


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


def test_grammar_passes_through_and_response_format_becomes_the_schemas_grammar():
    messages = [{"role": "user", "content": "q"}]
    body = build_request({"messages": messages, "grammar": 'root ::= "a"'}, SamplingParams(), 4)
    assert body.body["grammar"] == 'root ::= "a"'
    fmt = {"type": "json_schema", "json_schema": {"name": "l", "schema": {"enum": ["x", "y"]}}}
    body = build_request({"messages": messages, "response_format": fmt}, SamplingParams(), 4).body
    assert "response_format" not in body and '\\"x\\"' in body["grammar"]


def test_the_generators_stop_choices_and_max_tokens_are_sent():
    sampling = SamplingParams(stop=["END"], choices=["a", "b"], max_tokens=7)
    body = build_request("x", sampling, 50).body
    assert body["stop"] == ["END"] and body["grammar"] == 'root ::= "a" | "b"\n'
    assert body["max_tokens"] == 7


def test_a_lines_json_schema_replaces_the_generators_choices():
    """Failed before the shared resolution: "json_schema and choices are given"."""
    flags = SamplingParams(choices=["bug", "billing"])
    body = build_request({"prompt": "x", "json_schema": {"type": "integer"}}, flags, 4).body
    assert "bug" not in body["grammar"] and re.search(r"^root ::=", body["grammar"], re.M)


def test_a_lines_response_format_text_lifts_the_generators_choices():
    """Failed before: the flags' choices grammar was still sent."""
    flags = SamplingParams(choices=["bug", "billing"])
    body = build_request({"prompt": "x", "response_format": {"type": "text"}}, flags, 4).body
    assert "grammar" not in body and "response_format" not in body


@pytest.mark.parametrize(
    "field, value", [("logprobs", 2), ("stop_token_ids", [5]), ("stop_token_ids", 7)]
)
def test_a_field_no_server_request_carries_is_the_items_error_not_dropped(field, value):
    """Failed before: logprobs and stop_token_ids were dropped without a word."""
    if value == 7:  # as the generator's own sampling
        with pytest.raises(BadItem, match="stop_token_ids cannot be sent to a server"):
            build_request("x", SamplingParams(stop_token_ids=(value,)), 4)
        return
    with pytest.raises(BadItem, match=f"{field} cannot be sent to a server"):
        build_request({"prompt": "x", field: value}, SamplingParams(), 4)


def test_every_sampling_field_is_an_item_field():
    from dataclasses import fields

    from llamabatch.items import ITEM_FIELDS

    assert {f.name for f in fields(SamplingParams)} <= set(ITEM_FIELDS)
    assert "response_format" in ITEM_FIELDS


@pytest.mark.parametrize(
    "item, message",
    [
        ({"prompt": "x", "choices": []}, "at least one string"),
        ({"prompt": "x", "choices": ["a", ""]}, "holds an empty string"),
        ({"prompt": "x", "choices": [1]}, "give a string or a list of strings"),
        ({"prompt": "x", "json_schema": "{not json"}, "json_schema is not valid JSON"),
        ({"prompt": "x", "grammar": "root ::= x", "choices": ["a"]}, "at most one of"),
        ({"prompt": "x", "choices": ["a"], "response_format": {"type": "text"}}, "both set"),
        ({"prompt": "x", "response_format": {"type": "xml"}}, "is not one of"),
        ({"prompt": "x", "messages": []}, "exactly one of"),
        ({"prompt": "x", "colour": 1}, "unknown item field.*'colour'"),
        ({"messages": "hi"}, "messages must be a non-empty list"),
        ([], "expected a str"),
        (3.5, "prompt is float"),
    ],
)
def test_bad_items_are_named(item, message):
    with pytest.raises(BadItem, match=message):
        build_request(item, SamplingParams(), 4)

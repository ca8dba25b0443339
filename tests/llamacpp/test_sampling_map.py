"""SamplingParams <-> llama-cpp-python's keyword arguments and a server request's fields:
one map, derived from the dataclass, refusing by name what a call cannot honour."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest
from llama_cpp import Llama

from llamabatch import SamplingParams
from llamabatch.sampling_map import (
    CHAIN,
    SPECIAL,
    completion_kwargs,
    from_completion_kwargs,
    generate_kwargs,
    request_fields,
)

#: Every field of the chain off its default (temperature, top_k, top_p, min_p, typical_p,
#: the three penalties), and the reply's limits.
CHAIN_VALUES = (0.3, 7, 0.9, 0.1, 0.8, 1.1, 0.2, 0.1)
TUNED = SamplingParams(**dict(zip(CHAIN, CHAIN_VALUES)), seed=5, max_tokens=9, stop=("END",))


def test_the_chain_is_every_field_the_table_does_not_name():
    names = [f.name for f in dataclasses.fields(SamplingParams)]
    assert SPECIAL <= set(names)
    assert list(CHAIN) == [n for n in names if n not in SPECIAL]
    assert all(getattr(TUNED, n) != getattr(SamplingParams(), n) for n in CHAIN)


def test_the_keywords_are_llama_cpp_pythons_own():
    completion = set(inspect.signature(Llama.create_completion).parameters)
    chat = set(inspect.signature(Llama.create_chat_completion).parameters)
    generate = set(inspect.signature(Llama.generate).parameters)
    kwargs = completion_kwargs(TUNED, 200, grammar=object())
    assert set(kwargs) <= completion & chat
    assert set(generate_kwargs(TUNED)) <= generate
    assert generate_kwargs(TUNED)["temp"] == 0.3 and kwargs["max_tokens"] == 9


def test_create_completions_keywords_come_back_as_the_same_sampling():
    kwargs = completion_kwargs(TUNED, 200, grammar=None)
    assert from_completion_kwargs(kwargs) == TUNED
    assert from_completion_kwargs({"max_tokens": None, "stream": False}).max_tokens is None


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"mirostat_mode": 2}, "mirostat_mode"),
        ({"echo": True, "logit_bias": {1: 2.0}}, "echo, logit_bias"),
        ({"grammar": object()}, "grammar (give its GBNF text"),
        ({"colour": 1}, "colour"),
    ],
)
def test_what_cannot_be_honoured_is_refused_by_name(kwargs, named):
    with pytest.raises(ValueError, match=f"cannot honour {re.escape(named)}"):
        from_completion_kwargs(kwargs)


@pytest.mark.parametrize("field, value", [("stop_token_ids", (3,)), ("n", 2), ("logprobs", 1)])
def test_a_field_no_call_carries_is_named_not_dropped(field, value):
    sampling = SamplingParams(**{field: value})
    with pytest.raises(ValueError, match=f"{field} has no Llama.create_completion argument"):
        completion_kwargs(sampling, 200, grammar=None)
    with pytest.raises(ValueError, match=f"{field} cannot be sent to a server"):
        request_fields(sampling, 200, grammar=None)


def test_a_server_gets_llama_servers_name_of_penalty_last_n():
    body = request_fields(SamplingParams(penalty_last_n=32), 200, grammar="root ::= x")
    assert body["repeat_last_n"] == 32 and body["grammar"] == "root ::= x"
    assert "seed" not in body and body["max_tokens"] == 200

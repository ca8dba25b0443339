"""SamplingParams <-> llama-cpp-python's keyword arguments and a server request's fields:
one map, derived from the dataclass, refusing by name what a call cannot honour."""

from __future__ import annotations

import inspect
import re

import pytest
from llama_cpp import Llama

from llamabatch import SamplingParams
from llamabatch.params import PENALTY_FIELDS, STAGES
from llamabatch.shapes.sampling_map import (
    CHAIN,
    completion_kwargs,
    from_completion_kwargs,
)

#: Every field of the chain off its default, and the reply's limits.
CHAIN_VALUES = {
    "temperature": 0.3,
    "top_k": 7,
    "top_p": 0.9,
    "min_p": 0.1,
    "typical_p": 0.8,
    "repeat_penalty": 1.1,
    "frequency_penalty": 0.2,
    "presence_penalty": 0.1,
}
TUNED = SamplingParams(**CHAIN_VALUES, seed=5, max_tokens=9, stop=("END",))


def test_the_chain_is_the_stage_tables_binding_keywords():
    keyword = {n for stage in STAGES if stage.keyword for n in stage.fields}
    assert set(CHAIN) == keyword | set(PENALTY_FIELDS) - {"penalty_last_n"} == set(CHAIN_VALUES)
    assert "xtc_probability" not in CHAIN  # a stage of ours: no binding keyword


def test_the_keywords_are_llama_cpp_pythons_own():
    completion = set(inspect.signature(Llama.create_completion).parameters)
    chat = set(inspect.signature(Llama.create_chat_completion).parameters)
    kwargs = completion_kwargs(TUNED, 200, grammar=object())
    assert set(kwargs) <= completion & chat
    assert kwargs["temperature"] == 0.3 and kwargs["max_tokens"] == 9


def test_xtc_is_refused_where_only_the_bindings_arguments_go():
    xtc = SamplingParams(temperature=0.5, xtc_probability=0.5)
    with pytest.raises(ValueError, match="xtc_probability has no Llama.create_completion"):
        completion_kwargs(xtc, 200, grammar=None)
    with pytest.raises(ValueError, match="xtc_probability cannot be sent to a server"):
        completion_kwargs(xtc, 200, grammar=None, server=True)


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


@pytest.mark.parametrize(
    "field, value", [("stop_token_ids", (3,)), ("n", 2), ("logprobs", 1), ("score_prompt", True)]
)
def test_a_field_no_call_carries_is_named_not_dropped(field, value):
    sampling = SamplingParams(**{field: value})
    with pytest.raises(ValueError, match=f"{field} has no Llama.create_completion argument"):
        completion_kwargs(sampling, 200, grammar=None)
    with pytest.raises(ValueError, match=f"{field} cannot be sent to a server"):
        completion_kwargs(sampling, 200, grammar=None, server=True)


def test_a_server_gets_llama_servers_name_of_penalty_last_n():
    body = completion_kwargs(
        SamplingParams(penalty_last_n=32), 200, grammar="root ::= x", server=True
    )
    assert body["repeat_last_n"] == 32 and body["grammar"] == "root ::= x"
    assert "seed" not in body and body["max_tokens"] == 200


@pytest.mark.parametrize("sampling", [TUNED, SamplingParams(penalty_last_n=32)])
def test_a_server_request_carries_the_bindings_keywords(sampling):
    """One mapping for both: a request body is the binding's keywords that hold a value,
    plus llama-server's name of the penalty window."""
    kwargs = completion_kwargs(sampling, 200, grammar="root ::= x")
    body = completion_kwargs(sampling, 200, grammar="root ::= x", server=True)
    expected = {k: v for k, v in kwargs.items() if v is not None}
    assert body == {**expected, "repeat_last_n": sampling.penalty_last_n}

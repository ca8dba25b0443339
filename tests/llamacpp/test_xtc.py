"""XTC (``SamplingParams(xtc_probability=, xtc_threshold=)``, llama.cpp's
``llama_sampler_init_xtc``): a stage of the one chain, so an item samples the same reply
batched and alone, and the stage changes replies."""

from __future__ import annotations

import numpy as np
import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.errors import ParameterError

pytestmark = pytest.mark.real_model

WORDS = ("apple", "dog", "red", "blue", "cat", "pear")
PROMPTS = [f"Write one sentence about a {w}." for w in WORDS]


def replies(llm, sampling, slots):
    with BatchGenerator(llm, slots=slots, n_ctx_seq=256) as gen:
        done = gen.complete_many(PROMPTS, sampling)
    assert all(c.ok for c in done), [c.error for c in done]
    assert {c.path for c in done} == {"batch" if slots > 1 else "alone"}
    return [c.token_ids for c in done]


def test_xtc_replies_are_the_same_batched_and_alone_and_differ_without_it(llm):
    xtc = SamplingParams(
        temperature=0.7, seed=11, max_tokens=8, xtc_probability=1.0, xtc_threshold=0.05
    )
    batched, alone = replies(llm, xtc, 3), replies(llm, xtc, 1)
    assert batched == alone
    plain = replies(llm, SamplingParams(temperature=0.7, seed=11, max_tokens=8), 3)
    assert plain != batched  # every top choice above 5 % is excluded at each step


@pytest.mark.parametrize(
    "field, value", [("xtc_probability", 1.5), ("xtc_threshold", -0.1), ("xtc_probability", "1")]
)
def test_xtc_values_out_of_range_are_refused_by_name(field, value):
    with pytest.raises(ParameterError, match=f"{field}="):
        SamplingParams(**{field: value})


def test_numpy_numbers_are_numbers():
    assert SamplingParams(xtc_probability=np.float32(0.5)).xtc_probability == 0.5

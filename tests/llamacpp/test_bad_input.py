"""Issue 5 — bad input gets a clear error in its own place (or at construction), never a
crash; the batched path's size limits hold at their boundaries. Real model (SmolLM2).

Kept small for 2 CPU cores: short prompts, max_tokens 4-6, n_ctx_seq 256-768.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from agreement import divergence

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.llamacpp.backend import LlamaBackend

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0)


def chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def complete(llm, prompts, **kwargs):
    kwargs.setdefault("sampling", GREEDY)
    with BatchGenerator(llm, **kwargs) as gen:
        return gen.complete_many(prompts), gen.stats


def long_tokens(llm, n: int) -> list[int]:
    """A prompt of exactly ``n`` token ids (prose, so the model has something to continue)."""
    text = (
        "The orchard had apples, pears and plums in neat rows, and every autumn the "
        "village came to pick them. "
    ) * (n // 15 + 1)
    tokens = llm.tokenize(text.encode(), add_bos=True, special=True)[:n]
    assert len(tokens) == n
    return tokens


# -- bad prompts ------------------------------------------------------------------------
# (prompt, a word of the expected error or None when the prompt must complete)
CASES = [
    (chat("Name a fruit."), None),
    ("", "empty"),  # 0 tokens (SmolLM2 adds no BOS)
    ("   ", None),  # one whitespace token: a prompt like any other
    ("<|im_end|>", None),  # one special (end-of-generation) token
    ("<|im_start|><|im_end|>", None),  # only special tokens
    ([5, "vocab"], "token 1"),  # replaced below by an id == n_vocab
    ([-1, 5], "token 0 is -1"),
    ([], "empty"),
    (["a", "b"], "integers"),
    ([1.5], "integers"),
    ([[1, 2]], "integers"),
    (42, "prompt is int"),
    (None, "prompt is NoneType"),
    (3.5, "prompt is float"),
    ({"prompt": "hi"}, None),  # a mapping item with its own fields
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens=0"),
    ({"text": "hi"}, 'one of "prompt" or "messages"'),
    (object(), "prompt is object"),
    (b"\xff\xfe\xfd", "not valid UTF-8"),
    ("caf\ud800", "cannot be tokenized"),  # a lone surrogate cannot be UTF-8 encoded
    (np.array(7), "cannot be tokenized"),  # a 0-d array is not a sequence
    (bytearray(b"Apples are"), None),  # UTF-8 bytes, like bytes
    ("\x00 Apples are", None),  # NUL is just a byte to the tokenizer
    (np.array([6477, 735, 359]), None),  # token ids as an array
    (chat("Name a color."), None),
]


def bad_prompts(llm) -> list[object]:
    prompts = [p for p, _ in CASES]
    prompts[5] = [5, llm.n_vocab()]
    return prompts


def test_every_bad_prompt_is_an_error_in_its_place_and_the_rest_complete(llm):
    prompts = bad_prompts(llm)
    results, stats = complete(llm, prompts, slots=4, n_ctx_seq=256, max_tokens=4)
    assert [c.index for c in results] == list(range(len(prompts)))
    for c, (_, expect) in zip(results, CASES):
        if expect is None:
            assert c.error is None and c.finish_reason in ("stop", "length"), c
            assert c.n_prompt_tokens > 0
        else:
            assert c.finish_reason == "error" and expect in c.error, (c.index, c.error)
            assert c.text == "" and c.token_ids == () and c.path == "alone"
    assert stats.items_failed == sum(e is not None for _, e in CASES)
    assert stats.items_batched >= 2  # the good prompts ran in the slots between bad ones


def test_odd_but_valid_prompts_give_the_same_reply_batched_and_alone(llm):
    prompts = [
        "   ",
        "<|im_end|>",
        "<|im_start|><|im_end|>",
        bytearray(b"Apples are"),
        "\x00 Apples are",
    ]
    batched, stats = complete(llm, prompts + prompts, slots=2, n_ctx_seq=256, max_tokens=5)
    alone, _ = complete(llm, prompts, slots=1, max_tokens=5)
    assert stats.items_batched == 10
    assert [c.token_ids for c in batched] == [c.token_ids for c in alone] * 2
    # a prompt of one end-of-generation token is a prompt: the model goes on after it
    assert batched[1].n_prompt_tokens == 1 and batched[1].n_tokens > 0


def test_prompts_longer_than_the_model_context_are_errors_in_place(llm):
    n_ctx = llm.n_ctx()
    prompts = ["Apples are", [7] * n_ctx, [7] * (n_ctx + 500), "Pears are"]
    results, _ = complete(llm, prompts, slots=2, n_ctx_seq=256, max_tokens=4)
    assert [c.finish_reason == "error" for c in results] == [False, True, True, False]
    assert f"n_ctx={n_ctx}" in results[1].error and str(n_ctx) in results[1].error
    assert results[0].text and results[3].text


# -- size boundaries --------------------------------------------------------------------
def test_a_prompt_of_n_ctx_seq_minus_max_tokens_is_batched_one_more_goes_alone(llm, reference):
    max_tokens, n_ctx_seq = 6, 256
    fits, over = (
        long_tokens(llm, n_ctx_seq - max_tokens),
        long_tokens(llm, n_ctx_seq - max_tokens + 1),
    )
    short = llm.tokenize(chat("Name a fruit.").encode(), special=True)
    prompts = [fits, short, over, short]
    with BatchGenerator(
        llm, slots=2, n_ctx_seq=n_ctx_seq, max_tokens=max_tokens, sampling=GREEDY
    ) as gen:
        results = gen.complete_many(prompts)
        assert gen.limits.n_ctx_seq == n_ctx_seq
    # the last item takes the first slot that frees up (no more groups of one alone)
    assert [c.path for c in results] == ["batch", "batch", "alone", "batch"]
    assert all(c.error is None for c in results)
    alone, _ = complete(llm, [fits], slots=1, max_tokens=max_tokens)
    # the last slot position is usable: the reply agrees with alone (up to a near tie)
    divergence(reference, fits, results[0].token_ids, alone[0].token_ids, label="fits")


def test_prompts_of_512_and_513_tokens_never_exceed_n_batch(llm):
    sizes: list[int] = []

    def record(n_tokens: int) -> None:
        sizes.append(n_tokens)
        return None  # decode for real

    # no shared prefix (else the second copies the first's cache and prefills 2 tokens)
    prompts = [long_tokens(llm, 512), long_tokens(llm, 513)[::-1]]
    backend = LlamaBackend(llm, decode_hook=record)
    with BatchGenerator(
        backend=backend, slots=2, n_ctx_seq=768, n_batch=512, max_tokens=4, sampling=GREEDY
    ) as gen:
        results = gen.complete_many(prompts)
        assert gen.limits.n_batch == 512
    assert [c.path for c in results] == ["batch", "batch"]
    assert max(sizes) == 512 and min(sizes) >= 1
    # prefill 512 + 513 tokens in calls of at most 512 (the first reply's decode tokens
    # go into the same calls), then 3 decode tokens per sequence (4 sampled)
    assert sizes[:3] == [512, 512, 3] and sum(sizes) == 512 + 513 + 2 * 3
    alone, _ = complete(llm, prompts, slots=1, max_tokens=4)
    assert [c.token_ids for c in results] == [c.token_ids for c in alone]


# -- parameters ---------------------------------------------------------------------------
BAD_PARAMS = [
    ({"slots": 0}, "slots=0"),
    ({"slots": -2}, "slots=-2"),
    ({"slots": 2.0}, "slots=2.0"),
    ({"slots": True}, "slots=True"),
    ({"max_tokens": 0}, "max_tokens=0"),
    ({"max_tokens": -1}, "max_tokens=-1"),
    ({"n_ctx_seq": 0}, "n_ctx_seq=0"),
    ({"n_batch": 0}, "n_batch=0"),
    ({"slots": 2, "lookahead": 3}, "lookahead=3"),
]
BAD_SAMPLING = [
    ({"temperature": -0.1}, "temperature=-0.1"),
    ({"temperature": math.nan}, "temperature"),
    ({"top_p": 0.0}, r"top_p=0.0 is out of range: valid is \(0, 1\]"),
    ({"top_p": 1.5}, "top_p=1.5"),
    ({"min_p": -0.01}, r"min_p=-0.01 .* \[0, 1\]"),
    ({"min_p": 1.01}, "min_p=1.01"),
    ({"typical_p": 0}, "typical_p=0"),
    ({"top_k": -1}, "top_k=-1"),
    ({"repeat_penalty": 0}, "repeat_penalty=0"),
    ({"frequency_penalty": math.inf}, "frequency_penalty=inf"),
    ({"presence_penalty": math.nan}, "presence_penalty=nan"),
    ({"seed": -1}, "seed=-1"),
    ({"seed": 2**32}, "seed=4294967296"),
    ({"seed": 2**32 - 1}, r"seed=4294967295 is out of range: valid is None .* LLAMA_DEFAULT_SEED"),
    ({"penalty_last_n": -1}, "penalty_last_n=-1"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_PARAMS)
def test_bad_generator_parameters_raise_before_the_llm_is_touched(kwargs, message):
    # not a Llama at all: the ValueError about the parameter comes first
    with pytest.raises(ValueError, match=f"{message} is out of range: valid is"):
        BatchGenerator(object(), **kwargs)


@pytest.mark.parametrize(("kwargs", "message"), BAD_SAMPLING)
def test_bad_sampling_parameters_raise_naming_the_parameter_and_range(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        SamplingParams(**kwargs)
    assert "out of range: valid is" in str(info.value)


def test_slots_above_llama_max_parallel_sequences_is_a_value_error(llm):
    import llama_cpp

    ceiling = llama_cpp.llama_max_parallel_sequences()
    with pytest.raises(
        ValueError,
        match=rf"slots={ceiling + 1} is out of range: valid is "
        rf"1 to {ceiling} \(llama_max_parallel_sequences",
    ):
        BatchGenerator(llm, slots=ceiling + 1)
    with pytest.raises(ValueError, match="sampling is dict"):
        BatchGenerator(llm, sampling={"temperature": 0})


def test_n_ctx_seq_not_a_multiple_of_256_is_padded_and_reported(llm, caplog):
    with (
        caplog.at_level(logging.INFO, logger="llamabatch"),
        BatchGenerator(llm, slots=2, n_ctx_seq=300, max_tokens=4, sampling=GREEDY) as gen,
    ):
        assert gen.limits is None  # nothing allocated before the first group
        results = gen.complete_many(["Apples are", "Pears are"])
        limits = gen.limits
    # llama.cpp pads each sequence to 256 (512 x 2); the one of llama-cpp-python 0.3.16
    # padded differently: 2 x 320 (measured)
    assert (limits.n_ctx_seq, limits.n_ctx) in ((512, 1024), (320, 640))
    assert limits.n_seq_max == 2
    assert [c.path for c in results] == ["batch", "batch"]
    assert any(
        f"2 sequences x {limits.n_ctx_seq} tokens (n_ctx_seq=300 requested)" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO
    )

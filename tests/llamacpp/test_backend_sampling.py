"""Backend sampling (``BatchGenerator(backend_sampling=True)``) on the real model: only plain
chains sample on the model's device, and it changes no reply."""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.engine.device_check import check_sampling, probe_n_batch
from llamabatch.errors import ParameterError
from llamabatch.llamacpp.backend import LlamaBackend

pytestmark = pytest.mark.real_model

#: Prompts SmolLM2 continues predictably at temperature 0 (design notes).
PROMPTS = [f"{w}, {w}, {w}, {w}," for w in ("apple", "pear", "dog", "cat", "red", "blue")]
GREEDY = SamplingParams(temperature=0, max_tokens=8)
SEEDED = SamplingParams(temperature=0.9, seed=7, max_tokens=8)


def run(llm, sampling, *, backend_sampling: bool, prompts=PROMPTS):
    """The replies' texts and the rows sampled on the device."""
    with BatchGenerator(llm, slots=4, n_ctx_seq=256, backend_sampling=backend_sampling) as gen:
        done = gen.complete_many(prompts, sampling)
        assert all(c.error is None for c in done), [c.error for c in done]
        return [c.text for c in done], gen.stats.backend_sampled_rows


def test_greedy_replies_are_equal_with_and_without(llm):
    with_, on_device = run(llm, GREEDY, backend_sampling=True)
    without, on_host = run(llm, GREEDY, backend_sampling=False)
    assert with_ == without
    assert on_host == 0
    assert on_device == len(PROMPTS) * GREEDY.max_tokens  # every sampled row


def test_same_seed_gives_the_same_reply_with_and_without(llm):
    for backend_sampling in (True, False):
        first, on_device = run(llm, SEEDED, backend_sampling=backend_sampling)
        again, _ = run(llm, SEEDED, backend_sampling=backend_sampling)
        assert first == again
        assert (on_device > 0) == backend_sampling


def test_a_slot_reused_by_an_equal_chain_keeps_the_seed(llm):
    # the second call's requests take over the chains the first call attached
    with BatchGenerator(llm, slots=2, n_ctx_seq=256, backend_sampling=True) as gen:
        first = [c.text for c in gen.complete_many(PROMPTS[:2], SEEDED)]
        again = [c.text for c in gen.complete_many(PROMPTS[:2], SEEDED)]
    assert first == again


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=0, max_tokens=4, choices=("yes", "no")),
        SamplingParams(temperature=0, max_tokens=4, grammar='root ::= "a" [a-z]*'),
        SamplingParams(temperature=0.9, seed=3, max_tokens=4, repeat_penalty=1.3),
        SamplingParams(temperature=0.9, seed=3, max_tokens=4, presence_penalty=0.5),
        SamplingParams(temperature=0, max_tokens=4, logprobs=2),
    ],
    ids=["choices", "grammar", "repeat_penalty", "presence_penalty", "logprobs"],
)
def test_rows_that_need_the_host_chain_keep_it(llm, sampling):
    # each prompt with that chain, next to a plain greedy one in the same batch
    plain = SamplingParams(temperature=0, max_tokens=4)
    prompts = PROMPTS[:4]
    with BatchGenerator(llm, slots=4, n_ctx_seq=256, backend_sampling=True) as gen:
        done = gen.complete_many(prompts, [sampling, plain, sampling, plain])
        on_device = gen.stats.backend_sampled_rows
    assert all(c.error is None for c in done), [c.error for c in done]
    assert on_device == sum(len(c.token_ids) for c in done[1::2])  # only the plain rows
    with BatchGenerator(llm, slots=4, n_ctx_seq=256, backend_sampling=False) as gen:
        host = gen.complete_many(prompts, [sampling, plain, sampling, plain])
    assert [c.text for c in done] == [c.text for c in host]
    if sampling.logprobs:
        assert all(c.logprobs for c in done[::2])


def test_each_of_n_replies_samples_on_the_device_with_its_own_seed(llm):
    sampling = SamplingParams(temperature=0.9, seed=3, max_tokens=4, n=3)
    replies = []
    for _ in range(2):
        with BatchGenerator(llm, slots=4, n_ctx_seq=256, backend_sampling=True) as gen:
            (c,) = gen.complete_many(PROMPTS[:1], sampling)
            on_device = gen.stats.backend_sampled_rows
        assert c.error is None and len(c.samples) == 3
        # every row sampled, an end-of-generation token's included
        assert on_device == sum(len(s.token_ids) + (s.finish_reason == "stop") for s in c.samples)
        replies.append([s.token_ids for s in c.samples])
    assert replies[0] == replies[1]


def test_label_scores_keep_the_host_chain(llm):
    scores = SamplingParams(choices=("yes", "no"), score_choices=True)
    with BatchGenerator(llm, slots=4, n_ctx_seq=256, backend_sampling=True) as gen:
        done = gen.complete_many(["Is the sky blue? Answer:"] * 2, scores)
        assert gen.stats.backend_sampled_rows == 0
    assert all(c.error is None for c in done)


def test_steps_are_split_into_decode_sampling_and_other(llm):
    with BatchGenerator(llm, slots=4, n_ctx_seq=256) as gen:
        gen.complete_many(PROMPTS, GREEDY)
        split = gen.stats.step_split
    assert split.steps == gen.stats.decode_calls > 0
    assert split.decode > 0 and split.sampling > 0 and split.other >= 0
    assert split.seconds == pytest.approx(gen.stats.step_seconds)


@pytest.mark.parametrize("value", [1, "yes", 0.5])
def test_backend_sampling_must_be_a_bool_or_none(llm, value):
    with pytest.raises(ParameterError, match="backend_sampling"):
        BatchGenerator(llm, backend_sampling=value)


def test_the_sampling_check_passes_on_the_real_binding(llm):
    """``check_sampling`` (what turns default backend sampling on, on a GPU) on llama.cpp's
    own device chains, here on the CPU: every row sampled there, greedy equal to the host
    chain, a seed repeated; every sequence empty afterwards."""
    backend = LlamaBackend(llm, backend_sampling=True)
    try:
        limits = backend.open(4, 256, probe_n_batch(4, 512))
        check = check_sampling(backend, limits)
        ctx = backend.batch_context
        assert ctx is not None and all(ctx.seq_pos_max(k) == -1 for k in range(4))
    finally:
        backend.close()
    assert check.ok, check.detail
    assert "over 16 rows of 4 sequences" in check.detail

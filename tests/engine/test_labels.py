"""Label scores (``score_choices``) and n replies per prompt on the fake backend: the
scores equal an independent sum over the fake model's log-softmax, on every path."""

from __future__ import annotations

import math

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.testing import DecodeCall, FakeBackend, StartSeqCall

LABELS = ["bug", "feature", "question"]
SCORED = SamplingParams(choices=LABELS, score_choices=True)
PROMPTS = [f"Ticket {i}: the app {'crashes' if i % 2 else 'is slow'}. Category:" for i in range(7)]


def expected_logprobs(
    fake: FakeBackend, prompt: str, labels=LABELS, leading_space=True
) -> dict[str, float]:
    """log P(label | prompt) from the fake's token_logprob, with the module doc's rule:
    the tokens after the prompt's shared prefix, the spaced form added in probability."""
    p = fake.tokenize(prompt)
    out = {}
    for label in labels:
        total = []
        written = [label, " " + label] if leading_space else [label]
        for w in written:
            full = fake.tokenize(prompt + w)
            k = 0
            while k < min(len(p), len(full)) and p[k] == full[k]:
                k += 1
            total.append(sum(fake.token_logprob(full[:j], full[j]) for j in range(k, len(full))))
        top = max(total)
        out[label] = top + math.log(sum(math.exp(t - top) for t in total))
    return out


def check(c, expected: dict[str, float]) -> None:
    assert c.error is None
    assert list(c.choice_logprobs) == list(expected)
    for label, lp in expected.items():
        assert c.choice_logprobs[label] == pytest.approx(lp, abs=1e-9)
    assert sum(c.choice_probs.values()) == pytest.approx(1.0)
    assert c.text == max(c.choice_probs, key=c.choice_probs.get)


@pytest.mark.parametrize("slots", [1, 2, 4])
@pytest.mark.parametrize("recurrent", [False, True])
def test_scores_equal_the_fake_model_on_every_path(slots: int, recurrent: bool) -> None:
    fake = FakeBackend(recurrent=recurrent)
    gen = BatchGenerator(backend=fake, slots=slots, n_batch=16)
    want = [expected_logprobs(fake, p) for p in PROMPTS]
    for _run in range(2):  # the second run starts from the slots' cached prompts
        out = gen.complete_many(PROMPTS, SCORED)
        for c, e in zip(out, want):
            check(c, e)
            assert c.path == ("alone" if slots == 1 else "batch")
    assert fake.violations == []
    assert gen.stats.labels_scored == 2 * len(PROMPTS)
    if slots > 1 and not recurrent:
        assert gen.stats.prompt_tokens_cached > 0  # the second run reused the slots


def test_scoring_runs_in_the_same_decodes_as_replies() -> None:
    fake = FakeBackend()
    gen = BatchGenerator(backend=fake, slots=4)
    sampling = [SCORED if i % 2 else SamplingParams(temperature=0.0) for i in range(8)]
    prompts = PROMPTS + ["one more: Category:"]
    out = gen.complete_many(prompts, sampling)
    for i, c in enumerate(out):
        if i % 2:
            check(c, expected_logprobs(fake, prompts[i]))
        else:
            assert c.choice_probs is None
            assert c.token_ids == fake.expected(prompts[i], 200).token_ids
    mixed = [
        call
        for call in fake.calls(DecodeCall)
        if any(not s.logits for s in call.spans) and any(s.logits for s in call.spans)
    ]
    assert mixed, "no decode carried both a scoring run and a reply"
    assert fake.violations == []


@pytest.mark.parametrize("recurrent", [False, True])
def test_the_first_label_run_goes_in_the_prompts_prefill(recurrent: bool) -> None:
    """A cache that can be cut back prefills the prompt and goes on, in the same span,
    with its longest label path (so that path needs no run of its own). A recurrent
    memory prefills the prompt alone (its snapshot must hold just the prompt)."""
    fake = FakeBackend(recurrent=recurrent)
    gen = BatchGenerator(backend=fake, slots=2, n_batch=64)
    prompt = PROMPTS[0]
    out = gen.complete_many([prompt, PROMPTS[1]], SCORED)
    assert [c.path for c in out] == ["batch", "batch"]
    check(out[0], expected_logprobs(fake, prompt))
    n = len(fake.tokenize(prompt))
    first = fake.calls(DecodeCall)[0].spans[0]
    assert first.pos == 0 and first.targets is not None
    longest = max(len(fake.tokenize(prompt + w)) - n for w in [*LABELS, *(" " + x for x in LABELS)])
    if recurrent:
        assert len(first.tokens) == n
    else:
        assert len(first.tokens) == n + longest - 1  # the path's last token is not decoded
        assert list(first.tokens[:n]) == fake.tokenize(prompt)
    assert fake.violations == []


def test_a_recurrent_memory_learned_while_scoring_costs_one_prefill_more_at_most() -> None:
    """A memory that says nothing up front and then refuses a trim: scoring goes on from a
    snapshot of the prompt, as when the memory was declared, after at most one more
    prefill of a prompt."""
    runs = {}
    for declares in (True, False):
        fake = FakeBackend(recurrent=True, declares_recurrent=declares)
        gen = BatchGenerator(backend=fake, slots=2, n_batch=16)
        for c, p in zip(gen.complete_many(PROMPTS, SCORED), PROMPTS):
            check(c, expected_logprobs(fake, p))
        assert fake.violations == []
        runs[declares] = gen.stats.label_tokens_decoded
    longest = max(len(fake.tokenize(p)) for p in PROMPTS)
    assert runs[True] <= runs[False] <= runs[True] + longest


@pytest.mark.parametrize("n_swa", [4, 16, 64])
def test_scores_on_a_sliding_window_model_never_see_a_hole(n_swa: int) -> None:
    """The fake scores a row over a hole in its window without the missing positions, as
    llama.cpp does: every score must still be the fake model's, cold and cached, for
    prompts longer and shorter than the window."""
    fake = FakeBackend(n_swa=n_swa)
    gen = BatchGenerator(backend=fake, slots=2, n_batch=16)
    want = [expected_logprobs(fake, p) for p in PROMPTS]
    for _run in range(2):
        for c, e in zip(gen.complete_many(PROMPTS, SCORED), want):
            check(c, e)
    assert fake.violations == []


def merging_tokenizer(text: str) -> list[int]:
    """Bytes, but " b" is one token (300): "x: " + "bug" merges the prompt's space."""
    data, out, i = text.encode(), [], 0
    while i < len(data):
        if data[i : i + 2] == b" b":
            out.append(300)
            i += 2
        else:
            out.append(data[i])
            i += 1
    return out


@pytest.mark.parametrize("slots", [1, 3])
def test_a_label_merging_with_the_prompt_is_scored_from_the_last_boundary(slots: int) -> None:
    fake = FakeBackend(n_vocab=320, tokenizer=merging_tokenizer)
    gen = BatchGenerator(backend=fake, slots=slots)
    prompts = ["Ticket: crash. Category: ", "Ticket: slow. Category: ", "x "]
    out = gen.complete_many(prompts, SamplingParams(choices=["bug", "ask"], score_choices=True))
    for p, c in zip(prompts, out):
        check(c, expected_logprobs(fake, p, ["bug", "ask"]))
    # "bug" follows the prompt without its last token (" " merged into " b")
    assert out[0].token_ids in ((300, ord("u"), ord("g")), tuple(b"ask"), tuple(b" ask"))
    assert fake.violations == []


def test_leading_space_can_be_turned_off_and_token_prompts_are_scored() -> None:
    fake = FakeBackend()
    gen = BatchGenerator(backend=fake, slots=2)
    sp = SamplingParams(choices=LABELS, score_choices=True, choice_leading_space=False)
    out = gen.complete_many(PROMPTS[:3], sp)
    for p, c in zip(PROMPTS, out):
        check(c, expected_logprobs(fake, p, leading_space=False))
    ids = [fake.tokenize(p) for p in PROMPTS[:3]]  # token ids: labels tokenized alone
    out_ids = gen.complete_many(ids, sp)
    for a, b in zip(out, out_ids):
        assert b.choice_logprobs == pytest.approx(a.choice_logprobs)


def test_n_replies_copy_one_prefill_and_carry_votes() -> None:
    prompt = "a prompt of some length, long enough to be copied"  # > min_copy_tokens
    fake = FakeBackend(reply={prompt: "bug", "other": "nope"})
    gen = BatchGenerator(backend=fake, slots=4)
    sp = SamplingParams(n=3, seed=7, choices=["bug", "feature"])
    out = gen.complete_many([prompt], sp)
    (c,) = out
    assert c.text == "bug" and len(c.samples) == 3
    assert [s.text for s in c.samples] == ["bug"] * 3
    assert c.votes == {"bug": 3, "feature": 0}
    stats = gen.stats
    # the prompt once; each other reply copies it and decodes its last token again
    assert stats.prompt_tokens_prefilled == len(prompt) + 2
    assert stats.prefix_copies == 2
    seeds = sorted(call.sampling.seed for call in fake.calls(StartSeqCall))
    assert seeds == [7, 8, 9]
    assert fake.violations == []


def test_n_replies_alone_and_mixed_with_single_items_keep_input_order() -> None:
    fake = FakeBackend()
    for slots in (1, 2, 5):
        gen = BatchGenerator(backend=fake.copy(), slots=slots)
        prompts = ["p one", "p two", "p three", "p four"]
        sampling = [SamplingParams(n=1 + i % 3, seed=1) for i in range(4)]
        out = gen.complete_many(prompts, sampling)
        assert [c.index for c in out] == [0, 1, 2, 3]
        for p, s, c in zip(prompts, sampling, out):
            want = fake.expected(p, 200)
            assert c.token_ids == want.token_ids
            if s.n == 1:
                assert c.samples is None
            else:
                assert [x.token_ids for x in c.samples] == [want.token_ids] * s.n
        assert gen.stats.items_batched + gen.stats.items_alone == 4


def test_bad_parameters_are_refused() -> None:
    assert not SamplingParams(score_choices=True).scores_labels  # no labels: samples
    with pytest.raises(ValueError, match="n=2 with score_choices"):
        SamplingParams(choices=["a"], score_choices=True, n=2)
    with pytest.raises(ValueError, match="n=0"):
        SamplingParams(n=0)
    with pytest.raises(ValueError, match="seed \\+ j"):
        SamplingParams(n=3, seed=0xFFFFFFFE)


# -- a label longer than the room left in a slot -----------------------------------------
LONG_LABEL = "a label that is spelled out at great length, sixty-two tokens"  # 61 bytes
ROOMY = SamplingParams(choices=["short", LONG_LABEL], score_choices=True, max_tokens=8)


def test_a_label_longer_than_the_room_in_a_slot_goes_alone_and_batching_goes_on(caplog) -> None:
    # one token per byte: a 230-token prompt + 8 reply tokens fits n_ctx_seq = 256, but the
    # prompt + the 62-token (spaced) label does not; the label's tokens count in what the item
    # needs from its slot, so it goes alone instead of overflowing the slot
    assert len(" " + LONG_LABEL) == 62  # its spaced form
    caplog.set_level("WARNING", logger="llamabatch")
    long_prompts = [f"Ticket {i}: " + "x" * 211 + "Category:" for i in range(3)]
    assert {len(p) for p in long_prompts} == {230}
    prompts = [long_prompts[0], "short one", long_prompts[1], "short two", long_prompts[2]]
    sampling = [ROOMY if p in long_prompts else SamplingParams(max_tokens=8) for p in prompts]
    fake = FakeBackend()
    gen = BatchGenerator(backend=fake, slots=4, n_ctx_seq=256)
    out = gen.complete_many(prompts, sampling)
    assert fake.violations == []
    assert gen.stats.batch_failures == 0 and gen.stats.batching_enabled
    for p, c in zip(prompts, out):
        if p in long_prompts:
            check(c, expected_logprobs(fake, p, ["short", LONG_LABEL]))
            assert c.path == "alone"
        else:
            assert c.token_ids == fake.expected(p, 8).token_ids
            assert c.path == "batch"
    key = "n_prompt_tokens + label tokens > n_ctx_seq"
    assert gen.stats.alone_reasons == {key: 3}
    (warning,) = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert "n_ctx_seq=256" in warning


def test_a_label_that_fits_the_slot_is_still_batched() -> None:
    fake = FakeBackend()
    gen = BatchGenerator(backend=fake, slots=2, n_ctx_seq=256)
    prompts = [f"Ticket {i}: " + "x" * 150 + "Category:" for i in range(2)]  # 150 + 62 < 256
    out = gen.complete_many(prompts, ROOMY)
    for p, c in zip(prompts, out):
        check(c, expected_logprobs(fake, p, ["short", LONG_LABEL]))
        assert c.path == "batch"
    assert gen.stats.alone_reasons == {}


def test_a_label_longer_than_the_model_context_is_the_items_error_naming_both() -> None:
    fake = FakeBackend(n_ctx=280)
    gen = BatchGenerator(backend=fake, slots=2, n_ctx_seq=256)
    prompts = ["Ticket: " + "x" * 213 + "Category:", "Ticket: short. Category:"]
    out = gen.complete_many(prompts, ROOMY)
    err = out[0].error
    assert err is not None
    assert repr(" " + LONG_LABEL) in err and "n_ctx=280" in err
    assert "230" in err  # the prompt's tokens
    check(out[1], expected_logprobs(fake, prompts[1], ["short", LONG_LABEL]))
    assert fake.violations == []

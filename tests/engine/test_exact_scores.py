"""What evaluation needs from the scoring feature, on the fake backend: each continuation's
exact log-probability as given (``choice_leading_space=False``, no form left out), whether
it is the greedy one (``choice_greedy``), and the prompt's own tokens scored
(``score_prompt``), on every path (batched, alone, from cached slots, recurrent)."""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.testing import FakeBackend

EXACT = dict(score_choices=True, choice_leading_space=False, max_tokens=1)


def argmax_after(fake: FakeBackend, context: list[int]) -> int:
    """The fake model's likeliest token after ``context``, found over the whole vocabulary."""
    return max(range(fake.n_vocab), key=lambda t: fake.token_logprob(context, t))


def greedy_case(fake: FakeBackend, n_chars: int = 2) -> tuple[str, str]:
    """A prompt whose greedy continuation is ``n_chars`` printable ASCII characters (the
    byte tokenizer: one token per character), and that continuation."""
    for i in range(2000):
        prompt = f"Question {i}:"
        tokens = fake.tokenize(prompt)
        chars = ""
        for _ in range(n_chars):
            t = argmax_after(fake, tokens)
            if not 33 <= t <= 126:
                break
            chars += chr(t)
            tokens = tokens + [t]
        if len(chars) == n_chars:
            return prompt, chars
    raise AssertionError("no prompt with a printable greedy continuation")


def reference(fake: FakeBackend, prompt: str, cont: str) -> tuple[float, bool]:
    """log P(cont | prompt) and its greedy flag, token by token from the fake's rows."""
    p, full = fake.tokenize(prompt), fake.tokenize(prompt + cont)
    assert full[: len(p)] == p
    lp, greedy = 0.0, True
    for j in range(len(p), len(full)):
        lp += fake.token_logprob(full[:j], full[j])
        greedy = greedy and argmax_after(fake, full[:j]) == full[j]
    return lp, greedy


@pytest.mark.parametrize("slots", [1, 2, 4])
@pytest.mark.parametrize("recurrent", [False, True])
def test_continuations_are_scored_exactly_with_their_greedy_flag(
    slots: int, recurrent: bool
) -> None:
    fake = FakeBackend(recurrent=recurrent)
    prompt, greedy = greedy_case(fake)
    not_greedy = greedy[0] + ("b" if greedy[1] != "b" else "c")  # right first token only
    conts = [greedy, not_greedy, " " + greedy, "zz"]
    prompts = [prompt, prompt + " x", "Other: "]
    gen = BatchGenerator(backend=fake, slots=slots, n_batch=16)
    for _run in range(2):  # the second run starts from the slots' cached prompts
        out = gen.complete_many(prompts, SamplingParams(choices=conts, **EXACT))
        for p, c in zip(prompts, out):
            assert c.error is None
            for cont in conts:
                lp, is_greedy = reference(fake, p, cont)
                assert c.choice_logprobs[cont] == pytest.approx(lp, abs=1e-9)
                assert c.choice_greedy[cont] is is_greedy
        assert out[0].choice_greedy == {greedy: True, not_greedy: False, " " + greedy: False,
                                        "zz": False}  # fmt: skip
    assert fake.violations == []


@pytest.mark.parametrize("slots", [1, 3])
@pytest.mark.parametrize("recurrent", [False, True])
def test_the_prompt_is_scored_token_by_token(slots: int, recurrent: bool) -> None:
    fake = FakeBackend(recurrent=recurrent)
    gen = BatchGenerator(backend=fake, slots=slots, n_batch=8)
    prompts = ["The quick brown fox", "The quick brown dog jumps", [5, 6], [7, 8, 9, 10]]
    for _run in range(2):  # again, with the prompts' prefixes cached in the slots
        out = gen.complete_many(prompts, SamplingParams(score_prompt=True, max_tokens=1))
        for p, c in zip(prompts, out):
            tokens = fake.tokenize(p) if isinstance(p, str) else p
            want = [fake.token_logprob(tokens[:j], tokens[j]) for j in range(1, len(tokens))]
            assert c.error is None and c.text == "" and c.token_ids == ()
            assert c.prompt_logprobs == pytest.approx(want, abs=1e-9)
            assert c.n_prompt_tokens == len(tokens)
    assert fake.violations == []


def test_scored_prompts_and_labels_run_beside_replies() -> None:
    fake = FakeBackend()
    gen = BatchGenerator(backend=fake, slots=3)
    sampling = [
        SamplingParams(score_prompt=True),
        SamplingParams(temperature=0.0),
        SamplingParams(choices=["a", "b"], **EXACT),
    ] * 2
    prompts = [f"item {i} text" for i in range(6)]
    out = gen.complete_many(prompts, sampling)
    for i, c in enumerate(out):
        assert c.error is None
        assert (c.prompt_logprobs is not None) == (i % 3 == 0)
        assert (c.choice_greedy is not None) == (i % 3 == 2)
        if i % 3 == 1:
            assert c.token_ids == fake.expected(prompts[i], 200).token_ids
    assert gen.stats.items_batched == 6
    assert fake.violations == []


def test_a_one_token_prompt_cannot_be_scored_and_bad_combinations_are_refused() -> None:
    gen = BatchGenerator(backend=FakeBackend(), slots=2)
    (c,) = gen.complete_many([[4]], SamplingParams(score_prompt=True))
    assert c.finish_reason == "error" and "at least 2 tokens" in c.error
    with pytest.raises(ValueError, match="score_prompt=True with n=2"):
        SamplingParams(score_prompt=True, n=2)
    with pytest.raises(ValueError, match="score_prompt=True with choices is set"):
        SamplingParams(score_prompt=True, choices=["a"])
    with pytest.raises(ValueError, match="score_prompt=1"):
        SamplingParams(score_prompt=1)


@pytest.mark.parametrize("slots", [1, 2])
def test_labels_that_cannot_be_scored_stay_the_items_error_alone_too(slots: int) -> None:
    # a tokenizer that gives every text one token: a label adds no token after the prompt
    fake = FakeBackend(tokenizer=lambda text: [1] if text else [])
    gen = BatchGenerator(backend=fake, slots=slots)
    sp = SamplingParams(choices=["x"], score_choices=True, max_tokens=3)
    out = gen.complete_many(["ab", "cd"], sp)
    for c in out:
        assert c.finish_reason == "error"
        assert "cannot score the labels" in c.error and "adds no token" in c.error

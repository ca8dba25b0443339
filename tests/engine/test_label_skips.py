"""Label forms that cannot matter are left unfinished: a label's score then lacks at
most ``SKIP_NATS`` of the full sum over its forms, never more, never above it, and the
same on every path; the forms that matter are always finished."""

from __future__ import annotations

import math

import pytest

import llamabatch.engine.features.labels as scoring
from llamabatch import BatchGenerator, SamplingParams
from llamabatch.testing import FakeBackend

COLON = ord(":")
SPACED = {" bug": 300, " ask": 301}
SCORED = SamplingParams(choices=["bug", "ask"], score_choices=True)
PROMPTS = [f"Ticket {i}: it {'crashes' if i % 2 else 'asks'}. Category:" for i in range(5)]
#: the unspaced "ask": its first token 4 nats below, too close to leave out
ASK_FIRST = -4.0


def spaced_tokenizer(text: str) -> list[int]:
    """Bytes, but " bug" and " ask" are one token each (300, 301)."""
    data, out, i = text.encode(), [], 0
    while i < len(data):
        word = data[i : i + 4].decode(errors="replace")
        if word in SPACED:
            out.append(SPACED[word])
            i += 4
        else:
            out.append(data[i])
            i += 1
    return out


class PeakedFake(FakeBackend):
    """After ``":"`` the spaced labels are likely (0.5 and 0.3), the unspaced ones start
    with ``bug_first`` and ``ASK_FIRST`` and then go on at -0.1 a letter."""

    def __init__(self, bug_first: float) -> None:
        super().__init__(n_vocab=320, tokenizer=spaced_tokenizer)
        self.bug_first = bug_first

    def token_logprob(self, context, token: int) -> float:
        c = list(context)
        if c[-1:] == [COLON]:
            first = {300: math.log(0.5), 301: math.log(0.3)}
            first |= {ord("b"): self.bug_first, ord("a"): ASK_FIRST}
            return first.get(token, -30.0)
        for word in (b"bug", b"ask"):
            for k in (1, 2):
                if c[-k - 1 :] == [COLON, *word[:k]] and token == word[k]:
                    return -0.1
        return super().token_logprob(context, token)


def exact(bug_first: float) -> dict[str, float]:
    """Both forms of each label, summed in probability."""
    return {
        "bug": math.log(0.5 + math.exp(bug_first - 0.2)),
        "ask": math.log(0.3 + math.exp(ASK_FIRST - 0.2)),
    }


# the unspaced "bug" is left out where log1p(exp(bug_first - log 0.5)) <= SKIP_NATS
LIMIT = math.log(0.5) + math.log(math.expm1(scoring.SKIP_NATS))


@pytest.mark.parametrize("bug_first", [-3.0, -5.0, LIMIT + 0.01, LIMIT - 0.01, -6.0, -12.0])
@pytest.mark.parametrize("slots", [1, 3])
def test_a_label_lacks_at_most_the_bound_and_only_unlikely_forms_are_left(
    bug_first: float, slots: int
) -> None:
    fake = PeakedFake(bug_first)
    gen = BatchGenerator(backend=fake, slots=slots, n_batch=32)
    want = exact(bug_first)
    for _run in range(2):  # cold, then from the slots' cached prompts
        for c in gen.complete_many(PROMPTS, SCORED):
            assert c.error is None
            got = c.choice_logprobs
            assert want["bug"] - scoring.SKIP_NATS - 1e-12 <= got["bug"] <= want["bug"] + 1e-12
            if bug_first <= LIMIT:  # left out: the spaced form alone
                assert got["bug"] == pytest.approx(math.log(0.5), abs=1e-12)
            else:
                assert got["bug"] == pytest.approx(want["bug"], abs=1e-12)
            assert got["ask"] == pytest.approx(want["ask"], abs=1e-12)  # 0.06 nats: kept
            assert sum(c.choice_probs.values()) == pytest.approx(1.0)
            assert c.text == "bug"
    assert fake.violations == []


def test_leaving_forms_out_saves_their_tokens_and_agrees_alone_and_batched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def run(slots: int) -> tuple[list[dict[str, float]], int]:
        gen = BatchGenerator(backend=PeakedFake(-8.0), slots=slots, n_batch=32)
        out = gen.complete_many(PROMPTS, SCORED)
        return [c.choice_logprobs for c in out], gen.stats.label_tokens_decoded

    batched, tokens = run(3)
    alone, _ = run(1)
    assert batched == alone
    bound = scoring.SKIP_NATS
    monkeypatch.setattr(scoring, "SKIP_NATS", 0.0)  # every form finished
    every, every_tokens = run(3)
    assert tokens < every_tokens
    for a, b in zip(batched, every):
        assert b["bug"] - bound - 1e-12 <= a["bug"] <= b["bug"] + 1e-12
        assert a["ask"] == pytest.approx(b["ask"], abs=1e-12)

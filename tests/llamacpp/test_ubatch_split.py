"""llama.cpp's ubatch split (``split_equal``) as the backend models it, and the cuts that
keep label scoring out of ubatches of one token per sequence without making any
sequence wait (the fake backend shapes its calls the same way, unless ``shapes=False``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.engine.step import Span
from llamabatch.llamacpp.ubatch import avoid_one_per_seq, decode_calls, one_per_seq, split_equal
from llamabatch.testing import DecodeCall, FakeBackend

SCORED = SamplingParams(choices=["bug", "feature", "question"], score_choices=True)


def prefill(seq_id: int, n: int, scored_last: bool = True) -> Span:
    targets = tuple(() for _ in range(n - 1)) + (((7,),) if scored_last else ((),))
    return Span(seq_id, 10, tuple(range(1, n + 1)), False, targets)


def decode(seq_id: int) -> Span:
    return Span(seq_id, 40, (5,), True)


def test_split_equal_takes_consecutive_ids_and_the_fewest_tokens_left() -> None:
    spans = [prefill(0, 32), prefill(1, 50), prefill(2, 49), prefill(3, 53)]
    assert split_equal(spans) == [
        [(0, 0, 32), (1, 0, 32), (2, 0, 32), (3, 0, 32)],
        [(1, 32, 17), (2, 32, 17), (3, 32, 17)],
        [(1, 49, 1)],  # seq 1's last row alone: what the cuts prevent
        [(3, 49, 4)],
    ]
    assert one_per_seq(spans, {0, 1, 2, 3}) == [1]


def test_a_lone_last_row_is_paired_by_cutting_a_neighbour_by_two() -> None:
    spans = [prefill(0, 32), prefill(1, 50), prefill(2, 49), prefill(3, 53)]
    out = avoid_one_per_seq(spans, {0, 1, 2, 3})
    assert one_per_seq(out, {0, 1, 2, 3}) == []
    for a, b in zip(spans, out):
        assert a.seq_id == b.seq_id and tuple(a.tokens[: len(b.tokens)]) == tuple(b.tokens)
        assert len(a.tokens) - len(b.tokens) != 1  # never one token left for the next call


def test_a_label_run_beside_a_reply_rides_along() -> None:
    """A reply step is one token per sequence; a two-token run beside it is split 1 + 1
    and is decoded as it is (holding it back would make it wait for the reply)."""
    mixed = [decode(0), prefill(1, 2), decode(2)]
    assert one_per_seq(mixed, {1}, {0, 2}) == []
    assert avoid_one_per_seq(mixed, {1}, {0, 2}) == mixed
    plain = [prefill(0, 32, False), prefill(1, 33, False)]
    assert avoid_one_per_seq(plain, set()) == plain  # nobody scoring: nothing to protect


@st.composite
def calls(draw):
    n = draw(st.integers(1, 5))
    spans, scoring, decoding = [], set(), set()
    for seq_id in range(n):
        kind = draw(st.sampled_from(["decode", "prompt end", "prefill", "scoring"]))
        if kind == "decode":
            spans.append(decode(seq_id))
            decoding.add(seq_id)
        elif kind == "prompt end":  # a prompt's last chunk that samples
            length = draw(st.integers(1, 6))
            spans.append(Span(seq_id, 0, tuple(range(1, length + 1)), True))
        else:
            length = draw(st.integers(1, 40))
            spans.append(prefill(seq_id, length, kind == "scoring"))
            if kind == "scoring":
                scoring.add(seq_id)
    return spans, scoring, decoding


@settings(max_examples=400, deadline=None)
@given(calls())
def test_cuts_only_shorten_chunks_keep_every_span_and_never_make_things_worse(call) -> None:
    spans, scoring, decoding = call
    out = avoid_one_per_seq(spans, scoring, decoding)
    assert [s.seq_id for s in out] == [s.seq_id for s in spans]  # nobody waits
    for a, s in zip(spans, out):
        assert len(s.tokens) >= 1 and s.pos == a.pos
        assert tuple(a.tokens[: len(s.tokens)]) == tuple(s.tokens)
        assert len(a.tokens) - len(s.tokens) != 1
        if a.logits:
            assert s == a  # a sampling row stays where it is
    assert len(one_per_seq(out, scoring, decoding)) <= len(one_per_seq(spans, scoring, decoding))
    if all(s.seq_id in scoring and len(s.tokens) >= 4 for s in spans) and len(spans) > 1:
        assert one_per_seq(out, scoring, decoding) == []


def test_a_run_no_cut_can_help_is_decoded_in_a_call_of_its_own() -> None:
    # ubatches of 2+2+2 tokens, then seq 1's last alone; label runs are precise
    spans = [replace(prefill(k, n), precise=True) for k, n in enumerate([2, 3, 2])]
    assert avoid_one_per_seq(spans, {0, 1, 2}) == spans  # no cut of 2 or 3 tokens helps
    calls = decode_calls(spans)
    assert calls == [[spans[0], spans[2]], [spans[1]]]
    assert all(one_per_seq(call, {0, 1, 2}) == [] for call in calls)
    reply = [replace(decode(k), step=True) for k in (0, 2)]  # a run beside replies rides along
    steps = [reply[0], replace(prefill(1, 2), precise=True), reply[1]]
    assert decode_calls(steps) == [steps]


def scoring_run(fake: FakeBackend, prompts, sampling, slots: int = 4) -> BatchGenerator:
    gen = BatchGenerator(backend=fake, slots=slots, n_batch=64)
    out = gen.complete_many(prompts, sampling)
    assert all(c.error is None for c in out)
    assert fake.violations == []
    return gen


def test_a_scoring_run_on_the_fake_decodes_far_fewer_tokens_one_per_sequence() -> None:
    """Byte-level labels of 3-9 tokens make runs of every length; where no cut of two or
    three tokens helps (a run of three beside runs of two) that run is decoded in a call of
    its own, so no decode call leaves a scored token in a ubatch of one per sequence."""
    prompts = [f"Ticket {i}: {'x' * (i * 7 % 23)} it broke. Category:" for i in range(24)]
    everyone = set(range(4))

    def flagged(fake: FakeBackend) -> int:
        return sum(1 for c in fake.calls(DecodeCall) if one_per_seq(c.spans, everyone))

    scoring_run(cut := FakeBackend(), prompts, SCORED)
    scoring_run(plain := FakeBackend(shapes=False), prompts, SCORED)
    assert flagged(plain) > 0
    assert flagged(cut) == 0


def calls_without_cuts(make, *args) -> int:
    return scoring_run(make().copy(shapes=False), *args).stats.decode_calls


@pytest.mark.parametrize("case", ["mixed with long replies", "recurrent", "sliding window"])
def test_cuts_cost_at_most_a_call_per_four_scored_items(case: str) -> None:
    """Nobody waits for the cuts: beside long replies a label run rides along, and on
    memories scored from snapshots (one-token runs) every slot keeps working."""
    if case == "mixed with long replies":

        def make():
            return FakeBackend(reply=lambda p: [65] * 60, eog_ids=())

        prompts = [
            f"Write story {i}:" if i % 2 else f"Ticket {i}: it broke. Category:" for i in range(12)
        ]
        sampling = [
            SamplingParams(temperature=0.0, max_tokens=60) if i % 2 else SCORED for i in range(12)
        ]
    else:

        def make():
            return FakeBackend(recurrent=True) if case == "recurrent" else FakeBackend(n_swa=8)

        prompts = [f"Ticket {i}: {'x' * (i % 5)} Category:" for i in range(12)]
        sampling = SCORED
    base = calls_without_cuts(make, prompts, sampling)
    cut = scoring_run(make(), prompts, sampling).stats.decode_calls
    n_scored = sum(1 for s in ([sampling] * 12 if sampling is SCORED else sampling) if s is SCORED)
    assert cut <= base + n_scored // 4, (cut, base)

"""llama.cpp's ubatch split (``split_equal``) as the engine models it, and the cuts that
keep label scoring out of ubatches of one token per sequence."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.engine.backend import Span
from llamabatch.engine.ubatch import pair_scored_rows, split_equal, thin
from llamabatch.testing import DecodeCall, FakeBackend


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
    assert thin(spans, {0, 1, 2, 3}) == [1]


def test_a_lone_last_row_is_paired_by_cutting_a_neighbour_by_two() -> None:
    spans = [prefill(0, 32), prefill(1, 50), prefill(2, 49), prefill(3, 53)]
    out = pair_scored_rows(spans, {0, 1, 2, 3})
    assert thin(out, {0, 1, 2, 3}) == []
    for a, b in zip(spans, out):
        assert a.seq_id == b.seq_id and tuple(a.tokens[: len(b.tokens)]) == tuple(b.tokens)
        assert len(a.tokens) - len(b.tokens) != 1  # never one token left for the next call


def test_decode_tokens_are_not_fought_and_other_work_is_left_alone() -> None:
    mixed = [decode(0), prefill(1, 30), decode(2)]
    assert pair_scored_rows(mixed, {1}) == mixed  # a reply step is one token per sequence
    plain = [prefill(0, 32, False), prefill(1, 33, False)]
    assert pair_scored_rows(plain, set()) == plain  # nobody scoring: nothing to protect


@st.composite
def calls(draw):
    n = draw(st.integers(1, 5))
    spans, scoring = [], set()
    for seq_id in range(n):
        kind = draw(st.sampled_from(["decode", "prefill", "scoring"]))
        if kind == "decode":
            spans.append(decode(seq_id))
            continue
        length = draw(st.integers(1, 40))
        spans.append(prefill(seq_id, length, kind == "scoring"))
        if kind == "scoring":
            scoring.add(seq_id)
    return spans, scoring


@settings(max_examples=300, deadline=None)
@given(calls())
def test_cuts_only_shorten_chunks_and_never_make_things_worse(call) -> None:
    spans, scoring = call
    out = pair_scored_rows(spans, scoring)
    by_id = {s.seq_id: s for s in spans}
    assert [s.seq_id for s in out] == sorted(s.seq_id for s in out)
    for s in out:
        a = by_id[s.seq_id]
        assert tuple(a.tokens[: len(s.tokens)]) == tuple(s.tokens) and s.pos == a.pos
        if s.seq_id in scoring:
            assert len(a.tokens) - len(s.tokens) != 1
    kept = {s.seq_id for s in out}
    assert all(s.seq_id in kept for s in spans if s.logits)  # replies never wait
    assert len(thin(out, scoring)) <= len(thin(spans, scoring))
    if all(s.seq_id in scoring and len(s.tokens) >= 4 for s in spans) and len(spans) > 1:
        assert thin(out, scoring) == []


def test_a_scoring_run_on_the_fake_never_decodes_its_tokens_one_per_sequence() -> None:
    fake = FakeBackend()
    gen = BatchGenerator(backend=fake, slots=4, n_batch=64)
    prompts = [f"Ticket {i}: {'x' * (i * 7 % 23)} it broke. Category:" for i in range(24)]
    sp = SamplingParams(choices=["bug", "feature", "question"], score_choices=True)
    out = gen.complete_many(prompts, sp)
    assert all(c.error is None for c in out)
    everyone = set(range(4))
    calls_made = fake.calls(DecodeCall)
    bad = [c.call for c in calls_made if len(c.spans) > 1 and thin(c.spans, everyone)]
    assert bad == []
    assert fake.violations == []

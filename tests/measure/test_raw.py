"""The raw bench (``llamabatch bench``'s first table) on the fake backend: one row per B
with llama-batched-bench's arithmetic, driven through the slot engine. Timings are never
asserted: the clock is scripted."""

from __future__ import annotations

import itertools
import math

import pytest

from llamabatch.measure.raw import RAW_COLUMNS, ctx_per_seq, raw_row, run_raw
from llamabatch.testing import DecodeCall, FakeBackend, StartSeqCall

SLOTS = (1, 2, 4, 8)


def step_clock(step: float = 1.0):
    """A clock that advances by ``step`` on every call."""
    counter = itertools.count()
    return lambda: next(counter) * step


def raw_fake() -> FakeBackend:
    # No EOG: the raw bench decodes a fixed number of tokens, whatever is sampled.
    return FakeBackend(eog_ids=(), n_vocab=300)


def test_raw_rows_one_per_b_with_batched_bench_arithmetic():
    fake = raw_fake()
    rows, limits = run_raw(fake, SLOTS, 20, 5, rounds=3, n_batch=32, clock=step_clock())
    assert [r.b for r in rows] == list(SLOTS)
    assert limits.n_seq_max == max(SLOTS) and limits.n_ctx_seq >= 25
    for r in rows:
        assert (r.pp, r.tg) == (20, 5)
        assert r.n_kv == r.b * (20 + 5)
        assert len(r.rounds) == 3
        assert math.isclose(r.s_pp, r.b * r.pp / r.t_pp)
        assert math.isclose(r.s_tg, r.b * r.tg / r.t_tg)
        assert math.isclose(r.t, r.t_pp + r.t_tg)
        assert math.isclose(r.s, r.n_kv / r.t)
        assert len(r.values()) == len(RAW_COLUMNS)
    assert fake.violations == []


def test_raw_drives_the_slot_engine_and_feeds_back_samples():
    fake = raw_fake()
    run_raw(fake, (3,), 40, 4, rounds=1, n_batch=32, clock=step_clock())
    decodes = fake.calls(DecodeCall)
    assert all(d.n_tokens <= 32 for d in decodes)
    assert decodes[0].n_tokens == 16  # the warm-up: 16 tokens
    timed = decodes[1:]
    # 3 prompts of 40 tokens through 32-token decodes, prompts ending early decode in
    # the same calls (decode tokens first), then each sequence fed back 4 samples
    assert sum(d.n_tokens for d in timed) == 3 * (40 + 4)
    positions = {s: [] for s in range(3)}
    for d in timed:
        for span in d.spans:
            positions[span.seq_id] += range(span.pos, span.pos + len(span.tokens))
    assert positions == {s: list(range(44)) for s in range(3)}
    assert timed[2].spans[0] == (timed[2].spans[0].__class__(0, 40, (timed[1].sampled[0],), True))
    assert fake.violations == []  # fed back what was sampled
    assert all(c.sampling.is_greedy for c in fake.calls(StartSeqCall))


def test_raw_row_is_the_median_of_rounds():
    row = raw_row(256, 64, 4, [(1.0, 9.0), (3.0, 7.0), (2.0, 8.0)])
    assert (row.t_pp, row.t_tg) == (2.0, 8.0)
    assert row.n_kv == 4 * 320
    assert row.to_json()["rounds"] == [
        {"t_pp": 1.0, "t_tg": 9.0},
        {"t_pp": 3.0, "t_tg": 7.0},
        {"t_pp": 2.0, "t_tg": 8.0},
    ]
    with pytest.raises(ValueError):
        raw_row(1, 1, 1, [])


def test_raw_asks_for_whole_multiples_of_llama_cpp_padding():
    assert [ctx_per_seq(n) for n in (1, 256, 257, 320)] == [256, 256, 512, 512]
    fake = raw_fake()
    run_raw(fake, (2,), 20, 5, rounds=1)
    assert fake.limits.n_ctx_seq == 256


def test_raw_refuses_sizes_that_do_not_fit():
    with pytest.raises(ValueError, match="n_batch"):
        run_raw(raw_fake(), (8,), 4, 4, n_batch=4)
    with pytest.raises(ValueError, match="slots"):
        run_raw(raw_fake(), (0, 2), 4, 4)


def test_raw_rows_split_their_tg_steps():
    # prompts that end in one decode: every later step is a TG step
    rows, _ = run_raw(raw_fake(), (1, 2), 10, 5, rounds=3, n_batch=32, clock=step_clock())
    for r in rows:
        split = r.split
        assert split is not None and split.steps == 3 * 5
        assert split.backend_sampled_rows == 0  # the fake samples on the host
        assert split.seconds >= split.other >= 0
        assert r.to_json()["split"]["steps"] == 15

"""Sliding-window models: a cached prefix is reused only where the window still holds it.

The fake backend with ``n_swa`` models llama.cpp's window layers with ``swa_full=False``:
they keep only the last ``n_swa`` positions of a sequence, and a sequence cut back to a
prefix and decoded on sees a hole (another reply, no error) when its window moved past
that prefix. Every reply must equal the reply completed alone, and the counters must show
which prefixes were reused.
"""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator
from llamabatch.engine.backend import SeqState
from llamabatch.engine.cache import HostCache
from llamabatch.llamacpp.window import cut_floor
from llamabatch.testing import CopyCall, FakeBackend, HashReply, LoadSeqCall

N_SWA = 16
S = list(range(1, 21))  # a 20-token shared prefix
LONG = S + list(range(30, 90))  # S and 60 more tokens: the window moves well past S
QUESTION = S + [100, 101]  # S and a question
OTHER = list(range(150, 160))
REPLY = HashReply(seed=4, max_len=5, n_vocab=260)


def generator(fake: FakeBackend, **kw) -> BatchGenerator:
    return BatchGenerator(backend=fake, slots=2, max_tokens=8, **kw)


def expected(fake: FakeBackend, prompts) -> list:
    return [fake.expected(p, 8).token_ids for p in prompts]


@pytest.mark.parametrize("min_copy_tokens", [32, 4])
def test_a_prefix_the_window_moved_past_is_prefilled_again(min_copy_tokens):
    """The issue's case: LONG ran in a slot, then QUESTION shares its first 20 tokens;
    the window layers no longer hold them, so neither that slot's cache nor a copy of it
    serves QUESTION."""
    fake = FakeBackend(REPLY, n_swa=N_SWA)
    with generator(fake, min_copy_tokens=min_copy_tokens) as gen:
        first = gen.complete_many([LONG, OTHER])
        cached_before = gen.stats.prompt_tokens_cached
        second = gen.complete_many([QUESTION, OTHER + [7]])
        stats = gen.stats
    assert [c.token_ids for c in first + second] == expected(
        fake, [LONG, OTHER, QUESTION, OTHER + [7]]
    )
    assert {c.path for c in first + second} == {"batch"}
    assert stats.prompt_tokens_cached - cached_before == len(OTHER)  # not S of LONG
    assert fake.calls(CopyCall) == []


def test_a_prefix_still_inside_the_window_is_reused():
    short = S + [30, 31]  # with its reply, well inside a window of 64
    fake = FakeBackend(REPLY, n_swa=64)
    with generator(fake) as gen:
        first = gen.complete_many([short, OTHER])
        cached_before = gen.stats.prompt_tokens_cached
        second = gen.complete_many([QUESTION, OTHER + [7]])
        stats = gen.stats
    assert [c.token_ids for c in first + second] == expected(
        fake, [short, OTHER, QUESTION, OTHER + [7]]
    )
    assert stats.prompt_tokens_cached - cached_before == len(S) + len(OTHER)


def test_a_model_that_keeps_every_position_reuses_the_prefix():
    # swa_full=True in llama.cpp: the backend says n_swa = 0
    fake = FakeBackend(REPLY)
    with generator(fake) as gen:
        gen.complete_many([LONG, OTHER])
        cached_before = gen.stats.prompt_tokens_cached
        second = gen.complete_many([QUESTION, OTHER + [7]])
        stats = gen.stats
    assert [c.token_ids for c in second] == expected(fake, [QUESTION, OTHER + [7]])
    assert stats.prompt_tokens_cached - cached_before == len(S) + len(OTHER)


def test_a_copy_planned_from_a_prefilling_slot_is_dropped_when_its_window_moves_on():
    """QUESTION is placed while LONG prefills in the other slot; the copy of S is planned,
    but by the time that slot holds S its window has moved past it."""
    fake = FakeBackend(REPLY, n_swa=N_SWA)
    with generator(fake, min_copy_tokens=4, n_batch=64) as gen:
        out = gen.complete_many([LONG, QUESTION])
        stats = gen.stats
    assert [c.token_ids for c in out] == expected(fake, [LONG, QUESTION])
    assert fake.calls(CopyCall) == []
    assert stats.prompt_tokens_cached == 0


def test_a_copy_from_a_slot_whose_window_still_holds_the_prefix_is_made():
    fake = FakeBackend(REPLY, n_swa=64)
    with generator(fake, min_copy_tokens=4, n_batch=64) as gen:
        out = gen.complete_many([S + [30, 31, 32], QUESTION])
        stats = gen.stats
    assert [c.token_ids for c in out] == expected(fake, [S + [30, 31, 32], QUESTION])
    assert len(fake.calls(CopyCall)) == 1 and stats.prompt_tokens_cached == len(S)


def test_a_state_in_host_memory_serves_only_what_its_window_holds():
    """LONG's slot is saved when OTHER items take it; QUESTION then shares S with that
    state, whose window moved on: prefilled. A prompt that continues the state whole is
    loaded."""
    fake = FakeBackend(HashReply(seed=4, max_len=0, n_vocab=260), n_swa=N_SWA)
    others = [list(range(150 + 10 * k, 160 + 10 * k)) * 4 for k in range(3)]
    on = LONG + [5, 6]  # continues LONG's cache whole (the reply is at once EOG)
    prompts = [LONG, others[0], others[1], others[2], QUESTION, on]
    with generator(fake, cache_ram_mib=64, min_copy_tokens=4) as gen:
        out = gen.complete_many(prompts)
        stats = gen.stats
    assert [c.token_ids for c in out] == expected(fake, prompts)
    assert stats.cache_ram_saves >= 1
    loads = fake.calls(LoadSeqCall)
    assert [call.tokens for call in loads] == [tuple(LONG)]


def test_the_window_rule_and_its_cut_floor():
    # no window, or a window that never slid: any cut
    assert cut_floor(90, 0) == 0
    assert cut_floor(0, 16) == 0
    # the next position n_keep attends to positions > n_keep - n_swa: held from pos_min on
    assert cut_floor(24, 16) == 40
    assert cut_floor(25, 16) == 41
    # nothing held, or not known: no cut inside the cache
    assert cut_floor(-1, 16) > 10**9
    assert cut_floor(None, 16) > 10**9
    # a cut to n_keep keeps every position > n_keep - n_swa it attends to: exactly n >= floor
    for n_keep in range(1, 100):
        for pos_min in (0, 1, 24, 25, 60):
            holds = pos_min <= max(0, n_keep - 16)
            assert holds == (n_keep >= cut_floor(pos_min, 16)), (n_keep, pos_min)


def test_the_host_cache_keeps_a_shorter_state_a_longer_one_cannot_serve():
    cache = HostCache(limit_bytes=1000)
    assert cache.add(S, SeqState("s", 10), floor=cut_floor(5, 16))
    assert cache.add(
        LONG, SeqState("long", 10), floor=cut_floor(len(LONG) - 15, 16)
    )  # cannot serve S
    assert len(cache) == 2
    assert not cache.add(S, SeqState("again", 10), floor=cut_floor(5, 16))  # covered by the first
    found = cache.best(QUESTION)
    assert found is not None and found[0].state.data == "s" and found[1] == len(S)
    # a state that serves its prefix replaces it
    fresh = HostCache(limit_bytes=1000)
    assert fresh.add(S, SeqState("s", 10), floor=cut_floor(0, 16))
    assert fresh.add(S + [5, 6], SeqState("s56", 10), floor=cut_floor(0, 16))
    assert len(fresh) == 1

"""States of slots kept in host memory (``cache_ram_mib``): a template whose slots were
taken by another one is loaded back, not prefilled again; replies never change."""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator
from llamabatch.engine.backend import SeqState
from llamabatch.engine.cache import HostCache
from llamabatch.testing import DecodeCall, FakeBackend, HashReply, LoadSeqCall

A = list(range(1, 61))  # two 60-token "system prompts"
B = list(range(61, 121))
REPLY = HashReply(seed=3, max_len=5, n_vocab=260)


def items(head: list[int], n: int, k0: int) -> list[list[int]]:
    return [head + [130 + k0 + k, 200 + k] for k in range(n)]


def backlog() -> list[list[int]]:
    """Two items of A fill both slots, two of B replace them, then A again."""
    return items(A, 2, 0) + items(B, 2, 10) + items(A, 2, 20)


def run(cache_ram_mib: int, prompts=None, reply=REPLY, **kw):
    fake = FakeBackend(reply, **kw)
    prompts = backlog() if prompts is None else prompts
    with BatchGenerator(backend=fake, slots=2, max_tokens=8, cache_ram_mib=cache_ram_mib) as gen:
        out = gen.complete_many(prompts)
        stats = gen.stats
    return fake, out, stats


def test_a_template_whose_slots_were_taken_is_loaded_back_not_prefilled():
    fake, out, stats = run(64)
    assert [c.token_ids for c in out] == [fake.expected(p, 8).token_ids for p in backlog()]
    assert all(c.path == "batch" for c in out)
    assert stats.cache_ram_saves >= 2  # the A slots, when B took them
    assert stats.cache_ram_loads >= 1
    loads = fake.calls(LoadSeqCall)
    assert loads and all(call.tokens[:60] == tuple(A) for call in loads)
    # the later A items fed only their own 2 tokens after the 60 loaded or copied ones
    last = [s for s in fake.seqs() if s.prompt[:60] == tuple(A)][-2:]
    assert [len(s.cached) for s in last] == [60, 60]


def test_without_cache_ram_the_template_is_prefilled_again_and_replies_are_the_same():
    fake_on, on, stats_on = run(64)
    fake_off, off, stats_off = run(0)
    assert [c.token_ids for c in on] == [c.token_ids for c in off]
    assert stats_off.cache_ram_saves == stats_off.cache_ram_loads == 0
    assert fake_off.calls(LoadSeqCall) == []
    # off: the first later A item prefills A again (the second copies it from there)
    assert stats_on.prompt_tokens_prefilled == stats_off.prompt_tokens_prefilled - 60


def test_a_recurrent_memory_loads_only_a_state_that_ends_inside_the_prompt():
    # the saved states hold A + ticket + reply: no later prompt extends them, so a
    # recurrent memory (no cut back) must prefill A again; replies stay right
    fake, out, stats = run(64, recurrent=True)
    assert [c.token_ids for c in out] == [fake.expected(p, 8).token_ids for p in backlog()]
    assert stats.cache_ram_loads == 0
    # a prompt that extends a saved state whole does load it
    first = A + [1, 2]
    prompts = [first, B + [3], B + [4], B + [5], first + [77, 5, 6]]
    fake, out, stats = run(
        64, prompts, recurrent=True, reply=HashReply(seed=1, max_len=0, n_vocab=260)
    )
    assert [c.token_ids for c in out] == [fake.expected(p, 8).token_ids for p in prompts]
    assert stats.cache_ram_loads == 1
    assert [len(call.tokens) for call in fake.calls(LoadSeqCall)] == [len(first)]


@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_failed_save_or_load_loses_no_item(at):
    fake, out, stats = run(64, fail_state_at=at)
    assert [c.index for c in out] == list(range(6))
    assert [c.token_ids for c in out] == [fake.expected(p, 8).token_ids for p in backlog()]
    # one failure costs the items in flight a retry alone; batching goes on
    assert stats.batching_enabled and stats.batch_failures == 1
    assert "save_seq" in stats.last_batch_failure or "load_seq" in stats.last_batch_failure


@pytest.mark.parametrize("bad", [-1, 1.5, "64", True, None])
def test_cache_ram_mib_must_be_a_non_negative_integer(bad):
    with pytest.raises(ValueError, match="cache_ram_mib"):
        BatchGenerator(backend=FakeBackend(REPLY), slots=2, cache_ram_mib=bad)


def test_the_host_cache_keeps_the_longest_state_and_drops_the_least_recently_used():
    cache = HostCache(limit_bytes=100)
    assert cache.add([1, 2, 3], SeqState("s123", 40))
    assert not cache.add([1, 2], SeqState("s12", 10))  # covered by [1, 2, 3]
    assert cache.add([1, 2, 3, 4], SeqState("s1234", 40))  # replaces its own prefix
    assert len(cache) == 1 and cache.n_bytes == 40
    assert cache.add([9, 9], SeqState("s99", 40))
    assert cache.best([9, 9, 5])[1] == 2  # [9, 9] is now the newest
    assert cache.add([7], SeqState("s7", 40))  # over 100: oldest out
    assert cache.best([1, 2, 3, 4, 5]) is None
    assert cache.best([9, 9, 5])[0].state.data == "s99"
    assert not cache.add([5] * 10, SeqState("big", 101))  # larger than the limit
    assert cache.best([9, 8])[1] == 1  # [9, 9] cut back to [9]
    assert cache.best([9, 9])[1] == 1  # never the prompt's last token
    cache.clear()
    assert len(cache) == 0 and cache.n_bytes == 0
    # a state that cannot be cut back (floor: its length, a recurrent memory's) serves only whole
    whole = HostCache(limit_bytes=100)
    assert whole.add([9, 9], SeqState("r99", 10), floor=2)
    assert whole.add([7], SeqState("r7", 10), floor=1)
    assert whole.best([9, 8]) is None and whole.best([7, 8])[1] == 1
    with pytest.raises(ValueError, match="limit_bytes"):
        HostCache(-1)


def test_decodes_after_a_load_continue_the_loaded_positions():
    fake, _, _ = run(64)
    for call in fake.calls(DecodeCall):
        assert call.error_code is None
    assert fake.violations == []

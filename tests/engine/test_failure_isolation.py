"""Failure isolation on the fake backend: a failure of the batch path costs the items in
flight one retry alone and batching goes on; ``max_batch_failures`` in a row turn it off;
a grammar error is the item's own; a context that cannot be created is tried smaller."""

from __future__ import annotations

import logging

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.engine.scheduler import smaller_tries
from llamabatch.errors import BatchUnavailable, LibraryError
from llamabatch.testing import DecodeCall, FakeBackend, HashReply, OpenBatchCall

REPLY = HashReply(seed=3, max_len=6, n_vocab=256)
PROMPTS = [f"item {k}: {'x' * (k % 5)}" for k in range(16)]


def clean_run(prompts=PROMPTS, **kw):
    gen = BatchGenerator(backend=FakeBackend(REPLY), slots=4, max_tokens=8, **kw)
    return [(c.index, c.token_ids, c.finish_reason) for c in gen.complete_many(prompts)]


def results(out):
    return [(c.index, c.token_ids, c.finish_reason) for c in out]


def test_one_failed_decode_retries_only_the_items_in_flight_and_batching_goes_on():
    fake = FakeBackend(REPLY, fail_decode_at=2, fail_code=-3)
    gen = BatchGenerator(backend=fake, slots=4, max_tokens=8)
    out = gen.complete_many(PROMPTS)
    assert results(out) == clean_run()  # nothing lost, nothing reordered
    alone = [c.index for c in out if c.path == "alone"]
    assert alone == [0, 1, 2, 3]  # the four in flight at decode 2, each retried once
    assert all(c.path == "batch" for c in out[4:])
    stats = gen.stats
    assert stats.batching_enabled and stats.batch_failures == 1 and stats.items_retried == 4
    assert "-3" in stats.last_batch_failure
    assert fake.violations == []


def test_k_failures_in_a_row_turn_batching_off_and_lose_nothing(caplog):
    fake = FakeBackend(REPLY, fail_decode_at=range(1, 1000), fail_code=-1)
    gen = BatchGenerator(backend=fake, slots=4, max_tokens=8)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        out = gen.complete_many(PROMPTS)
    assert results(out) == clean_run()
    assert {c.path for c in out} == {"alone"} and all(c.ok for c in out)
    assert len(fake.calls(DecodeCall)) == 3  # then batching is off
    reason = gen.stats.batch_disabled_reason
    assert "3 failures of the batch path in a row (max_batch_failures=3)" in reason
    assert "llama_decode returned -1" in reason
    assert gen.stats.batch_failures == 3
    off = [r for r in caplog.records if "batching turned off" in r.getMessage()]
    assert len(off) == 1


@pytest.mark.parametrize("k", [1, 2, 5])
def test_max_batch_failures_is_configurable(k):
    fake = FakeBackend(REPLY, fail_decode_at=range(1, 1000))
    gen = BatchGenerator(backend=fake, slots=2, max_tokens=8, max_batch_failures=k)
    out = gen.complete_many(PROMPTS)
    assert results(out) == clean_run()
    assert len(fake.calls(DecodeCall)) == k and not gen.stats.batching_enabled


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", None])
def test_max_batch_failures_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_batch_failures"):
        BatchGenerator(backend=FakeBackend(REPLY), slots=2, max_batch_failures=bad)


def test_failures_apart_are_not_in_a_row():
    # decode 2 and a later one fail; items complete in the batch in between
    fake = FakeBackend(REPLY, fail_decode_at=(2, 30))
    gen = BatchGenerator(backend=fake, slots=4, max_tokens=8, max_batch_failures=2)
    out = gen.complete_many(PROMPTS * 3)
    assert results(out) == clean_run(PROMPTS * 3)
    assert gen.stats.batch_failures == 2 and gen.stats.batching_enabled


def test_a_failure_during_the_retry_alone_is_that_items_error_only():
    bad = tuple(PROMPTS[1].encode())
    fake = FakeBackend(REPLY, fail_decode_at=2, fail_alone={bad})
    gen = BatchGenerator(backend=fake, slots=4, max_tokens=8)
    out = gen.complete_many(PROMPTS)
    assert [c.ok for c in out] == [k != 1 for k in range(16)]
    assert "failed even alone" in out[1].error
    want = clean_run()
    assert [r for r in results(out) if r[0] != 1] == [r for r in want if r[0] != 1]
    assert gen.stats.batching_enabled and all(c.path == "batch" for c in out[4:])


def test_a_failed_cache_copy_retries_the_items_in_flight_and_batching_goes_on():
    head = "a shared system prompt of some length, " * 3
    prompts = [head + f"item {k}" for k in range(12)]
    fake = FakeBackend(REPLY, fail_copy_at=1)
    gen = BatchGenerator(backend=fake, slots=4, max_tokens=8, min_copy_tokens=8)
    out = gen.complete_many(prompts)
    assert results(out) == clean_run(prompts, min_copy_tokens=8)
    assert gen.stats.batch_failures == 1 and "copy_seq" in gen.stats.last_batch_failure
    assert gen.stats.batching_enabled and out[-1].path == "batch"
    assert fake.violations == []


CHOICE = SamplingParams(choices=["yes", "no"])
PLAIN = SamplingParams()


def test_a_refused_grammar_is_the_items_own_error_and_never_counts():
    fake = FakeBackend(REPLY, refuse_grammar=True)
    gen = BatchGenerator(backend=fake, slots=4, max_tokens=8, max_batch_failures=1)
    sampling = [CHOICE if k % 4 == 1 else PLAIN for k in range(16)]
    out = gen.complete_many(PROMPTS, sampling)
    for k, c in enumerate(out):
        if k % 4 == 1:
            assert c.finish_reason == "error" and "refused" in c.error
        else:
            assert c.ok and c.path == "batch"
    assert gen.stats.batching_enabled and gen.stats.batch_failures == 0


@pytest.mark.parametrize("slots", [1, 4])
def test_a_grammar_dead_end_ends_that_item_with_where_it_happened(slots):
    fake = FakeBackend(REPLY, dead_end_at=2, eog_ids=())
    gen = BatchGenerator(backend=fake, slots=slots, max_tokens=8, max_batch_failures=1)
    sampling = [CHOICE if k % 4 == 1 else PLAIN for k in range(16)]
    out = gen.complete_many(PROMPTS, sampling)
    want = BatchGenerator(backend=FakeBackend(REPLY, eog_ids=()), slots=slots, max_tokens=8)
    clean = results(want.complete_many(PROMPTS))
    for k, c in enumerate(out):
        if k % 4 == 1:
            assert c.finish_reason == "error"
            assert "allows no token" in c.error and "after 2 reply tokens" in c.error
        else:
            assert results([c]) == [clean[k]]
    assert [c.index for c in out] == list(range(16))
    if slots > 1:
        assert gen.stats.batching_enabled and gen.stats.batch_failures == 0
        assert {c.path for c in out} == {"batch"}
    assert fake.violations == []


@pytest.mark.parametrize("slots", [1, 4])
def test_a_complete_grammar_with_no_end_of_generation_token_ends_the_reply_there(slots):
    fake = FakeBackend(REPLY, complete_at=2, eog_ids=())
    gen = BatchGenerator(backend=fake, slots=slots, max_tokens=8, max_batch_failures=1)
    words = SamplingParams(grammar="root ::= [a-z]+")
    sampling = [words if k % 4 == 1 else PLAIN for k in range(16)]
    out = gen.complete_many(PROMPTS, sampling)
    want = BatchGenerator(backend=FakeBackend(REPLY, eog_ids=()), slots=slots, max_tokens=8)
    clean = results(want.complete_many(PROMPTS))
    for k, c in enumerate(out):
        if k % 4 == 1:
            assert c.ok and c.finish_reason == "stop"
            assert list(c.token_ids) == list(clean[k][1][:2])
        else:
            assert results([c]) == [clean[k]]
    if slots > 1:
        assert gen.stats.batch_failures == 0 and {c.path for c in out} == {"batch"}
    assert fake.violations == []


@pytest.mark.parametrize("slots", [1, 4])
def test_n_replies_that_reach_a_grammar_dead_end_come_back_as_errored_samples(slots):
    fake = FakeBackend(REPLY, dead_end_at=2, eog_ids=())
    gen = BatchGenerator(backend=fake, slots=slots, max_tokens=8, max_batch_failures=1)
    sampling = [SamplingParams(n=3, seed=1, choices=["yes", "no"]), PLAIN, PLAIN]
    out = gen.complete_many(PROMPTS[:3], sampling)
    assert [c.index for c in out] == [0, 1, 2]
    c = out[0]
    assert c.finish_reason == "error" and "allows no token" in c.error
    assert c.samples is not None and len(c.samples) == 3
    assert all(s.finish_reason == "error" and "after 2 reply tokens" in s.error for s in c.samples)
    assert c.votes == {"yes": 0, "no": 0}
    assert out[1].ok and out[2].ok
    # no group is left behind: the same index with n == 1 comes back as itself
    again = gen.complete_many(PROMPTS[:2])
    assert [x.index for x in again] == [0, 1] and all(x.ok for x in again)
    assert again[0].samples is None
    assert fake.violations == []


@pytest.mark.parametrize("slots", [1, 4])
def test_n_choices_replies_cut_off_by_max_tokens_come_back_as_errored_samples(slots):
    fake = FakeBackend({"p": "billing", "q": "fine"})
    gen = BatchGenerator(backend=fake, slots=slots, max_tokens=3)
    sampling = [SamplingParams(n=3, choices=["billing", "bug"]), PLAIN]
    out = gen.complete_many(["p", "q"], sampling)
    assert [c.index for c in out] == [0, 1]
    c = out[0]
    assert c.finish_reason == "error" and "before it was one of the choices" in c.error
    assert [s.finish_reason for s in c.samples] == ["error"] * 3
    assert c.votes == {"billing": 0, "bug": 0}
    assert out[1].ok
    assert fake.violations == []


def test_smaller_tries_halve_the_slots_then_n_ctx_seq_down_to_the_floor():
    assert smaller_tries(8, 1024, 300) == [
        (8, 1024),
        (4, 1024),
        (2, 1024),
        (2, 512),
        (2, 300),
    ]
    assert smaller_tries(6, 256, 256) == [(6, 256), (3, 256), (2, 256)]
    assert smaller_tries(2, 4096, 5000) == [(2, 4096)]
    assert smaller_tries(1, 4096, 10) == [(1, 4096)]
    # more than the one-at-a-time context (n_ctx) could never be used: cut straight to it
    assert smaller_tries(4, 2**22, 600, 2048) == [
        (4, 2**22),
        (2, 2**22),
        (2, 2048),
        (2, 1024),
        (2, 600),
    ]


def test_a_context_too_large_for_memory_is_retried_smaller(caplog):
    fake = FakeBackend(REPLY, max_kv_tokens=1100)
    gen = BatchGenerator(backend=fake, slots=8, n_ctx_seq=1024, max_tokens=8)
    with caplog.at_level(logging.INFO, logger="llamabatch"):
        out = gen.complete_many(PROMPTS)
    assert results(out) == clean_run()
    opens = [(c.slots, c.n_ctx_seq, c.limits is not None) for c in fake.calls(OpenBatchCall)]
    assert opens == [(8, 1024, False), (4, 1024, False), (2, 1024, False), (2, 512, True)]
    tries = [r for r in caplog.records if "could not be created" in r.getMessage()]
    assert len(tries) == 3 and "try 1 of" in tries[0].getMessage()
    assert (gen.limits.n_seq_max, gen.limits.n_ctx_seq) == (2, 512)
    assert (gen.stats.batch_slots, gen.stats.batch_n_ctx_seq) == (2, 512)
    assert gen.stats.batching_enabled and {c.path for c in out} == {"batch"}


def test_the_smaller_tries_stop_at_the_longest_waiting_item():
    prompts = ["p" * 300, "q" * 250] + PROMPTS  # need 308 and 258 slot tokens
    fake = FakeBackend(REPLY, max_kv_tokens=500)
    gen = BatchGenerator(backend=fake, slots=4, n_ctx_seq=2048, max_tokens=8)
    out = gen.complete_many(prompts)
    assert results(out) == clean_run(prompts)
    opens = fake.calls(OpenBatchCall)
    assert [(c.slots, c.n_ctx_seq) for c in opens] == smaller_tries(4, 2048, 308)
    assert min(c.n_ctx_seq for c in opens) == 308 and all(c.limits is None for c in opens)
    assert "down to 2 sequences x 308 tokens" in gen.stats.batch_disabled_reason
    assert gen.limits is None and {c.path for c in out} == {"alone"}


class NoSymbolFake(FakeBackend):
    """A fake whose batch context needs a symbol the library lacks."""

    def open(self, slots, n_ctx_seq, n_batch):
        try:
            raise LibraryError("fake: no llama_batch_init")
        except LibraryError as exc:
            raise BatchUnavailable(f"cannot create the batch context: {exc}") from exc


def test_a_missing_symbol_is_not_retried_smaller(caplog):
    gen = BatchGenerator(backend=NoSymbolFake(REPLY), slots=4, max_tokens=8)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        out = gen.complete_many(PROMPTS[:4])
    assert results(out) == clean_run(PROMPTS[:4])
    assert len(caplog.records) == 1 and "1 try" in gen.stats.batch_disabled_reason

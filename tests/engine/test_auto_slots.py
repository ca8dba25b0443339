"""``slots="auto"``: the most slots whose KV cache takes at most half the free memory, with
stand-in memory figures (``FakeBackend(free_bytes=..., kv_bytes_per_token=...)``)."""

from __future__ import annotations

import logging

import pytest

from llamabatch import BatchConfig, BatchGenerator, tune
from llamabatch.engine.auto_slots import AUTO_MAX_SLOTS, AUTO_MEMORY_SHARE
from llamabatch.errors import ParameterError
from llamabatch.params import default_lookahead
from llamabatch.testing import FakeBackend

MIB = 1 << 20


def fake(free_mib: float, **kwargs) -> FakeBackend:
    """1 KiB per token, padded to 256 tokens: a slot of 1024 tokens is 1 MiB."""
    return FakeBackend(free_bytes=int(free_mib * MIB), ctx_pad=256, **kwargs)


def choose(backend: FakeBackend, **kwargs) -> BatchGenerator:
    return BatchGenerator(backend=backend, slots="auto", n_ctx_seq=1024, **kwargs)


def test_the_slots_are_what_half_the_free_memory_holds_and_the_reason_says_so(caplog):
    with caplog.at_level(logging.INFO, logger="llamabatch"), choose(fake(10, device="GPU0")) as gen:
        choice = gen.slots_choice
        assert gen.config.slots == 5 == choice.slots
        assert gen.config.lookahead == default_lookahead(5)
        done = gen.complete_many([f"item {i}" for i in range(12)])
    assert all(c.ok for c in done) and gen.stats.batch_slots == 5
    assert "chose 5" in choice.reason and "10 MiB free on GPU0" in choice.reason
    assert "1.0 MiB of KV cache per slot of 1024 tokens" in choice.reason
    assert f"{AUTO_MEMORY_SHARE:.0%} of the free memory" in choice.reason
    assert choice.reason in caplog.text


def test_plenty_of_memory_stops_at_the_bound_and_the_host_is_named():
    with choose(fake(10_000)) as gen:
        assert gen.config.slots == AUTO_MAX_SLOTS
        assert f"the bound of {AUTO_MAX_SLOTS}" in gen.slots_choice.reason
        assert "free on host" in gen.slots_choice.reason


def test_llama_cpp_and_n_batch_bound_the_choice():
    with choose(fake(10_000, max_slots=3)) as gen:
        assert gen.config.slots == 3
        assert "llama_max_parallel_sequences() = 3" in gen.slots_choice.reason
    with choose(fake(10_000), n_batch=6) as gen:
        assert gen.config.slots == 6 and "n_batch = 6" in gen.slots_choice.reason


def test_when_two_slots_do_not_fit_every_item_is_completed_alone():
    with choose(fake(3)) as gen:
        assert gen.config.slots == 1
        assert "every item is completed alone" in gen.slots_choice.reason
        done = gen.complete_many(["a", "b", "c"])
    assert [c.path for c in done] == ["alone"] * 3 and all(c.ok for c in done)


def test_a_backend_that_reports_no_free_memory_is_refused_by_name():
    with pytest.raises(ParameterError, match="slots='auto'.*does not report its free memory"):
        BatchGenerator(backend=FakeBackend(), slots="auto")


def test_only_auto_or_an_integer_is_a_slot_count():
    with pytest.raises(ParameterError, match=r"slots='many'.*or \"auto\""):
        BatchConfig(slots="many")
    assert BatchConfig(slots="auto").lookahead is None  # set once the count is known
    with pytest.raises(ParameterError, match="lookahead"):  # checked against the choice
        choose(fake(10), lookahead=4)


def test_tune_tries_2_4_8_below_the_choice_then_the_choice():
    prompts = [f"item {i}" for i in range(16)]
    report = tune(None, prompts, "auto", 1, items=8, n_ctx_seq=1024, backend=lambda k: fake(14))
    assert report.slots == (2, 4, 7)
    assert any("chose 7" in n for n in report.notes)
    with pytest.raises(ParameterError, match="slot counts >= 2 that fit"):
        tune(None, prompts, "auto", 1, items=8, n_ctx_seq=1024, backend=lambda k: fake(3))

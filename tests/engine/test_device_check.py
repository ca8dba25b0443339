"""The device check (``BatchGenerator(check_device=...)``): batched steps against the same
tokens one sequence at a time, on the fake backend. ``FakeBackend(corrupt_mixed=...)`` is a
device whose rows are wrong in every call that mixes a prompt with other sequences' reply
steps, as GPU backends' multi-sequence defects are (llama.cpp #28537)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch import BatchConfig, BatchGenerator, SamplingParams
from llamabatch.engine.device_check import PROBE_TOLERANCE, check_device
from llamabatch.errors import ParameterError
from llamabatch.testing import FakeBackend
from llamabatch.testing.records import OpenBatchCall

PROMPTS = [f"item {i}" for i in range(10)]


def run(backend: FakeBackend, **kwargs):
    with BatchGenerator(backend=backend, slots=kwargs.pop("slots", 4), **kwargs) as gen:
        done = gen.complete_many(PROMPTS)
        return done, gen.stats


def test_on_a_device_the_check_runs_by_default_and_a_good_device_batches():
    backend = FakeBackend(device="Fake0")
    done, stats = run(backend)
    opened = backend.calls(OpenBatchCall)  # the probe's context, then a fresh one
    assert len(opened) == 2 and opened[0].limits == opened[1].limits
    assert stats.device_check is not None
    assert "on Fake0 agree" in stats.device_check and "4 sequences" in stats.device_check
    assert stats.batching_enabled and stats.items_batched == len(PROMPTS)
    assert all(c.ok for c in done)


def test_a_device_that_corrupts_mixed_steps_completes_every_item_alone_with_the_reason(caplog):
    good, _ = run(FakeBackend(), slots=1)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        done, stats = run(FakeBackend(device="Fake0", corrupt_mixed=3.0))
    assert not stats.batching_enabled and stats.items_batched == 0
    reason = stats.batch_disabled_reason
    assert "on Fake0 disagree" in reason and "3.000 nats" in reason and "mixed step" in reason
    assert "flash attention" in reason and "check_device=False" in reason
    assert reason in caplog.text
    assert [c.path for c in done] == ["alone"] * len(PROMPTS)
    assert [c.text for c in done] == [c.text for c in good]  # nothing lost or moved


def test_check_device_false_batches_anyway_and_true_checks_the_host_too():
    _, stats = run(FakeBackend(device="Fake0", corrupt_mixed=3.0), check_device=False)
    assert stats.device_check is None and stats.items_batched == len(PROMPTS)
    _, stats = run(FakeBackend())  # the host: not checked unless asked
    assert stats.device_check is None
    _, stats = run(FakeBackend(corrupt_mixed=3.0), check_device=True)
    assert "on the CPU disagree" in stats.device_check and not stats.batching_enabled


def test_differences_within_the_tolerance_pass():
    _, stats = run(FakeBackend(device="Fake0", corrupt_mixed=PROBE_TOLERANCE / 2))
    assert stats.batching_enabled and "agree" in stats.device_check


def test_a_decode_that_fails_during_the_check_turns_batching_off_not_the_items():
    backend = FakeBackend(device="Fake0", fail_decode_at=2)
    done, stats = run(backend)
    assert all(c.ok and c.path == "alone" for c in done)
    assert "the device check failed to run on Fake0" in stats.batch_disabled_reason


@settings(max_examples=40, deadline=None)
@given(slots=st.integers(2, 9), extra=st.integers(0, 40), n_ctx_seq=st.sampled_from([3, 8, 64]))
def test_the_probe_keeps_llama_cpp_rules_at_any_size(slots, extra, n_ctx_seq):
    """The fake checks every call against llama.cpp's rules (n_batch, positions, seq ids);
    the probe leaves every sequence empty."""
    backend = FakeBackend()
    limits = backend.open(slots, n_ctx_seq, slots + extra)
    check = check_device(backend, limits)
    assert check.ok and check.deviation == 0.0 and check.slots == slots
    assert check.rows == 3 * slots - 1  # prompts, the mixed step, a reply step
    assert backend.kv_lengths == (0,) * slots
    assert not backend.violations


def test_check_device_must_be_a_bool_or_none():
    with pytest.raises(ParameterError, match="check_device"):
        BatchConfig(check_device="yes")
    with pytest.raises(ParameterError, match="check_device"):
        BatchGenerator(backend=FakeBackend(), check_device=1)


def test_items_alone_after_a_failed_check_keep_their_own_sampling():
    sampling = [SamplingParams(temperature=0, max_tokens=k) for k in (1, 2, 3)]
    backend = FakeBackend(device="Fake0", corrupt_mixed=5.0)
    with BatchGenerator(backend=backend, slots=2) as gen:
        done = gen.complete_many(PROMPTS[:3], sampling)
    assert [len(c.token_ids) <= k for c, k in zip(done, (1, 2, 3))] == [True] * 3

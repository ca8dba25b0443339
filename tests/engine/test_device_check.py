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
from llamabatch.engine.device_check import (
    CHECKS,
    PROBE_STEPS,
    PROBE_TOLERANCE,
    check_device,
    check_sampling,
    probe_n_batch,
)
from llamabatch.errors import BatchUnavailable, ParameterError
from llamabatch.testing import FakeBackend
from llamabatch.testing.records import DecodeCall, OpenBatchCall, StartSeqCall

PROMPTS = [f"item {i}" for i in range(10)]
#: Only greedy chains sample on the device (``FakeBackend`` as ``LlamaBackend``).
GREEDY = SamplingParams(temperature=0)


@pytest.fixture(autouse=True)
def no_checks_kept():
    """Each test starts with no device check made earlier in the process."""
    CHECKS.clear()
    yield
    CHECKS.clear()


def run(backend: FakeBackend, **kwargs):
    with BatchGenerator(backend=backend, slots=kwargs.pop("slots", 4), **kwargs) as gen:
        done = gen.complete_many(PROMPTS)
        return done, gen.stats


def test_on_a_device_the_check_runs_by_default_and_a_good_device_batches():
    backend = FakeBackend(device="Fake0")
    done, stats = run(backend)
    opened = backend.calls(OpenBatchCall)  # the batch context, the probe's, a fresh one
    assert len(opened) == 3 and opened[0].limits == opened[2].limits
    assert (opened[1].slots, opened[1].n_batch) == (4, probe_n_batch(4, 512)) == (4, 16)
    assert stats.device_check is not None
    assert "on Fake0 agree" in stats.device_check and "2, 4 sequences" in stats.device_check
    assert stats.batching_enabled and stats.items_batched == len(PROMPTS)
    assert all(c.ok for c in done)


def test_a_device_that_corrupts_mixed_steps_completes_every_item_alone_with_the_reason(caplog):
    good, _ = run(FakeBackend(), slots=1)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        done, stats = run(FakeBackend(device="Fake0", corrupt_mixed=3.0))
    assert not stats.batching_enabled and stats.items_batched == 0
    reason = stats.batch_disabled_reason
    assert "on Fake0 disagree" in reason and "3.000 nats" in reason
    assert "first failed step: mixed step (seq 0, mixed step, 2 sequences)" in reason
    assert "#28537" in reason and "#15006" in reason
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


@pytest.mark.parametrize(
    ("fault", "step", "report"),
    [
        ({"corrupt_long_prefill": 3.0}, "long prefill", "#28211"),
        ({"corrupt_refill": 3.0}, "refill", "#28056"),
    ],
)
def test_each_defect_shape_is_caught_and_named(fault, step, report, caplog):
    """A device wrong only for a prompt past n_ubatch beside other sequences' decode, or
    only for a refill into a slot just emptied: the check names that step, its public
    report and what to try; every item is completed alone, nothing lost or moved."""
    good, _ = run(FakeBackend(), slots=1)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        done, stats = run(FakeBackend(device="Fake0", **fault))
    reason = stats.batch_disabled_reason
    assert reason is not None and f"first failed step: {step} (seq " in reason
    assert (
        report in reason and PROBE_STEPS[[s.name for s in PROBE_STEPS].index(step)].remedy in reason
    )
    assert "mixed step" not in reason.split("first failed step:")[1].split(";")[0]
    assert reason in caplog.text
    assert [c.text for c in done] == [c.text for c in good]
    assert {c.path for c in done} == {"alone"}


def test_the_steps_run_with_2_4_and_all_the_slots():
    backend = FakeBackend()
    limits = backend.open(8, 256, probe_n_batch(8, 512))
    check = check_device(backend, limits)
    assert check.ok and check.counts == (2, 4, 8)
    assert "2, 4, 8 sequences" in check.describe("Fake0")
    long_calls = [
        c for c in backend.calls(DecodeCall)
        if any(len(s.tokens) > 1 and s.pos + len(s.tokens) > limits.n_batch for s in c.spans)
        and any(len(s.tokens) == 1 for s in c.spans)
    ]  # fmt: skip
    assert long_calls  # a prompt past n_batch (= n_ubatch) beside other sequences' steps
    assert not backend.violations


def test_a_check_that_cannot_run_leaves_batching_off_and_says_it_could_not_run():
    """A decode failure inside the check is no verdict on the logits, but they are not
    verified either: every item is completed alone, with that reason."""
    backend = FakeBackend(device="Fake0", fail_decode_at=2)
    done, stats = run(backend)
    assert all(c.ok for c in done)
    assert not stats.batching_enabled and stats.items_batched == 0
    assert "the device check could not run on Fake0" in stats.device_check
    assert "disagree" not in stats.device_check
    assert stats.batch_disabled_reason is not None
    assert "unverified" in stats.batch_disabled_reason
    assert "other logits" not in stats.batch_disabled_reason


def test_a_backend_that_overrides_open_with_three_arguments_still_batches():
    """As tests/gpu_path's SmallDevice: open(slots, n_ctx_seq, n_batch) refusing sizes;
    the probe opens with the same three arguments."""

    class SmallDevice(FakeBackend):
        def open(self, slots, n_ctx_seq, n_batch):
            if slots > 2:
                raise BatchUnavailable(f"cannot hold {slots} sequences (stand-in)")
            return super().open(slots, n_ctx_seq, n_batch)

    done, stats = run(SmallDevice(device="Fake0"), slots=8)
    assert stats.batching_enabled and stats.batch_slots == 2
    assert "on Fake0 agree" in stats.device_check
    assert {c.path for c in done} == {"batch"}


def test_backend_sampling_is_on_only_once_verified():
    """Verified on the probe's context with the generator's own slot count, its chains
    started for the device before that context's first decode."""
    backend = FakeBackend(device="Fake0", backend_sampling=None)
    _, stats = run(backend, slots=3, sampling=GREEDY)
    assert stats.backend_sampling.startswith("on: greedy tokens sampled on the device equal")
    assert "of 3 sequences" in stats.backend_sampling
    assert stats.backend_sampled_rows > 0
    probe = backend.log.index(backend.calls(OpenBatchCall)[1])
    first_decode = next(i for i, c in enumerate(backend.log) if isinstance(c, DecodeCall))
    starts = [c for c in backend.log[probe:first_decode] if isinstance(c, StartSeqCall)]
    assert sorted(c.seq_id for c in starts) == [0, 1, 2]


def test_backend_sampling_that_differs_from_the_host_is_turned_off_not_batching(caplog):
    good, _ = run(FakeBackend(), slots=1)
    backend = FakeBackend(device="Fake0", backend_sampling=None, backend_tokens_differ=True)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        done, stats = run(backend)
    assert stats.backend_sampling.startswith("off: seq 0: greedy on the device sampled")
    assert stats.backend_sampling in caplog.text
    assert stats.batching_enabled and stats.items_batched == len(PROMPTS)
    assert stats.backend_sampled_rows == 0
    assert [c.text for c in done] == [c.text for c in good]


def test_backend_sampling_asked_for_without_the_check_is_on_unverified():
    differ = {"device": "Fake0", "backend_tokens_differ": True}
    _, stats = run(FakeBackend(backend_sampling=None, **differ), check_device=False)
    assert stats.backend_sampling == (
        "on: asked for (backend_sampling=True), not verified: the device check did not run "
        "(check_device=False)"
    )
    assert stats.backend_sampled_rows > 0
    _, stats = run(FakeBackend(backend_sampling=True, **differ), sampling=GREEDY)
    assert stats.backend_sampling.startswith("on: asked for") and stats.backend_sampled_rows
    _, stats = run(FakeBackend(device="Fake0"))  # the host only: nothing to say
    assert stats.backend_sampling is None


def test_check_sampling_attaches_before_the_first_decode_and_leaves_seqs_empty():
    backend = FakeBackend(backend_sampling=None)
    limits = backend.open(3, 64, 16)
    check = check_sampling(backend, limits)
    assert check.ok, check.detail
    first_run = backend.log.index(backend.calls(DecodeCall)[0])
    starts = [c for c in backend.log[:first_run] if isinstance(c, StartSeqCall)]
    assert sorted(c.seq_id for c in starts) == [0, 1, 2]
    assert backend.kv_lengths == (0, 0, 0) and not backend.violations


@settings(max_examples=40, deadline=None)
@given(slots=st.integers(2, 9), extra=st.integers(0, 40), n_ctx_seq=st.sampled_from([3, 8, 64]))
def test_the_probe_keeps_llama_cpp_rules_at_any_size(slots, extra, n_ctx_seq):
    """The fake checks every call against llama.cpp's rules (n_batch, positions, seq ids);
    the probe leaves every sequence empty."""
    backend = FakeBackend()
    limits = backend.open(slots, n_ctx_seq, slots + extra)
    check = check_device(backend, limits)
    assert check.ok and check.deviation == 0.0 and check.slots == slots
    assert check.rows >= 3 * slots - 1  # prompts, the mixed step, a reply step at least
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


def probe_calls(backend: FakeBackend) -> int:
    """Decode calls of the device check: those on the probe's context (``n_batch`` 16)."""
    n_batch = 0
    calls = 0
    for call in backend.log:
        if isinstance(call, OpenBatchCall):
            n_batch = call.n_batch
        elif isinstance(call, DecodeCall) and n_batch == probe_n_batch(4, 512):
            calls += 1
    return calls


def test_a_second_generator_with_the_same_settings_reuses_the_check():
    """The verdict is a fact of the model, device and kernel settings (``compute_key``) and
    the context's size: a second generator on them probes nothing and says it reused it;
    another ``n_batch``, slot count or key checks again."""
    first = FakeBackend(device="Fake0", backend_sampling=None, compute_key="model A")
    _, stats = run(first, sampling=GREEDY)
    assert probe_calls(first) > 0
    again = FakeBackend(device="Fake0", backend_sampling=None, compute_key="model A")
    done, reused = run(again, sampling=GREEDY)
    assert probe_calls(again) == 0 and len(again.calls(OpenBatchCall)) == 1
    assert reused.device_check == stats.device_check + " (the check made earlier in this process)"
    assert reused.backend_sampling == stats.backend_sampling and reused.backend_sampled_rows
    assert reused.batching_enabled and {c.path for c in done} == {"batch"}
    for other, kwargs in [
        ("model A", {"n_batch": 64}),
        ("model A", {"slots": 3}),
        ("model B", {}),
    ]:
        backend = FakeBackend(device="Fake0", compute_key=other)
        _, stats = run(backend, **kwargs)
        assert len(backend.calls(OpenBatchCall)) == 3, (other, kwargs)
        assert not stats.device_check.endswith("earlier in this process)")


def test_backend_sampling_asked_for_after_a_check_without_it_runs_only_the_sampling_check():
    """A verdict on the logits made without backend sampling is reused by a generator that
    asks for it: only the sampling check runs (on the software Vulkan device the whole
    check takes minutes)."""
    first = FakeBackend(device="Fake0", compute_key="model C")
    _, stats = run(first, sampling=GREEDY)
    assert probe_calls(first) > 0 and stats.backend_sampling is None
    asked = FakeBackend(device="Fake0", backend_sampling=None, compute_key="model C")
    done, again = run(asked, sampling=GREEDY)
    assert probe_calls(asked) == 0
    assert again.device_check == stats.device_check + " (the check made earlier in this process)"
    assert again.backend_sampling.startswith("on: greedy tokens sampled on the device equal")
    assert again.backend_sampled_rows and {c.path for c in done} == {"batch"}
    _, third = run(FakeBackend(device="Fake0", backend_sampling=None, compute_key="model C"))
    assert third.backend_sampling == again.backend_sampling  # now kept with the verdict


def test_a_failed_check_is_reused_and_one_that_could_not_run_is_not():
    bad = {"device": "Fake0", "corrupt_refill": 4.0, "compute_key": "bad device"}
    _, stats = run(FakeBackend(**bad))
    backend = FakeBackend(**bad)
    done, again = run(backend)
    assert probe_calls(backend) == 0
    assert again.batch_disabled_reason.startswith(stats.device_check)
    assert "first failed step: refill" in again.batch_disabled_reason
    assert [c.path for c in done] == ["alone"] * len(PROMPTS)
    broken = {"device": "Fake0", "compute_key": "flaky", "fail_decode_at": 1, "fail_code": -3}
    _, stats = run(FakeBackend(**broken))
    assert "could not run" in stats.device_check
    backend = FakeBackend(device="Fake0", compute_key="flaky")
    _, stats = run(backend)
    assert probe_calls(backend) > 0 and "agree" in stats.device_check


def test_backend_sampling_a_backend_turns_off_says_why_and_batches():
    """As ``LlamaBackend`` on a Vulkan device: no check of sampling, the reason in
    ``Stats.backend_sampling``, batching on."""
    backend = FakeBackend(
        device="Fake0", backend_sampling=False, backend_sampling_off="chains changed crash"
    )
    done, stats = run(backend, sampling=GREEDY)
    assert stats.backend_sampling == "off: chains changed crash"
    assert stats.backend_sampled_rows == 0
    assert stats.batching_enabled and {c.path for c in done} == {"batch"}

"""Property tests of the slot engine on the fake backend.

The reference for every item is :meth:`FakeBackend.expected`: the fake's reply to that
prompt alone under the stop rule. The fake computes a reply from what the slot's cache
really holds at the first logits, so an item fed after a wrong cache (a bad reuse, a
bad copy, a trim a recurrent memory refused) gets another reply and fails here. The
checks live in :mod:`llamabatch.testing.checks`, the state machine in
:mod:`llamabatch.testing.machine`. The hypothesis profile (``ci``/``dev``) is chosen in
``conftest.py``.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch import SamplingParams
from llamabatch.testing import (
    BACKEND_EXCEPTIONS,
    DECODE_FAULT_CODES,
    ClearCall,
    DecodeCall,
    FailWhen,
    FakeBackend,
    FaultPlan,
    HashReply,
    OpenBatchCall,
    StartSeqCall,
    fake_backends,
    fault_plans,
    prefixed_prompts,
    prompts,
)
from llamabatch.testing.checks import Case, check_batched, check_log, check_pages, run_case
from llamabatch.testing.machine import SlotEngineMachine

ALONE_FAULTS = st.builds(
    FaultPlan, fail_alone=st.none() | st.builds(FailWhen, st.integers(2, 7), st.integers(0, 1))
)
NO_FAULTS = st.just(FaultPlan())


def share(k: int) -> settings:
    """1/k of the profile's examples, for the costlier or narrower properties (keeps
    the ci profile's total near a minute on 2 cores)."""
    return settings(max_examples=max(10, settings.default.max_examples // k))


@st.composite
def cases(draw, faults=fault_plans(), min_slots=1, max_items=60, per_item=False):
    """A :class:`Case`: slots 1-8, n_ctx_seq 1-256, n_batch 1-64, max_tokens 1-30,
    prompts with shared prefixes or arbitrary ones (garbage included)."""
    max_tokens = draw(st.integers(1, 6) | st.integers(1, 30))
    fake = draw(fake_backends(faults=faults, max_tokens=None if per_item else max_tokens))
    slots = draw(st.integers(min_slots, 8))
    if draw(st.booleans()):
        items = draw(prefixed_prompts(max_items=max_items, n_vocab=fake.n_vocab))
    else:
        max_len = draw(st.sampled_from([4, 16, 60]))
        min_items = min(max_items, draw(st.sampled_from([0, 0, 10, 40])))
        items = draw(
            prompts(min_items=min_items, max_items=max_items, max_len=max_len, n_vocab=fake.n_vocab)
        )
    sampling = None
    if per_item:
        sampling = tuple(
            draw(
                st.lists(
                    st.builds(
                        SamplingParams,
                        temperature=st.just(0.0),
                        max_tokens=st.none() | st.integers(1, 40),
                    ),
                    min_size=len(items),
                    max_size=len(items),
                )
            )
        )
    return Case(
        fake,
        items,
        slots,
        draw(st.integers(1, 32) | st.integers(32, 256)),
        draw(st.integers(1, 64)),
        max_tokens,
        draw(st.none() | st.integers(1, 4).map(lambda k: k * slots)),
        draw(st.sampled_from([1, 2, 8, 32])),
        sampling,
    )


@share(2)
@given(cases(faults=ALONE_FAULTS))
def test_results_in_order_match_the_reply_alone(case: Case) -> None:
    """One result per input, in pages in order, the reply alone or an error in place,
    whichever slot and cache each item got."""
    result = run_case(case)
    check_pages(case, result)
    check_log(case)
    check_batched(case, result)


@given(cases(faults=fault_plans()))
def test_decode_plans_follow_llama_cpp_rules_whatever_fails(case: Case) -> None:
    """n_batch, seq ids, positions continuing each cache, logits placement, under decode
    codes, backend exceptions, failed copies, failures alone and recurrent memories."""
    result = run_case(case)
    check_pages(case, result)
    check_log(case)
    check_batched(case, result)


@share(3)
@given(cases(faults=ALONE_FAULTS, per_item=True))
def test_per_item_sampling_and_max_tokens(case: Case) -> None:
    """Each item is started with its own SamplingParams and capped by its max_tokens."""
    result = run_case(case)
    check_pages(case, result)
    check_log(case)
    started = [s.sampling for s in case.fake.seqs() if s.prompt_end is not None]
    assert set(started) <= set(case.sampling)


@given(cases(faults=NO_FAULTS, min_slots=2), st.data())
def test_a_failure_in_the_batch_path_completes_the_items_alone(case: Case, data) -> None:
    """With ``max_batch_failures=1``, after a failed decode (any code or exception): the
    same results, the items in flight and after it alone, every cache emptied at once,
    batching off, one warning."""
    clean = run_case(case)
    n_decodes = case.fake.num_decode_calls
    at = data.draw(st.integers(1, max(n_decodes, 1)), label="fail_decode_at")
    code = data.draw(st.sampled_from(DECODE_FAULT_CODES), label="fail_code")
    exc = data.draw(st.sampled_from((None,) + BACKEND_EXCEPTIONS), label="fail_exc")
    faulty = replace(
        case,
        fake=case.fake.copy(fail_decode_at=at, fail_code=code, fail_exc=exc),
        max_batch_failures=1,
    )
    result = run_case(faulty)
    check_pages(faulty, result)
    check_log(faulty)
    assert [(c.token_ids, c.finish_reason, c.text, c.error) for c in result.completions] == [
        (c.token_ids, c.finish_reason, c.text, c.error) for c in clean.completions
    ]
    if n_decodes == 0:
        return
    fake = faulty.fake
    decodes = fake.calls(DecodeCall)
    assert decodes[-1].call == at and decodes[-1].error_code is not None, "decoded again"
    after = fake.log[fake.log.index(decodes[-1]) + 1 :]
    assert not [c for c in after if isinstance(c, StartSeqCall)]
    assert isinstance(after[0], ClearCall)
    assert fake.kv_lengths == (0,) * len(fake.kv_lengths)
    reason = result.generator.stats.batch_disabled_reason
    assert reason is not None
    assert (type(exc).__name__ if exc is not None else str(code)) in reason
    assert result.n_warnings == 1


@share(3)
@given(cases(faults=NO_FAULTS, min_slots=2))
def test_batch_unavailable_completes_everything_alone(case: Case) -> None:
    """The batch context cannot be created: all alone, same results; tried smaller
    (fewer slots, then shorter sequences) at one time only, never below 2 slots."""
    faulty = replace(case, fake=case.fake.copy(fail_open=True))
    result = run_case(faulty)
    check_pages(faulty, result)
    opens = faulty.fake.calls(OpenBatchCall)
    assert [(c.slots, c.n_ctx_seq) for c in opens[:1]] == [(case.slots, case.n_ctx_seq)][
        : len(opens)
    ]
    assert all(c.slots >= 2 and c.n_ctx_seq <= case.n_ctx_seq for c in opens)
    assert len(set((c.slots, c.n_ctx_seq) for c in opens)) == len(opens)
    assert all(c.path == "alone" for c in result.completions)
    if opens:
        assert result.generator.stats.batch_disabled_reason is not None
        assert result.n_warnings == 1
    assert not faulty.fake.calls(StartSeqCall)


@share(4)
@given(cases(faults=NO_FAULTS, min_slots=2))
def test_a_recurrent_memory_gives_the_same_replies(case: Case) -> None:
    """A reply never depends on which cache it came from: the same case on a memory
    that refuses partial trims (declared or found out) gives the same completions."""
    plain = run_case(replace(case, fake=case.fake.copy(recurrent=False)))
    for declares in (True, False):
        fake = case.fake.copy(recurrent=True, declares_recurrent=declares)
        other = replace(case, fake=fake)
        result = run_case(other)
        check_pages(other, result)
        check_log(other)
        assert [(c.token_ids, c.finish_reason) for c in result.completions] == [
            (c.token_ids, c.finish_reason) for c in plain.completions
        ]


@share(3)
@given(st.data())
def test_long_prompts_go_alone_in_place(data) -> None:
    """Prompts that cannot fit their sequence keep their places; the others batch."""
    slots = data.draw(st.integers(2, 8), label="slots")
    max_tokens = data.draw(st.integers(1, 20), label="max_tokens")
    n_ctx_seq = data.draw(st.integers(max_tokens + 1, 64), label="n_ctx_seq")
    short = st.lists(st.integers(0, 255), min_size=1, max_size=n_ctx_seq - max_tokens)
    long = st.lists(st.integers(0, 255), min_size=n_ctx_seq - max_tokens + 1, max_size=120)
    n_items = data.draw(st.integers(1, 3 * slots + 1), label="n_items")
    items = data.draw(st.lists(short | long, min_size=n_items, max_size=n_items), label="prompts")
    fake = FakeBackend(
        HashReply(data.draw(st.integers(0, 99)), 30, 260, (256,)), max_tokens=max_tokens
    )
    case = Case(fake, items, slots, n_ctx_seq, 64, max_tokens)
    result = run_case(case)
    check_pages(case, result)
    for prompt, c in zip(items, result.completions):
        if len(prompt) + max_tokens > n_ctx_seq:
            assert c.path == "alone" and c.ok


@share(2)
@given(cases(faults=ALONE_FAULTS), st.integers(0, 12))
def test_closing_iter_groups_loses_and_repeats_nothing(case: Case, n_pages: int) -> None:
    """Stop after some pages: those items are done once, the rest can be resumed on the
    same generator (its slots keep their caches)."""
    first = run_case(case, stop_after=n_pages)
    done = first.completions
    assert [c.index for c in done] == list(range(len(done)))
    assert len(done) == min(len(case.prompts), n_pages * case.slots)
    stats = first.generator.stats
    assert stats.items_alone + stats.items_batched == len(done), "counted beyond the stop"
    check_pages(case, first, complete=False)
    check_log(case)
    rest = case.prompts[len(done) :]
    second = run_case(case, rest, gen=first.generator)
    check_pages(case, second, rest)
    check_log(case)


TestSlotEngineMachine = SlotEngineMachine.TestCase
TestSlotEngineMachine.settings = settings(max_examples=max(10, settings.default.max_examples // 3))


@given(cases(faults=NO_FAULTS, min_slots=2), st.data())
def test_failures_in_the_batch_path_are_isolated(case: Case, data) -> None:
    """Any failed decodes (codes or exceptions) with the default max_batch_failures: the
    same results in input order, the items in flight retried alone, batching on while
    fewer than three failures came at all, off with one warning at most."""
    clean = run_case(case)
    n_decodes = case.fake.num_decode_calls
    at = data.draw(
        st.frozensets(st.integers(1, max(n_decodes, 1) + 3), min_size=1, max_size=5),
        label="fail_decode_at",
    )
    code = data.draw(st.sampled_from(DECODE_FAULT_CODES), label="fail_code")
    exc = data.draw(st.sampled_from((None,) + BACKEND_EXCEPTIONS), label="fail_exc")
    faulty = replace(case, fake=case.fake.copy(fail_decode_at=at, fail_code=code, fail_exc=exc))
    result = run_case(faulty)
    check_pages(faulty, result)
    check_log(faulty)
    assert [(c.token_ids, c.finish_reason, c.text, c.error) for c in result.completions] == [
        (c.token_ids, c.finish_reason, c.text, c.error) for c in clean.completions
    ]
    stats = result.generator.stats
    failed = [d for d in faulty.fake.calls(DecodeCall) if d.error_code is not None]
    assert stats.batch_failures == len(failed)
    if len(failed) < 3:
        assert stats.batching_enabled
    assert result.n_warnings <= 1
    assert faulty.fake.violations == []

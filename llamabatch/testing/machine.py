"""A hypothesis state machine of one :class:`~llamabatch.BatchGenerator` over its life, for
programs to run against their own settings::

    from llamabatch.testing.machine import SlotEngineMachine
    TestSlotEngine = SlotEngineMachine.TestCase

Items (shared prefixes, repeats, garbage) are added and run page by page, faults are
injected, and the invariants are checked after every step. Importing it imports hypothesis."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from .checks import Case, check_batched, check_log, check_pages, run_case, tokens_or_none
from .faults import BACKEND_EXCEPTIONS, DECODE_FAULT_CODES, FaultPlan
from .records import DecodeCall, StartSeqCall
from .strategies import fake_backends, prefixed_prompts, prompts


@st.composite
def machine_cases(draw) -> Case:
    """A :class:`Case` without prompts: slots 1-6, small contexts and batches."""
    max_tokens = draw(st.integers(1, 8) | st.integers(1, 24))
    fake = draw(fake_backends(faults=st.just(FaultPlan()), max_tokens=max_tokens))
    slots = draw(st.integers(1, 6))
    return Case(
        replace_fail_alone(fake),
        [],
        slots,
        draw(st.integers(8, 64) | st.integers(64, 256)),
        draw(st.integers(1, 48)),
        max_tokens,
        draw(st.none() | st.integers(1, 3).map(lambda k: k * slots)),
        draw(st.sampled_from([1, 4, 32])),
    )


def replace_fail_alone(fake):
    """A copy of ``fake`` whose ``fail_alone`` is a set the machine can grow."""
    return fake.copy(fail_alone=set())


class SlotEngineMachine(RuleBasedStateMachine):
    """One generator over its life on a :class:`~llamabatch.testing.FakeBackend`."""

    @initialize(case=machine_cases())
    def start(self, case: Case) -> None:
        self.case = case
        self.gen = case.generator()
        self.pending: list = []
        self.n_done = 0
        self.n_failed = 0
        self.n_warnings = 0
        self.n_starts_when_disabled: int | None = None

    @rule(items=prompts(max_items=8, max_len=24))
    def add_items(self, items: list) -> None:
        self.pending.extend(items)

    @rule(items=prefixed_prompts(max_items=10, max_prefix=40, max_suffix=12))
    def add_items_with_shared_prefixes(self, items: list) -> None:
        self.pending.extend(items)

    @precondition(lambda self: self.pending)
    @rule(n_pages=st.integers(1, 4))
    def run_pages(self, n_pages: int) -> None:
        case = replace(self.case, prompts=self.pending)
        result = run_case(case, stop_after=n_pages, gen=self.gen)
        check_pages(case, result, complete=False)
        check_log(case)
        check_batched(case, result)
        done = len(result.completions)
        self.n_done += done
        self.n_failed += sum(not c.ok for c in result.completions)
        self.pending = self.pending[done:]
        self.n_warnings += result.n_warnings
        assert self.n_warnings <= 1, "batching turned off more than once"

    @rule(
        k=st.integers(1, 8),
        code=st.sampled_from(DECODE_FAULT_CODES),
        exc=st.sampled_from((None, None) + BACKEND_EXCEPTIONS),
    )
    def inject_decode_fault(self, k: int, code: int, exc) -> None:
        fake = self.case.fake
        fake.fail_decode_at, fake.fail_code, fake.fail_exc = fake.num_decode_calls + k, code, exc

    @rule(k=st.integers(1, 3))
    def inject_copy_fault(self, k: int) -> None:
        self.case.fake.fail_copy_at = self.case.fake.num_copies + k

    @rule(k=st.integers(1, 3))
    def inject_state_fault(self, k: int) -> None:
        self.case.fake.fail_state_at = self.case.fake.num_states + k

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def make_an_item_fail_alone(self, data) -> None:
        prompt = data.draw(st.sampled_from(self.pending))
        tokens = tokens_or_none(self.case.fake, prompt)
        if tokens is not None:
            self.case.fake.fail_alone.add(tokens)

    @invariant()
    def no_violation(self) -> None:
        assert self.case.fake.violations == []

    @invariant()
    def caches_are_empty_or_known(self) -> None:
        """After a failure every cache was emptied."""
        if not self.gen.stats.batching_enabled and self.case.fake.limits is not None:
            assert self.case.fake.kv_lengths == (0,) * len(self.case.fake.kv_lengths)

    @invariant()
    def batch_path_never_used_once_disabled(self) -> None:
        n_starts = len(self.case.fake.calls(StartSeqCall))
        if self.gen.stats.batching_enabled:
            assert self.n_starts_when_disabled is None
        elif self.n_starts_when_disabled is None:
            self.n_starts_when_disabled = n_starts
        else:
            assert n_starts == self.n_starts_when_disabled

    @invariant()
    def stats_count_every_item_once(self) -> None:
        stats = self.gen.stats
        note(f"stats: {stats}")
        assert stats.items_alone + stats.items_batched == self.n_done
        assert stats.items_failed == self.n_failed
        decodes = self.case.fake.calls(DecodeCall)
        assert stats.decode_calls == sum(d.error_code is None for d in decodes)

    def teardown(self) -> None:
        if hasattr(self, "gen"):
            self.gen.close()

"""Property tests of the scheduler on the fake backend (issue 3, properties 1-7).

The reference for every item is :meth:`FakeBackend.expected`: the fake's reply to that
prompt alone under the stop rule. Groups are read back through ``iter_groups`` with
``stats.batching_enabled`` sampled around each group, which tells which path each item
must have taken. The hypothesis profile (``ci``/``dev``) is chosen in ``conftest.py``.
"""

from __future__ import annotations

import itertools
import logging
from contextlib import contextmanager
from dataclasses import dataclass, replace

from hypothesis import event, given, note, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant,
                                 precondition, rule)

from llamabatch import BatchGenerator, Completion
from llamabatch.testing import (DECODE_FAULT_CODES, ClearCall, DecodeCall, FailWhen,
                                FakeBackend, FaultPlan, HashReply, OpenBatchCall,
                                StartGroupCall, fake_backends, fault_plans, prompts)

ALONE_FAULTS = st.builds(FaultPlan, fail_alone=st.none() | st.builds(
    FailWhen, st.integers(2, 7), st.integers(0, 1)))
NO_FAULTS = st.just(FaultPlan())


# -- cases and runs ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Case:
    """One generator configuration on one fake, and its input."""

    fake: FakeBackend
    prompts: list
    slots: int
    n_ctx_seq: int
    n_batch: int
    max_tokens: int
    page_size: int | None

    def generator(self) -> BatchGenerator:
        return BatchGenerator(backend=self.fake, slots=self.slots, n_ctx_seq=self.n_ctx_seq,
                              n_batch=self.n_batch, max_tokens=self.max_tokens,
                              page_size=self.page_size)


@st.composite
def cases(draw, faults=fault_plans(), min_slots=1, max_items=100):
    """A :class:`Case`: slots 1-8, n_ctx_seq 1-256, n_batch 1-64, max_tokens 1-30."""
    max_tokens = draw(st.integers(1, 6) | st.integers(1, 30))
    fake = draw(fake_backends(faults=faults, max_tokens=max_tokens))
    slots = draw(st.integers(min_slots, 8))
    max_len = draw(st.sampled_from([4, 16, 60]))
    min_items = min(max_items, draw(st.sampled_from([0, 0, 10, 40])))
    items = draw(prompts(min_items=min_items, max_items=max_items, max_len=max_len,
                         n_vocab=fake.n_vocab))
    return Case(fake, items, slots, draw(st.integers(1, 32) | st.integers(32, 256)),
                draw(st.integers(1, 64)), max_tokens,
                draw(st.none() | st.integers(1, 4).map(lambda k: k * slots)))


@dataclass(slots=True)
class Run:
    """What a run gave: groups, batching on before/after each group, warnings logged."""

    groups: list[list[Completion]]
    flags: list[tuple[bool, bool]]
    n_warnings: int
    generator: BatchGenerator


@contextmanager
def counting_warnings():
    """Count the "batching turned off" WARNING records of the ``llamabatch`` logger (not
    the once-per-reason notes on items sent alone, ``stats.alone_reasons``)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.addFilter(lambda record: "batching turned off" in record.getMessage())
    handler.emit = records.append
    logger = logging.getLogger("llamabatch")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def run(case: Case, prompts_=None, stop_after: int | None = None,
        gen: BatchGenerator | None = None) -> Run:
    gen = case.generator() if gen is None else gen
    items = case.prompts if prompts_ is None else prompts_
    out = Run([], [], 0, gen)
    with counting_warnings() as records:
        before = gen.stats.batching_enabled
        groups = gen.iter_groups(items)
        for group in itertools.islice(groups, stop_after):
            after = gen.stats.batching_enabled
            out.groups.append(group)
            out.flags.append((before, after))
            before = after
        groups.close()
    out.n_warnings = len(records)
    n_batched = sum(c.path == "batch" for g in out.groups for c in g)
    event(f"items batched: {'0' if not n_batched else '<10' if n_batched < 10 else '>=10'}")
    event(f"batching off: {gen.stats.batch_disabled_reason is not None}")
    return out


# -- checks --------------------------------------------------------------------------
def tokens_or_none(fake: FakeBackend, prompt: object):
    try:
        return fake.prompt_tokens(prompt)
    except ValueError:
        return None


def check_item(case: Case, prompt: object, c: Completion) -> None:
    """Property 1 and 4 for one item: the reference reply alone, or an error."""
    fake = case.fake
    tokens = tokens_or_none(fake, prompt)
    note(f"item {c.index}: {prompt!r} -> {c}")
    if tokens is None or (c.path == "alone" and fake.fails_alone(tokens)):
        assert (c.finish_reason, c.path, c.token_ids, c.text) == ("error", "alone", (), "")
        assert c.error
        return
    exp = fake.expected(prompt, case.max_tokens)
    assert (c.token_ids, c.finish_reason, c.text, c.error) == (
        exp.token_ids, exp.finish_reason, exp.text, None)
    assert c.n_prompt_tokens == len(tokens)
    assert len(c.token_ids) <= case.max_tokens
    assert not fake.eog_ids & set(c.token_ids)


def expected_paths(case: Case, items: list, before: bool, after: bool) -> list[str]:
    """Which path each item of a group must take (property 6)."""
    if not (before and after) or len(items) < 2:
        return ["alone"] * len(items)
    n_ctx_seq = case.fake.limits.n_ctx_seq
    fits = [(t := tokens_or_none(case.fake, p)) is not None
            and len(t) + case.max_tokens <= n_ctx_seq for p in items]
    if sum(fits) < 2:
        return ["alone"] * len(items)
    return ["batch" if f else "alone" for f in fits]


def check_results(case: Case, result: Run, items: list | None = None,
                  complete: bool = True) -> None:
    """Properties 1, 4, 6: order, one result per input, reference replies, paths."""
    items = case.prompts if items is None else items
    start = 0
    for group, (before, after) in zip(result.groups, result.flags):
        assert before or not after, "batching was turned back on"
        assert len(group) == min(case.slots, len(items) - start)
        assert [c.index for c in group] == list(range(start, start + len(group)))
        part = items[start:start + len(group)]
        assert [c.path for c in group] == expected_paths(case, part, before, after)
        for prompt, c in zip(part, group):
            check_item(case, prompt, c)
        start += len(group)
    if complete:
        assert start == len(items)


def check_plan(case: Case) -> None:
    """Property 2 and 3 on the log: n_batch, seq ids, positions, finished sequences."""
    fake = case.fake
    assert fake.violations == []
    assert fake.kv_lengths == (0,) * len(fake.kv_lengths)
    pos: dict[int, int] = {}
    n_seqs = 0
    for call in fake.log:
        if isinstance(call, StartGroupCall):
            assert 2 <= call.n_seqs <= case.slots
            assert call.kv_before == (0,) * len(call.kv_before), "KV not empty at start"
            n_seqs, pos = call.n_seqs, {}
        elif isinstance(call, DecodeCall):
            assert 0 < call.n_tokens <= fake.limits.n_batch
            for span in call.spans:
                assert 0 <= span.seq_id < n_seqs
                assert span.pos == pos.get(span.seq_id, 0)
                pos[span.seq_id] = span.pos + len(span.tokens)
        elif isinstance(call, ClearCall):
            n_seqs, pos = 0, {}
    for group in fake.groups():
        assert group.cleared
        if group.error_code is not None:
            continue
        for prompt, out, end in zip(group.prompts, group.outputs, group.prompt_ends):
            budget = min(case.max_tokens, fake.n_ctx - len(prompt))
            assert end is not None and out, "a sequence never sampled"
            assert not fake.eog_ids & set(out[:-1]), "decoded after an EOG"
            assert len(out) - (out[-1] in fake.eog_ids) <= budget
            assert out[-1] in fake.eog_ids or len(out) == budget, "stopped early"


def check_batched_prompts(case: Case, result: Run) -> None:
    """Property 3: each group's sequences are its batched items in input order, fed
    exactly their prompt before the first logits, sampling their reply from there."""
    batched = [[c for c in g if c.path == "batch"] for g in result.groups]
    batched = [g for g in batched if g]
    logged = [g for g in case.fake.groups() if g.error_code is None]
    assert len(batched) == len(logged)
    for completions, group in zip(batched, logged):
        assert group.n_seqs == len(completions)
        for c, prompt, out in zip(completions, group.prompts, group.outputs):
            assert prompt == case.fake.prompt_tokens(case.prompts[c.index])
            assert out[:len(c.token_ids)] == c.token_ids


# -- properties ----------------------------------------------------------------------
@given(cases(faults=ALONE_FAULTS))
def test_results_in_order_match_the_reply_alone(case: Case) -> None:
    """1, 4, 6: one result per input, in order, the reply alone or an error in place."""
    result = run(case)
    check_results(case, result)
    check_plan(case)


@given(cases(faults=fault_plans()))
def test_decode_plans_follow_llama_cpp_rules(case: Case) -> None:
    """2, 3: n_batch, seq ids, positions, logits placement, whatever faults happen."""
    result = run(case)
    check_results(case, result)
    check_plan(case)
    check_batched_prompts(case, result)


@given(cases(faults=NO_FAULTS, min_slots=2), st.data())
def test_decode_failure_completes_the_group_alone(case: Case, data) -> None:
    """5: after a failed decode, same results alone, batching off for good, one warning."""
    clean = run(case)
    n_decodes = case.fake.num_decode_calls
    at = data.draw(st.integers(1, max(n_decodes, 1)), label="fail_decode_at")
    code = data.draw(st.sampled_from(DECODE_FAULT_CODES), label="fail_code")
    faulty = replace(case, fake=case.fake.copy(fail_decode_at=at, fail_code=code))
    result = run(faulty)
    check_results(faulty, result)
    check_plan(faulty)
    flat = [c for g in result.groups for c in g]
    assert [(c.token_ids, c.finish_reason, c.text, c.error) for c in flat] == [
        (c.token_ids, c.finish_reason, c.text, c.error) for g in clean.groups for c in g]
    if n_decodes == 0:
        return
    fake = faulty.fake
    decodes = fake.calls(DecodeCall)
    assert decodes[-1].call == at and decodes[-1].error_code == code, "decoded again"
    after_failure = fake.log[fake.log.index(decodes[-1]) + 1:]
    assert not [c for c in after_failure if isinstance(c, StartGroupCall)]
    assert isinstance(after_failure[0], ClearCall)
    reason = result.generator.stats.batch_disabled_reason
    assert reason is not None and str(code) in reason
    assert result.n_warnings == 1


@given(cases(faults=NO_FAULTS, min_slots=2))
def test_batch_unavailable_completes_everything_alone(case: Case) -> None:
    """5: the batch context cannot be created: all alone, same results, tried once."""
    faulty = replace(case, fake=case.fake.copy(fail_open=True))
    result = run(faulty)
    check_results(faulty, result)
    opens = faulty.fake.calls(OpenBatchCall)
    assert len(opens) <= 1
    assert all(c.path == "alone" for g in result.groups for c in g)
    if opens:
        assert result.generator.stats.batch_disabled_reason is not None
        assert result.n_warnings == 1
    assert not faulty.fake.calls(StartGroupCall)


@given(st.data())
def test_lone_last_item_and_long_prompts_go_alone_in_place(data) -> None:
    """6: a group of one and prompts that cannot fit their sequence keep their places."""
    slots = data.draw(st.integers(2, 8), label="slots")
    max_tokens = data.draw(st.integers(1, 20), label="max_tokens")
    n_ctx_seq = data.draw(st.integers(max_tokens + 1, 64), label="n_ctx_seq")
    short = st.lists(st.integers(0, 255), min_size=1, max_size=n_ctx_seq - max_tokens)
    long = st.lists(st.integers(0, 255), min_size=n_ctx_seq - max_tokens + 1, max_size=120)
    n_items = slots * data.draw(st.integers(1, 3), label="full groups") + 1
    items = data.draw(st.lists(short | long, min_size=n_items, max_size=n_items),
                      label="prompts")
    fake = FakeBackend(HashReply(data.draw(st.integers(0, 99)), 30, 260, (256,)),
                       max_tokens=max_tokens)
    case = Case(fake, items, slots, n_ctx_seq, 64, max_tokens, None)
    result = run(case)
    check_results(case, result)
    assert result.groups[-1][-1].path == "alone"
    for prompt, c in zip(items, (c for g in result.groups for c in g)):
        if len(prompt) + max_tokens > n_ctx_seq:
            assert c.path == "alone" and c.ok


@given(cases(faults=ALONE_FAULTS), st.integers(0, 30))
def test_closing_iter_groups_loses_and_repeats_nothing(case: Case, n_groups: int) -> None:
    """7: stop after some groups; those items are done once, the rest can be resumed."""
    first = run(case, stop_after=n_groups)
    done = [c for g in first.groups for c in g]
    assert [c.index for c in done] == list(range(len(done)))
    assert len(done) == min(len(case.prompts), n_groups * case.slots)
    stats = first.generator.stats
    assert stats.items_alone + stats.items_batched == len(done), "work beyond the stop"
    check_results(case, first, complete=False)
    check_plan(case)
    rest = case.prompts[len(done):]
    second = run(case, rest, gen=first.generator)
    check_results(case, second, rest)
    check_plan(case)


# -- the stateful machine ------------------------------------------------------------
class SchedulerMachine(RuleBasedStateMachine):
    """One generator over its life: items are added, groups run (and stopped), decode
    and alone faults injected; every invariant is checked after every step."""

    @initialize(case=cases(faults=NO_FAULTS, max_items=0))
    def start(self, case: Case) -> None:
        self.case = replace(case, fake=case.fake.copy(fail_alone=set()))
        self.gen = self.case.generator()
        self.pending: list = []
        self.n_done = 0
        self.n_failed = 0
        self.n_warnings = 0
        self.n_starts_when_disabled: int | None = None

    @rule(items=prompts(max_items=12, max_len=24))
    def add_items(self, items: list) -> None:
        self.pending.extend(items)

    @precondition(lambda self: self.pending)
    @rule(n_groups=st.integers(1, 4))
    def run_groups(self, n_groups: int) -> None:
        result = run(self.case, self.pending, stop_after=n_groups, gen=self.gen)
        check_results(self.case, result, self.pending, complete=False)
        done = sum(len(g) for g in result.groups)
        self.n_done += done
        self.n_failed += sum(not c.ok for g in result.groups for c in g)
        self.pending = self.pending[done:]
        self.n_warnings += result.n_warnings
        assert self.n_warnings <= 1, "batching turned off more than once"

    @rule(k=st.integers(1, 8), code=st.sampled_from(DECODE_FAULT_CODES))
    def inject_decode_fault(self, k: int, code: int) -> None:
        self.case.fake.fail_decode_at = self.case.fake.num_decode_calls + k
        self.case.fake.fail_code = code

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def make_an_item_fail_alone(self, data) -> None:
        prompt = data.draw(st.sampled_from(self.pending))
        tokens = tokens_or_none(self.case.fake, prompt)
        if tokens is not None:
            self.case.fake.fail_alone.add(tokens)

    @invariant()
    def no_violation_and_empty_kv_between_groups(self) -> None:
        fake = self.case.fake
        assert fake.violations == []
        assert fake.kv_lengths == (0,) * len(fake.kv_lengths)

    @invariant()
    def batch_path_never_used_once_disabled(self) -> None:
        n_starts = len(self.case.fake.calls(StartGroupCall))
        if self.gen.stats.batching_enabled:
            assert self.n_starts_when_disabled is None
        elif self.n_starts_when_disabled is None:
            self.n_starts_when_disabled = n_starts
        else:
            assert n_starts == self.n_starts_when_disabled

    @invariant()
    def stats_count_every_item_once(self) -> None:
        stats = self.gen.stats
        assert stats.items_alone + stats.items_batched == self.n_done
        assert stats.items_failed == self.n_failed
        decodes = self.case.fake.calls(DecodeCall)
        assert stats.decode_calls == sum(d.error_code is None for d in decodes)

    def teardown(self) -> None:
        if hasattr(self, "gen"):
            self.gen.close()


TestSchedulerMachine = SchedulerMachine.TestCase

"""Examples of the slot engine on the fake backend: cache reuse, prefix copies, refill,
recurrent memories, per-item sampling, pages. The broad properties are in
test_scheduler_properties.py."""

from __future__ import annotations

import numpy as np
import pytest

from llamabatch import BatchConfig, BatchGenerator, SamplingParams
from llamabatch.engine.step import Span
from llamabatch.errors import GeneratorBusy
from llamabatch.testing import CopyCall, DecodeCall, FakeBackend, HashReply, StartSeqCall, TrimCall

SYSTEM = list(range(1, 41))  # a 40-token shared "system prompt"
REPLY = HashReply(seed=5, max_len=6, n_vocab=260)


def prompts(n: int, head=SYSTEM) -> list[list[int]]:
    return [head + [100 + k, 200 + k] for k in range(n)]


def expected(fake: FakeBackend, items, max_tokens=8):
    return [fake.expected(p, max_tokens).token_ids for p in items]


def test_a_slot_reuses_the_prefix_it_holds_and_prefills_only_the_rest():
    fake = FakeBackend(REPLY)
    items = prompts(6)
    with BatchGenerator(backend=fake, slots=2, max_tokens=8, min_copy_tokens=64) as gen:
        out = gen.complete_many(items)
        stats = gen.stats
    assert [c.token_ids for c in out] == expected(fake, items)
    seqs = fake.seqs()
    assert [len(s.cached) for s in seqs[:2]] == [0, 0]  # first fill: cold
    assert all(len(s.cached) == 40 for s in seqs[2:])  # then the system prompt
    assert stats.prompt_tokens_cached == 4 * 40
    assert stats.prompt_tokens_prefilled == 2 * 42 + 4 * 2
    assert [c.n_keep for c in fake.calls(TrimCall)] == [40] * 4  # cut after the prefix


def test_a_prefix_shared_by_waiting_items_is_prefilled_once_and_copied():
    fake = FakeBackend(REPLY)
    items = prompts(4)
    with BatchGenerator(
        backend=fake, slots=4, max_tokens=8, n_batch=512, min_copy_tokens=16
    ) as gen:
        out = gen.complete_many(items)
        stats = gen.stats
    assert [c.token_ids for c in out] == expected(fake, items)
    copies = fake.calls(CopyCall)
    assert [(c.src, c.dst) for c in copies] == [(0, 1), (0, 2), (0, 3)]
    assert stats.prefix_copies == 3
    assert stats.prompt_tokens_prefilled == 42 + 3 * 2  # the prefix once
    first = fake.calls(DecodeCall)[0]
    assert [(s.seq_id, len(s.tokens)) for s in first.spans] == [(0, 42)]


def test_a_finished_sequence_is_refilled_in_the_same_decode_as_the_others_steps():
    fake = FakeBackend({(1, 2): [7], (3, 4): [7, 7, 7, 7, 7], (5, 6): [9, 9]})
    with BatchGenerator(backend=fake, slots=2, max_tokens=8) as gen:
        gen.complete_many([[1, 2], [3, 4], [5, 6]])
    decodes = fake.calls(DecodeCall)
    # call 2: seq 0 decodes 7 and samples the EOG; seq 1 decodes its 7
    # call 3: seq 1 decodes, and the third item's prompt goes to the free seq 0
    # (spans by seq id)
    assert [(s.seq_id, s.tokens) for s in decodes[2].spans] == [(0, (5, 6)), (1, (7,))]
    starts = fake.calls(StartSeqCall)
    assert [s.seq_id for s in starts] == [0, 1, 0]


def test_every_decode_lays_its_spans_out_by_seq_id_so_llama_cpp_makes_one_ubatch():
    # Replies of different lengths refill the slots in a rotating order (seq 2 first,
    # then 3, 0, 1, ...); llama.cpp's non-unified cache makes one ubatch only of
    # sequences in consecutive id order, so each step of four decoding slots must
    # still be a single ubatch (a single pass over the weights).
    lengths = {2: 3, 3: 4, 0: 5, 1: 6}
    replies = {(k,): [7] * lengths.get(k % 4, 2 + k % 5) for k in range(12)}
    fake = FakeBackend(replies)
    items = [[k] for k in range(12)]
    with BatchGenerator(backend=fake, slots=4, max_tokens=8, min_copy_tokens=64) as gen:
        out = gen.complete_many(items)
    assert [c.token_ids for c in out] == expected(fake, items)
    decodes = fake.calls(DecodeCall)
    for call in decodes:
        ids = [s.seq_id for s in call.spans]
        assert ids == sorted(ids)
    full = [c for c in decodes if len(c.spans) == 4 and c.n_tokens == 4]
    assert len(full) >= 3
    assert all(c.ubatches == 1 for c in full)


def test_the_ubatch_model_follows_llama_cpps_sequential_split():
    def call(*spans):
        return DecodeCall(
            1, tuple(Span(sid, 0, tuple(range(n)), True) for sid, n in spans), (), None
        )

    assert call((0, 1), (1, 1), (2, 1), (3, 1)).ubatches == 1
    assert call((2, 1), (3, 1), (0, 1), (1, 1)).ubatches == 2  # 2, 3 | 0, 1
    assert call((0, 1), (2, 1)).ubatches == 2  # not consecutive
    assert call((0, 1), (1, 30)).ubatches == 2  # 0, 1 x1 | 1 x29
    assert call((0, 5), (1, 5), (2, 5)).ubatches == 1


@pytest.mark.parametrize("declares", [True, False])
def test_a_recurrent_memory_reuses_only_exact_states(declares):
    fake = FakeBackend(REPLY, recurrent=True, declares_recurrent=declares)
    items = prompts(4) + prompts(4, head=SYSTEM[:30])
    with BatchGenerator(backend=fake, slots=4, max_tokens=8, min_copy_tokens=16) as gen:
        out = gen.complete_many(items)
        stats = gen.stats
    assert [c.token_ids for c in out] == expected(fake, items)
    assert fake.violations == []
    if declares:  # the 40-token prefix: a state taken exactly there
        assert stats.prefix_copies >= 3
    for seq in fake.seqs():  # every reuse was of a whole cache, never cut
        assert seq.prompt[: len(seq.cached)] == seq.cached
    refused = [t for t in fake.calls(TrimCall) if not t.ok]
    assert (len(refused) == 0) == declares  # found out at the first refusal otherwise


def test_per_item_sampling_and_max_tokens_reach_each_sequence():
    fake = FakeBackend(REPLY)
    items = prompts(3)
    sampling = [
        SamplingParams(temperature=0.0, max_tokens=1),
        SamplingParams(temperature=0.5, seed=3),
        SamplingParams(max_tokens=2),
    ]
    with BatchGenerator(backend=fake, slots=3, max_tokens=8) as gen:
        out = gen.complete_many(items, sampling=sampling)
        with pytest.raises(ValueError, match="2 SamplingParams for 3 prompts"):
            gen.complete_many(items, sampling=sampling[:2])
        with pytest.raises(ValueError, match="sampling\\[1\\] is dict"):
            gen.complete_many(items, sampling=[sampling[0], {}, sampling[2]])
    assert [len(c.token_ids) <= cap for c, cap in zip(out, (1, 8, 2))] == [True] * 3
    assert [c.token_ids for c in out] == [
        e[:cap] for e, cap in zip(expected(fake, items), (1, 8, 2))
    ]
    started = {s.seq_id: s.sampling for s in fake.calls(StartSeqCall)}
    assert sorted(started.values(), key=repr) == sorted(sampling, key=repr)


@pytest.mark.parametrize("n_prompts", [2, 4])
def test_a_sampling_list_that_does_not_match_unsized_prompts_is_refused(n_prompts):
    sampling = [SamplingParams(max_tokens=1)] * 3
    with BatchGenerator(backend=FakeBackend(REPLY), slots=2) as gen:
        with pytest.raises(ValueError, match="sampling has 3 SamplingParams"):
            gen.complete_many(iter(prompts(n_prompts)), sampling=sampling)
        assert len(gen.complete_many(iter(prompts(3)), sampling=sampling)) == 3


def test_a_page_is_yielded_while_later_items_are_still_running():
    fake = FakeBackend({(1,): [], (2,): [], (3,): [5] * 20, (4,): []})
    with BatchGenerator(backend=fake, slots=2, max_tokens=30) as gen:
        pages = gen.iter_groups([[1], [2], [3], [4]])
        first = next(pages)
        assert [c.index for c in first] == [0, 1]
        n_decodes = fake.num_decode_calls
        assert [c.index for c in next(pages)] == [2, 3]
        assert fake.num_decode_calls > n_decodes
        with pytest.raises(StopIteration):
            next(pages)


def test_a_second_run_in_the_same_thread_is_refused_while_the_first_is_open():
    with BatchGenerator(backend=FakeBackend(REPLY), slots=2, max_tokens=4) as gen:
        pages = gen.iter_groups(prompts(6))
        next(pages)
        with pytest.raises(GeneratorBusy):
            gen.complete_many(prompts(2))
        pages.close()
        assert len(gen.complete_many(prompts(2))) == 2


class FailingStart(FakeBackend):
    """A fake whose ``at``-th ``start_seq`` raises (a sampler chain that cannot be built)."""

    def __init__(self, *args, at: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at, self.n_starts = at, 0

    def start_seq(self, seq_id, sampling, host=False):
        self.n_starts += 1
        if self.n_starts == self.at:
            raise MemoryError("fake: no memory for a sampler chain")
        super().start_seq(seq_id, sampling, host)


@pytest.mark.parametrize("at", [1, 2, 3])
def test_an_item_whose_sequence_cannot_start_is_completed_alone_not_lost(at):
    fake = FailingStart(REPLY, at=at)
    items = prompts(5)
    with BatchGenerator(backend=fake, slots=2, max_tokens=8) as gen:
        out = gen.complete_many(items)
        assert "MemoryError" in gen.stats.last_batch_failure and gen.stats.batching_enabled
    assert [c.index for c in out] == list(range(5))
    assert [c.token_ids for c in out] == expected(fake, items)
    assert fake.violations == []


@pytest.mark.parametrize(
    "slots, lookahead", [(1, 16), (2, 16), (3, 15), (4, 16), (8, 32), (16, 64)]
)
def test_the_default_lookahead_lets_four_slots_worth_of_items_run_ahead(slots, lookahead):
    with BatchGenerator(backend=FakeBackend({}), slots=slots) as gen:
        assert gen.config.lookahead == lookahead


def test_a_long_reply_does_not_leave_the_other_slots_idle():
    # item 0 replies 60 tokens, the others 2: while it runs, the other 7 slots go
    # through the next 31 items (the default page of 8 slots is 32 items)
    replies = {(0,): [7] * 60} | {(k,): [7, 7] for k in range(1, 40)}
    fake = FakeBackend(replies)
    items = [[k] for k in range(40)]
    with BatchGenerator(backend=fake, slots=8, max_tokens=64) as gen:
        out = gen.complete_many(items)
    assert [c.token_ids for c in out] == expected(fake, items, max_tokens=64)
    started_while_0_ran = []
    for call in fake.log:
        if isinstance(call, StartSeqCall):
            started_while_0_ran.append(call)
        elif isinstance(call, DecodeCall) and call.call == 60:  # item 0's last token
            break
    assert len(started_while_0_ran) == 32


def test_a_config_is_checked_once_and_makes_the_same_generator_as_the_keywords():
    config = BatchConfig(slots=2, max_tokens=7, lookahead=8, cache_ram_mib=0)
    gen = BatchGenerator.from_config(config, backend=FakeBackend({}))
    assert (
        gen.config
        == BatchGenerator(
            backend=FakeBackend({}), slots=2, max_tokens=7, lookahead=8, cache_ram_mib=0
        ).config
    )
    with pytest.raises(ValueError, match="cache_ram_mib=-1 is out of range"):
        BatchConfig(cache_ram_mib=-1)
    with pytest.raises(TypeError, match="page_size"):  # the former name of lookahead is gone
        BatchGenerator(backend=FakeBackend({}), slots=2, page_size=8)  # type: ignore[call-arg]


def test_numpy_integers_are_integers_for_every_config_keyword():
    keywords = dict(slots=2, n_ctx_seq=512, n_batch=64, max_tokens=3, lookahead=4)
    keywords.update(cache_ram_mib=0, min_copy_tokens=8, max_batch_failures=2)
    as_numpy = {k: np.int64(v) if k != "slots" else np.int32(v) for k, v in keywords.items()}
    config = BatchConfig(**as_numpy)
    assert config == BatchConfig(**keywords)
    assert all(type(getattr(config, k)) is int for k in keywords)
    with BatchGenerator(backend=FakeBackend(REPLY), **as_numpy) as gen:
        out = gen.complete_many([[5, 6], [7, 8]])
    assert [len(c.token_ids) <= 3 for c in out] == [True, True]
    with pytest.raises(ValueError, match="slots=0 is out of range"):
        BatchConfig(slots=np.int64(0))
    with pytest.raises(ValueError, match="n_batch"):
        BatchConfig(n_batch=np.float64(64))  # a real number is not an integer, as in SamplingParams

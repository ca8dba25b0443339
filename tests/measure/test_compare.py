"""One at a time against the slot engine (what tune and bench's workload run), on the fake
backend with a scripted clock: per-round s/item, ratios paired within a round, the
caller's own loop as one at a time, the warm-up. Timings are never asserted."""

from __future__ import annotations

import pytest
from clocks import scripted

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.measure.compare import (
    ONE_AT_A_TIME,
    compare,
    setting_name,
    setting_slots,
    warmup_item,
)
from llamabatch.measure.one_at_a_time import OneAtATime
from llamabatch.measure.records import PassReply, WorkItem, seeded
from llamabatch.measure.summary import summarize
from llamabatch.testing import FakeBackend

GREEDY = SamplingParams(temperature=0.0)


def fake_generator(b: int) -> BatchGenerator:
    return BatchGenerator(
        backend=FakeBackend(max_tokens=16), slots=b, max_tokens=16, n_ctx_seq=4096, sampling=GREEDY
    )


def work(prompts) -> list[WorkItem]:
    return [WorkItem(k, p, GREEDY) for k, p in enumerate(prompts)]


def settings(done, slots):
    names = [ONE_AT_A_TIME, *map(setting_name, slots)]
    return [
        summarize(n, setting_slots(n), done.rounds, n_prompts=4, has_labels=False) for n in names
    ]


def test_ratios_come_from_each_rounds_times():
    items = work(f"item {i}" for i in range(4))
    # round 1 (forward): alone 8 s, B=2 6 s, B=4 4 s; round 2 (backward): B=4 5 s,
    # B=2 9 s, alone 10 s
    clock = scripted([8, 6, 4, 5, 9, 10])
    done = compare(lambda r: items, 2, (2, 4), fake_generator, warmup=items[0], clock=clock)
    assert [r.order for r in done.rounds] == [
        ("one_at_a_time", "slots=2", "slots=4"),
        ("slots=4", "slots=2", "one_at_a_time"),
    ]
    alone, b2, b4 = settings(done, (2, 4))
    assert alone.s_per_item == (2.0, 2.5) and alone.ratio == (1.0, 1.0)
    assert b2.s_per_item == (1.5, 2.25) and b2.ratio == (0.75, 0.9)
    assert b4.ratio == (0.5, 0.5)
    assert b2.s_per_item_median == pytest.approx(1.875)
    assert b2.items_per_hour == pytest.approx(3600 / 1.875)
    assert b2.ratio_median == pytest.approx(0.825)
    # every timed item of B > 1 went through the batch; alone ones through generate_alone
    assert (b2.items_batched, b2.items_alone, alone.items_alone) == (8, 0, 8)
    assert b2.tokens_per_item == alone.tokens_per_item  # the same replies
    assert b2.exact_share == 100.0 and b2.usable


def test_one_at_a_time_is_the_callers_own_loop_when_one_is_given():
    seen: list[list[str]] = []

    def one(item: WorkItem) -> PassReply:
        seen.append(item.prompt)
        return PassReply(item.id, "x", "stop", None, 5, "create_completion")

    items = work("abcd")
    warm = WorkItem("w", "warm", GREEDY)
    clock = scripted([8, 4, 2, 8])  # round 1: alone 8 s, B=2 4 s; round 2
    done = compare(
        lambda r: items,
        2,
        (2,),
        fake_generator,
        warmup=warm,
        one_at_a_time=OneAtATime(one),
        clock=clock,
    )
    assert seen == ["warm", *"abcd", *"abcd"]  # warm-up, then 2 rounds
    alone, b2 = settings(done, (2,))
    assert alone.s_per_item == (2.0, 2.0) and alone.tokens_per_item == 5
    assert (alone.items_alone, alone.items_batched) == (8, 0)
    assert b2.ratio == (0.5, 0.25) and b2.items_batched == 8
    assert b2.exact_share == 0.0  # "x" is not the fake's reply


def test_the_floor_runs_one_at_a_time_with_every_seed_plus_one():
    seeds: list[int | None] = []

    def one(item: WorkItem) -> PassReply:
        seeds.append(item.sampling.seed)
        return PassReply(item.id, "x", "stop", None, 1, "create_completion")

    items = seeded(work("ab"))
    done = compare(
        lambda r: items,
        1,
        (2,),
        fake_generator,
        warmup=items[0],
        one_at_a_time=OneAtATime(one),
        floor=True,
    )
    assert done.rounds[0].order == ("one_at_a_time", "floor", "slots=2")
    assert seeds == [0, 1, 0, 0, 1, 1]  # warm-ups, then the round's two passes


def test_the_warmup_is_an_item_in_no_round_else_the_built_in_prompt():
    items = work("abc")
    assert warmup_item(items, [[0], [2]]) == (items[1], 1)
    warm, spare = warmup_item(items, [[0, 1, 2]])
    assert spare is None and warm.id == "warmup" and warm.sampling == items[0].sampling
    assert "<|im_start|>assistant" in warm.prompt

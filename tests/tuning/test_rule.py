"""The recommendation rule on given timings and replies (pure data, no model)."""

from __future__ import annotations

import dataclasses

import pytest
from tune_helpers import rounds, run, settings_and_floor, simple

from llamabatch.measure.compare import ONE_AT_A_TIME, setting_name
from llamabatch.measure.records import PassReplies, PassReply
from llamabatch.measure.summary import summarize
from llamabatch.measure.verdict import recommend

BASE = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")


def _recommend(records, slots, **kwargs):
    settings, floor = settings_and_floor(records, slots)
    return recommend(settings, floor, complete_args=("in.jsonl",), **kwargs), settings


def test_summary_arithmetic_paired_by_round():
    records = rounds(
        [
            {
                ONE_AT_A_TIME: run(ONE_AT_A_TIME, 1, 10.0, BASE),
                "slots=2": run("slots=2", 2, 8.0, BASE),
            },
            {
                ONE_AT_A_TIME: run(ONE_AT_A_TIME, 1, 20.0, BASE),
                "slots=2": run("slots=2", 2, 12.0, BASE),
            },
            {
                ONE_AT_A_TIME: run(ONE_AT_A_TIME, 1, 10.0, BASE),
                "slots=2": run("slots=2", 2, 9.0, BASE),
            },
        ]
    )
    s = summarize("slots=2", 2, records, n_prompts=1000, has_labels=True, kv_bytes_per_slot=2**21)
    assert s.s_per_item == (0.8, 1.2, 0.9)
    assert s.s_per_item_median == pytest.approx(0.9)
    assert (s.s_per_item_min, s.s_per_item_max) == (0.8, 1.2)
    # paired within each round: 0.8, 0.6, 0.9 -> median 0.8, not 0.9 / 1.0
    assert s.ratio == pytest.approx((0.8, 0.6, 0.9))
    assert s.ratio_median == pytest.approx(0.8)
    assert s.faster_pct == pytest.approx(20.0)
    assert s.items_per_hour == pytest.approx(4000.0)
    assert s.eta_s == pytest.approx(900.0)
    assert (s.kv_mib_per_slot, s.kv_mib_total) == (2.0, 4.0)
    assert (s.exact_share, s.label_share) == (100.0, 100.0)
    assert s.usable and s.n_items == 30 and s.items_batched == 30


def test_gain_threshold():
    records = simple({2: 9.0, 4: 8.0})  # 10 % and 20 % faster
    rec, _ = _recommend(records, (2, 4))
    assert (rec.slots, rec.pays) == (4, True)
    assert rec.command == "llamabatch complete in.jsonl --slots 4"
    rec, _ = _recommend(records, (2, 4), min_gain_pct=25.0)
    assert (rec.slots, rec.pays) == (1, False)
    assert rec.message.startswith("batching does not pay here: at best 20 % faster (slots 4)")
    assert rec.command.endswith("--slots 1")


def test_gain_exactly_at_the_threshold_pays():
    rec, _ = _recommend(simple({2: 8.5}), (2,))  # exactly 15 % faster
    assert (rec.slots, rec.pays) == (2, True)


def test_agreement_threshold():
    bad = ("a", "b", "c", "d", "e", "f", "g", "h", "x", "y")  # 80 % of the labels
    near = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "y")  # 90 %
    records = simple({2: 8.0, 4: 6.0, 8: 7.0}, {4: bad, 8: near})
    rec, settings = _recommend(records, (2, 4, 8))
    assert [s.label_share for s in settings] == [100.0, 80.0, 90.0]
    assert (rec.slots, rec.pays) == (2, True)  # 4 and 8 are faster but agree less
    rec, _ = _recommend(records, (2, 4, 8), max_agreement_drop=10.0)
    assert (rec.slots, rec.pays) == (8, True)  # 10 points below the floor is allowed now


def test_agreement_is_judged_against_the_floor():
    # two one-at-a-time runs agree on 90 %; a setting at 86 % is within 5 points
    floor = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "z")
    batch = ("a", "b", "c", "d", "e", "f", "g", "h", "y", "z")  # 80 % vs one at a time
    rec, _ = _recommend(simple({4: 6.0}, {4: batch}, floor_labels=floor), (4,))
    assert (rec.slots, rec.pays) == (1, False)
    assert "10.0 points below the floor" in rec.message
    batch = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "y")  # 90 %: the floor's
    rec, _ = _recommend(simple({4: 6.0}, {4: batch}, floor_labels=floor), (4,))
    assert (rec.slots, rec.pays) == (4, True)


def test_a_tie_goes_to_fewer_slots():
    rec, _ = _recommend(simple({8: 7.0, 2: 7.0, 4: 7.0}), (8, 2, 4))
    assert (rec.slots, rec.pays) == (2, True)


def test_does_not_pay():
    rec, _ = _recommend(simple({2: 9.5, 4: 9.0}), (2, 4))
    assert (rec.slots, rec.pays) == (1, False)
    assert rec.message.startswith("batching does not pay here: at best 10 % faster (slots 4)")
    rec, _ = _recommend(simple({2: 12.0, 4: 11.0}), (2, 4))
    assert rec.message.startswith("batching does not pay here: at best 10 % slower (slots 4)")


def test_a_setting_whose_batching_was_turned_off_is_not_usable():
    records = simple(
        {2: 8.0, 4: 5.0},
        extra={4: {"disabled": "the batch context could not be created", "batched": False}},
    )
    rec, settings = _recommend(records, (2, 4))
    assert not settings[1].usable
    assert "batching was turned off" in settings[1].unusable_reason
    assert (rec.slots, rec.pays) == (2, True)  # 4 is fastest, but it did not batch


def test_a_setting_that_batched_nothing_or_failed_is_not_usable():
    records = simple(
        {2: 5.0, 4: 5.0},
        extra={2: {"batched": False}, 4: {"error": "ValueError: slots=4 is out of range"}},
    )
    rec, settings = _recommend(records, (2, 4))
    assert [s.usable for s in settings] == [False, False]
    assert "no item was batched" in settings[0].unusable_reason
    assert "slots=4 is out of range" in settings[1].unusable_reason
    assert (rec.slots, rec.pays) == (1, False)
    assert rec.message.startswith("batching does not pay here: no setting batched")


def test_failed_items_count_as_disagreeing():
    records = simple({2: 5.0})
    good = records[0].get(setting_name(2))
    replies = good.result.replies
    broken = PassReply(0, "", "error", "boom", 0, "batch", None)
    runs = {p.path: p for p in records[0].passes}
    runs[setting_name(2)] = dataclasses.replace(
        good, result=PassReplies((broken, *replies[1:]), items_batched=10)
    )
    records = [rounds([runs])[0], records[1]]
    s = summarize(setting_name(2), 2, records, n_prompts=10, has_labels=True)
    assert (s.exact_share, s.label_share, s.n_failed) == (95.0, 95.0, 1)

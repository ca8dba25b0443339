"""The verdict on recorded rounds (plain data, no timing): intervals against the
threshold, the three outcomes, slots a round cannot fill, and the noise warnings."""

from __future__ import annotations

import math

import pytest
from tune_helpers import recorded

from llamabatch.measure.compare import ONE_AT_A_TIME, setting_name
from llamabatch.measure.noise import noise_of
from llamabatch.measure.stats import Interval
from llamabatch.measure.summary import floor_of, summarize
from llamabatch.measure.verdict import recommend


def _judge(records, slots, *, items=6, threads=None, n_cores=2, **kwargs):
    settings = [
        summarize(setting_name(k), k, records, n_prompts=100, has_labels=True) for k in slots
    ]
    names = [ONE_AT_A_TIME, *(setting_name(k) for k in slots)]
    noise = noise_of(records, names, ONE_AT_A_TIME, n_cores=n_cores, threads=threads)
    rec = recommend(
        settings,
        floor_of(records, True, (0, 1)),
        complete_args=("in.jsonl",),
        items_per_round=items,
        busy=noise.busy,
        **kwargs,
    )
    return rec, settings, noise


def _scaled(ratios, base=6.0):
    return [r * base for r in ratios]


# issue 56: slots=2 and slots=8 on a 2-core machine at load 4-7, 6 items per round
NOISY = {1: [6.0, 6.0, 6.0], 2: _scaled([2.63, 0.33, 0.85]), 8: _scaled([4.75, 0.24, 0.24])}


def test_interval_is_a_t_interval_on_log_ratios():
    iv = Interval.of([math.exp(-1), math.exp(1)])
    assert (math.log(iv.low), math.log(iv.high)) == pytest.approx((-12.706, 12.706))
    assert Interval.of([0.8, 0.8]) == Interval(pytest.approx(0.8), pytest.approx(0.8))
    assert Interval.of([0.8]) is None  # one round: no spread, no interval
    assert Interval.of([0.8, math.inf]) is None


def test_the_noisy_rounds_of_the_issue_cannot_tell():
    rec, settings, noise = _judge(recorded(NOISY), (2, 8))
    assert (rec.verdict, rec.slots, rec.pays) == ("cannot_tell", 1, False)
    assert "slots 2: ratio 0.85 (95 % " in rec.reason and "straddles 0.85" in rec.reason
    assert "slots 8" not in rec.reason  # 6 items per round fill at most 6 of its 8 slots
    assert "--rounds" in rec.advice and "--items" in rec.advice
    assert rec.message.startswith("cannot tell whether batching pays here: ")
    iv = settings[0].ratio_interval
    assert iv.low < 0.85 < iv.high
    assert any("slots=2: its per-round ratios range from 0.33 to 2.63" in w for w in noise.warnings)
    assert any("slots=8: its per-round ratios range from 0.24 to 4.75" in w for w in noise.warnings)


def test_a_busy_machine_is_named_in_what_would_tell():
    records = recorded(NOISY, loads=[5.0, 6.5, 4.0])
    rec, _, noise = _judge(records, (2, 8))
    assert noise.busy and noise.load_max == 6.5
    assert rec.advice.startswith("run it on a quieter machine")


def test_quiet_rounds_recommend_the_fastest_setting_clear_of_the_threshold():
    records = recorded({1: [6.0, 6.1, 5.9], 2: [4.8, 4.9, 4.7], 4: [4.2, 4.3, 4.1]})
    rec, settings, noise = _judge(records, (2, 4))
    assert (rec.verdict, rec.slots, rec.pays) == ("use", 4, True)
    assert settings[1].ratio_interval.high <= 0.85
    assert rec.message.startswith("use --slots 4: 30 % faster than one at a time (95 % interval ")
    assert rec.command == "llamabatch complete in.jsonl --slots 4"
    assert noise.warnings == ()


def test_a_setting_clearly_slower_than_the_threshold_does_not_pay():
    records = recorded({1: [6.0, 6.0, 6.0], 2: [5.8, 5.9, 6.1], 4: [6.3, 6.2, 6.4]})
    rec, settings, _ = _judge(records, (2, 4))
    assert (rec.verdict, rec.slots) == ("does_not_pay", 1)
    assert all(s.ratio_interval.low > 0.85 for s in settings)
    assert rec.message.startswith("batching does not pay here: at best 2 % faster (slots 2): ")
    assert rec.advice is None


def test_one_round_has_no_interval_and_cannot_tell():
    rec, settings, _ = _judge(recorded({1: [6.0], 2: [3.0]}), (2,))
    assert settings[0].ratio_interval is None
    assert rec.verdict == "cannot_tell"
    assert "ratio 0.50 in one round, no interval" in rec.reason


def test_never_more_slots_than_a_round_fills():
    records = recorded({1: [6.0, 6.0, 6.0], 2: [5.8, 5.9, 6.1], 8: [3.0, 3.1, 2.9]})
    rec, _, _ = _judge(records, (2, 8), items=6)
    assert (rec.verdict, rec.slots) == ("does_not_pay", 1)  # 8 is fastest, but 6 items
    rec, _, _ = _judge(records, (2, 8), items=8)
    assert (rec.verdict, rec.slots) == ("use", 8)
    rec, _, _ = _judge(recorded({1: [6.0, 6.0], 8: [3.0, 3.0]}), (8,), items=6)
    assert rec.verdict == "cannot_tell"
    assert "6 items per round fill none of the slot counts tried (8)" in rec.reason
    assert "--items" in rec.advice


@pytest.mark.parametrize(
    "threads, says, not_says",
    [
        (None, "try --threads 1 (or fewer threads than the idle cores)", "already"),
        (1, "it already runs with --threads 1: run it when the other work is done", "try"),
        (4, "try --threads 2 or --threads 1", "already"),
    ],
)
def test_the_busy_hint_names_what_to_change_given_the_threads(threads, says, not_says):
    records = recorded({1: [6.0, 6.0], 2: [4.0, 4.0]}, loads=[5.0, 3.0])
    _, _, noise = _judge(records, (2,), threads=threads)
    (busy,) = [w for w in noise.warnings if "busy" in w]
    assert busy.startswith("the CPU was busy during the measurement (load average 5.0 on 2 ")
    assert says in busy and not_says not in busy.split("collapses;")[1]


def test_a_quiet_load_gives_no_busy_warning():
    records = recorded({1: [6.0, 6.0], 2: [4.0, 4.0]}, loads=[2.9, 1.0])
    _, _, noise = _judge(records, (2,))
    assert not noise.busy and noise.warnings == ()


def test_rounds_starved_of_cpu_are_told_and_cpu_time_is_reported():
    seconds = {1: [6.0, 6.0, 6.0], 2: [4.8, 4.9, 4.7]}
    cpu = {1: [11.8, 11.9, 12.0], 2: [9.5, 2.0, 9.3]}  # round 1 of slots 2: wall >> CPU
    records = recorded(seconds, cpu=cpu)
    _, settings, noise = _judge(records, (2,))
    assert settings[0].cpu_s_per_item == pytest.approx((9.5 / 6, 2.0 / 6, 9.3 / 6))
    assert settings[0].cpu_s_per_item_median == pytest.approx(9.3 / 6)
    assert noise.settings["slots=2"].cpu_per_wall[1] == pytest.approx(2.0 / 4.9)
    (starved,) = noise.warnings
    assert starved.startswith("slots=2: its rounds got 0.41 to 1.98 CPU seconds per wall second")


def test_wall_far_above_cpu_on_a_cpu_device_is_told():
    seconds = {1: [6.0, 6.0, 6.0], 2: [4.8, 4.9, 4.7]}
    cpu = {1: [1.6, 1.7, 1.5], 2: [1.3, 1.4, 1.2]}  # about 0.27 CPU s per wall s
    records = recorded(seconds, cpu=cpu)
    names = [ONE_AT_A_TIME, "slots=2"]
    noise = noise_of(records, names, ONE_AT_A_TIME, n_cores=2, threads=1, cpu_threads=1)
    (waited,) = noise.warnings
    assert waited.startswith(
        "this process got 0.27 CPU seconds per wall second (median of the passes) with 1 "
        "thread decoding on the CPU, about 1 on a quiet machine: it waited for cores"
    )
    # on a GPU (no CPU threads decoding) the CPU waits for the device: nothing to say
    assert noise_of(records, names, ONE_AT_A_TIME, n_cores=2, threads=1).warnings == ()
    quiet = recorded(seconds, cpu={1: [5.8, 5.9, 5.7], 2: [4.6, 4.7, 4.5]})
    assert noise_of(quiet, names, ONE_AT_A_TIME, n_cores=2, cpu_threads=1).warnings == ()


# `llamabatch tune examples/tag_prompts.jsonl` on a 2-core CPU machine: two busy loops
# switched on and off every 3 s, then nothing else running (s and CPU s per pass, 6 items)
BURSTY = {1: [4.25, 1.42, 3.25], 2: [2.13, 2.64, 1.5], 4: [2.82, 1.56, 4.28], 8: [1.35, 4.22, 1.31]}
BURSTY_CPU = {
    1: [5.17, 2.65, 3.69],
    2: [3.05, 3.55, 2.92],
    4: [3.67, 3.01, 5.47],
    8: [2.62, 5.35, 2.54],
}
QUIET = {1: [1.29, 1.19, 1.15], 2: [1.47, 1.35, 1.35], 4: [1.64, 1.28, 1.17], 8: [1.68, 1.28, 1.2]}
QUIET_CPU = {
    1: [2.41, 2.21, 2.08],
    2: [2.85, 2.63, 2.63],
    4: [3.18, 2.48, 2.3],
    8: [3.27, 2.49, 2.31],
}


def _judge_cpu(seconds, cpu, **kwargs):
    records = recorded(seconds, cpu=cpu, loads=[2.1, 2.1, 2.1])  # under 1.5 x 2 cores
    settings = [
        summarize(setting_name(k), k, records, n_prompts=20, has_labels=True) for k in (2, 4, 8)
    ]
    names = [ONE_AT_A_TIME, *(s.setting for s in settings)]
    noise = noise_of(records, names, ONE_AT_A_TIME, n_cores=2, cpu_threads=2)
    rec = recommend(
        settings,
        floor_of(records, True, (0, 1)),
        items_per_round=6,
        busy=noise.busy,
        **kwargs,
    )
    return rec, noise


def test_a_bursty_load_is_told_from_the_passes_cpu_share_when_the_load_average_misses_it():
    rec, noise = _judge_cpu(BURSTY, BURSTY_CPU, fresh_rounds_left=0)
    assert noise.busy and noise.load_max == 2.1  # the 1-minute mean missed the bursts
    (uneven,) = [w for w in noise.warnings if w.startswith("the CPU was busy in part")]
    assert "its passes got 1.14 to 1.95 CPU seconds per wall second" in uneven
    assert rec.verdict == "cannot_tell" and rec.slots == 1
    assert rec.advice.startswith("run it on a quieter machine")
    assert "give it more prompts (these are used up" in rec.advice
    assert "--items" not in rec.advice


def test_the_quiet_runs_passes_are_not_flagged():
    rec, noise = _judge_cpu(QUIET, QUIET_CPU)
    assert not noise.busy and noise.warnings == ()
    assert rec.verdict != "use"  # the quiet run: no setting 15 % faster

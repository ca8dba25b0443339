"""The rounds runner and the figures over rounds, on made-up paths and a scripted clock:
alternating order, fresh items per round, warm-up, failures, progress, paired ratios."""

from __future__ import annotations

import itertools

import pytest

from llamabatch.measure.rounds import Pass, Round, order, run_rounds, sample_rounds
from llamabatch.measure.stats import Spread, paired, per_round, ratios


def step_clock(step: float = 1.0):
    """A clock that advances by ``step`` on every call."""
    counter = itertools.count()
    return lambda: next(counter) * step


def recorder(log: list, name: str, ticks_per_item: int = 1):
    def path(items, progress):
        log.append((name, list(items)))
        for _ in items:
            progress(ticks_per_item)
        return len(items)

    return path


def test_each_pass_records_its_cpu_seconds_and_the_load_after_it():
    loads = iter([3.0, 1.5, 0.5, 0.25])
    done = run_rounds(
        {"a": recorder([], "a"), "b": recorder([], "b")},
        lambda r, name: ["x", "y"],
        2,
        clock=step_clock(),
        cpu_clock=step_clock(0.25),
        load=lambda: next(loads),
    )
    passes = [p for r in done for p in r.passes]
    assert [p.cpu_seconds for p in passes] == [0.25] * 4
    assert [p.cpu_s_per_item for p in passes] == [0.125] * 4
    assert [p.load for p in passes] == [3.0, 1.5, 0.5, 0.25]


def test_more_rounds_run_while_asked_up_to_max_rounds():
    asked = []

    def more(done):
        asked.append(len(done))
        return len(done) < 4

    run = dict(clock=step_clock(), cpu_clock=None, load=None)
    paths = {"a": recorder([], "a")}
    done = run_rounds(paths, lambda r, name: [r], 2, more=more, **run)
    assert len(done) == 4 and asked == [2, 3, 4]  # asked only after the 2 rounds given
    done = run_rounds(paths, lambda r, name: [r], 2, more=more, max_rounds=3, **run)
    assert len(done) == 3
    assert len(run_rounds(paths, lambda r, name: [r], 2, **run)) == 2


def test_order_alternates_forward_and_backward():
    assert order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert order(["a", "b", "c"], 1) == ["c", "b", "a"]
    assert order(["a", "b", "c"], 2) == ["a", "b", "c"]


def test_every_path_gets_each_rounds_fresh_items_in_alternating_order():
    log: list = []
    paths = {n: recorder(log, n) for n in ("alone", "b2", "b4")}
    done = run_rounds(
        paths,
        lambda r, name: [f"r{r}-{i}" for i in range(2)],
        3,
        warmup=lambda name: ["warm"],
        clock=step_clock(),
        cpu_clock=None,
        load=None,
    )
    assert log[:3] == [("alone", ["warm"]), ("b2", ["warm"]), ("b4", ["warm"])]
    timed = log[3:]
    assert [n for n, _ in timed] == ["alone", "b2", "b4", "b4", "b2", "alone"] + [
        "alone",
        "b2",
        "b4",
    ]
    assert all(items == [f"r{k // 3}-0", f"r{k // 3}-1"] for k, (_, items) in enumerate(timed))
    assert [r.order for r in done] == [("alone", "b2", "b4"), ("b4", "b2", "alone")] + [
        ("alone", "b2", "b4")
    ]
    p = done[1].get("b2")
    assert p == Pass("b2", ("r1-0", "r1-1"), 1.0, 2) and p.s_per_item == 0.5
    assert done[0].get("nope") is None


def test_a_failure_of_a_listed_kind_fails_one_pass_and_a_failed_warmup_every_round():
    calls = {"flaky": 0, "broken": 0}

    def flaky(items, progress):
        calls["flaky"] += 1
        if calls["flaky"] == 2:  # the first timed pass (after the warm-up)
            progress(1)
            raise ValueError("once")
        return "ok"

    def broken(items, progress):
        calls["broken"] += 1
        raise ValueError("never opens")

    ticks: list[int] = []
    done = run_rounds(
        {"flaky": flaky, "broken": broken},
        lambda r, name: ["x", "y"],
        2,
        warmup=lambda name: ["w"],
        failures=(ValueError,),
        progress=ticks.append,
    )
    assert calls == {"flaky": 3, "broken": 1}  # broken: its warm-up only
    first = done[0].get("flaky")
    assert (first.seconds, first.error) == (None, "ValueError: once")
    assert done[1].get("flaky").result == "ok"
    assert [r.get("broken").error for r in done] == ["ValueError: never opens"] * 2
    assert sum(ticks) == 2 * 2 * 2  # every item of every pass, given up on or done


def test_an_unlisted_failure_ends_the_run():
    def boom(items, progress):
        raise KeyError("no")

    with pytest.raises(KeyError):
        run_rounds({"a": boom}, lambda r, n: [1], 1, failures=(ValueError,))


def test_progress_is_topped_up_for_paths_that_do_not_count():
    ticks: list[int] = []
    run_rounds(
        {"quiet": lambda items, progress: None, "counts": recorder([], "c")},
        lambda r, name: [1, 2, 3],
        2,
        progress=ticks.append,
    )
    assert sum(ticks) == 2 * 2 * 3


@pytest.mark.parametrize("rounds, paths", [(0, {"a": None}), (1, {})])
def test_no_rounds_or_no_paths_is_refused(rounds, paths):
    with pytest.raises(ValueError, match="give rounds >= 1 and a path"):
        run_rounds(paths, lambda r, n: [], rounds)


def test_on_pass_hears_every_pass_in_order():
    heard: list = []
    run_rounds(
        {"a": recorder([], "a"), "b": recorder([], "b")},
        lambda r, n: [r],
        2,
        on_pass=lambda r, p: heard.append((r, p.path)),
    )
    assert heard == [(0, "a"), (0, "b"), (1, "b"), (1, "a")]


def test_sample_rounds_are_disjoint_and_seeded():
    a = sample_rounds(10, 3, 3, seed=5)
    assert a == sample_rounds(10, 3, 3, seed=5) != sample_rounds(10, 3, 3, seed=6)
    flat = [i for r in a for i in r]
    assert len(set(flat)) == 9 and all(r == sorted(r) for r in a)
    with pytest.raises(ValueError):
        sample_rounds(4, 3, 2)


def rounds_of(per_round: list[dict[str, float | None]]) -> list[Round]:
    """Rounds of one-item passes taking the given seconds (``None``: failed)."""
    return [
        Round(r, tuple(Pass(n, (0,), s, error=None if s else "x") for n, s in runs.items()))
        for r, runs in enumerate(per_round)
    ]


def test_paired_ratios_per_round_skip_rounds_where_either_failed():
    done = rounds_of([{"a": 2.0, "b": 1.0}, {"a": 4.0, "b": 3.0}, {"a": 1.0, "b": None}])
    assert per_round(done, "b") == [1.0, 3.0, None]
    assert paired(done, "b", "a") == [0.5, 0.75]
    assert per_round(done, "c") == [None] * 3
    assert ratios([1.0, 3.0], [2.0, 0.0]) == [0.5, float("inf")]
    with pytest.raises(ValueError):
        ratios([1.0], [1.0, 2.0])


def test_spread_of_the_values_that_are_there():
    s = Spread.of([3.0, None, 1.0, 2.0])
    assert s is not None and (s.median, s.min, s.max) == (2.0, 1.0, 3.0)
    assert s.to_json() == {"values": [3.0, 1.0, 2.0], "median": 2.0, "min": 1.0, "max": 3.0}
    assert Spread.of([None]) is None

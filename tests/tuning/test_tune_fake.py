"""``llamabatch.tune`` end to end on the fake backend: rounds, agreement recounted from
the JSON's replies, a setting whose batching was turned off, bad input. No timing is
asserted (the clock is the real one, the fake is instant)."""

from __future__ import annotations

import json
import re
import sys

import pytest

from llamabatch import SamplingParams, tune
from llamabatch.measure.agreement import label_of
from llamabatch.measure.records import PassReply
from llamabatch.testing import FakeBackend

PROMPTS = [f"ticket {k:02d}: something about item {k}" for k in range(20)]
LABELS = ("billing", "bug", "account")


def _text(tokens) -> str:
    return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")


def _number(tokens) -> int:
    return int(re.search(r"ticket (\d+)", _text(tokens)).group(1))


def _reply_for(slots: int):
    """Replies 'label: X, because ...'; slot counts >= 4 change the label of every
    item whose number is divisible by 5, and slots 2 change the reason of odd ones."""

    def reply(tokens) -> str:
        k = _number(tokens)
        label = LABELS[k % 3]
        if slots >= 4 and k % 5 == 0:
            label = LABELS[(k + 1) % 3]
        reason = "odd" if slots == 2 and k % 2 else "plain"
        return f"label: {label}, because {reason}"

    return reply


def _backend(slots: int) -> FakeBackend:
    return FakeBackend(reply=_reply_for(slots))


def _run(**kwargs):
    ticks = []
    kw = dict(
        slots=(2, 4),
        rounds=2,
        items=8,
        backend=_backend,
        sampling=SamplingParams(temperature=0.0),
        label_regex=r"label: (\w+)",
        ids=[f"t{k:02d}" for k in range(len(PROMPTS))],
        progress=ticks.append,
        complete_args=("in.jsonl", "--temperature", "0"),
    )
    kw.update(kwargs)
    return tune(None, PROMPTS, **kw), ticks


def test_rounds_are_disjoint_and_every_setting_gets_the_same_items():
    report, ticks = _run()
    doc = report.to_json()
    seen = set()
    for r in doc["rounds"]:
        assert len(r["item_ids"]) == 8
        assert not seen & set(r["item_ids"])
        seen |= set(r["item_ids"])
        for run in r["runs"]:
            assert [rep["id"] for rep in run["replies"]] == r["item_ids"]
    orders = [r["order"] for r in doc["rounds"]]
    assert orders[0] == ["one_at_a_time", "slots=2", "slots=4"]
    assert orders[1] == list(reversed(orders[0]))
    assert sum(ticks) == 2 * 8 * 3  # the bar's total: rounds x items x settings


def test_agreement_shares_match_a_recount_of_the_json_replies(tmp_path):
    report, _ = _run()
    path = tmp_path / "t.json"
    path.write_text(json.dumps(report.to_json()), encoding="utf-8")
    doc = json.loads(path.read_text(encoding="utf-8"))
    regex = re.compile(doc["label_regex"])
    for setting in doc["settings"]:
        n = exact = same_label = 0
        for r in doc["rounds"]:
            runs = {run["setting"]: run for run in r["runs"]}
            base, other = runs["one_at_a_time"]["replies"], runs[setting["setting"]]["replies"]
            for a, b in zip(base, other):
                n += 1
                exact += a["text"] == b["text"]
                la = label_of(a["text"], "label_regex", regex)
                same_label += la == label_of(b["text"], "label_regex", regex)
                assert a["label"] == la
        assert setting["exact_share"] == pytest.approx(100 * exact / n)
        assert setting["label_share"] == pytest.approx(100 * same_label / n)
    by = {s["setting"]: s for s in doc["settings"]}
    # slots 2: odd items change their reason only; slots 4: multiples of 5 their label
    assert by["slots=2"]["label_share"] == 100.0
    assert by["slots=2"]["exact_share"] < 100.0
    assert by["slots=4"]["label_share"] < 100.0
    assert doc["floor"] == {
        "measured": False,
        "exact_share": 100.0,
        "label_share": 100.0,
        "seeds": None,
        "note": doc["floor"]["note"],
    }
    assert "100 % by construction" in doc["floor"]["note"]


def test_random_sampling_measures_the_floor_with_two_seeds():
    report, ticks = _run(sampling=SamplingParams(temperature=0.5, seed=7))
    assert report.floor.measured and report.floor.seeds == (7, 8)
    assert report.rounds[0].order == ("one_at_a_time", "floor", "slots=2", "slots=4")
    assert sum(ticks) == 2 * 8 * 4
    floor_run = report.rounds[0].get("floor")
    assert floor_run is not None and len(floor_run.result.replies) == 8
    assert report.floor.exact_share == 100.0  # the fake's replies ignore the seed


def test_batching_turned_off_makes_a_setting_unusable():
    def backend(slots: int) -> FakeBackend:
        return FakeBackend(reply=_reply_for(2), fail_open=slots == 4)

    report, _ = _run(backend=backend, label_regex=None)
    by = {s.setting: s for s in report.settings}
    assert by["slots=4"].usable is False
    assert "batching was turned off" in by["slots=4"].unusable_reason
    assert by["slots=4"].items_batched == 0
    assert by["slots=2"].usable
    assert report.recommendation.slots in (1, 2)
    text = report.format()
    assert "slots=4 is not usable: batching was turned off" in text
    assert report.recommendation.command in text


def test_a_generator_that_cannot_be_made_is_reported_not_raised():
    report, _ = _run(slots=(2, 600), n_batch=512)  # 600 slots > n_batch
    by = {s.setting: s for s in report.settings}
    assert not by["slots=600"].usable
    assert "it failed" in by["slots=600"].unusable_reason
    assert all(r.get("slots=600").error for r in report.rounds)


def test_choices_make_labels_and_the_report_is_json():
    report, _ = _run(sampling=SamplingParams(temperature=0.0, choices=LABELS), label_regex=None)
    assert report.label_rule == "choices"
    json.dumps(report.to_json(), allow_nan=False)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rounds=3, items=8), "needs 24 distinct prompts"),
        (dict(rounds=0), "rounds=0 is out of range"),
        (dict(slots=(1, 2)), "slot counts >= 2"),
        (dict(label_regex="("), "not a valid regular expression"),
        (dict(ids=["a"]), "ids has 1 entries"),
        (dict(sampling=[SamplingParams()]), "sampling has 1 SamplingParams for"),
        (dict(max_tokens=0), "max_tokens=0 is out of range"),
    ],
)
def test_bad_input_is_named(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _run(**kwargs)


@pytest.mark.parametrize(
    "fields, named",
    [
        (dict(n=3), "n=3 asks for 3 replies"),
        (dict(choices=LABELS, score_choices=True), "score_choices asks for label scores"),
        (dict(logprobs=2), "logprobs=2 asks for log-probabilities"),
        # failed before: the one-at-a-time loop dropped stop_token_ids without a word
        (dict(stop_token_ids=[3]), "stop_token_ids has no Llama.create_completion argument"),
    ],
)
def test_an_item_asking_for_more_than_one_reply_is_refused_before_any_work(fields, named):
    made = []
    samplings = [SamplingParams(temperature=0.0)] * len(PROMPTS)
    samplings[7] = SamplingParams(temperature=0.0, **fields)

    def backend(slots):
        made.append(slots)
        return FakeBackend()

    with pytest.raises(ValueError) as info:
        tune(None, PROMPTS, slots=(2,), rounds=2, items=4, sampling=samplings, backend=backend)
    message = str(info.value)
    assert "item 7" in message and named in message
    assert "tune compares one generated reply per item" in message
    assert made == []  # no generator was made, no item ran


def test_no_prompts_is_named():
    with pytest.raises(ValueError, match="no prompts: rounds=3 needs at least 3"):
        tune(None, [], backend=lambda b: FakeBackend())


def test_llm_or_backend():
    with pytest.raises(ValueError, match="exactly one of llm"):
        tune(None, PROMPTS)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    from llamabatch.measure.plot import plot_report

    def backend(slots: int) -> FakeBackend:
        return FakeBackend(reply=_reply_for(slots), fail_open=slots == 4)

    report, _ = _run(slots=(2, 4, 8), backend=backend)  # one setting not usable
    out = tmp_path / "t.png"
    plot_report(report, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    from llamabatch.measure.plot import PlotUnavailable, plot_report

    report, _ = _run()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(PlotUnavailable, match=re.escape("pip install 'llamabatch[plot]'")):
        plot_report(report, tmp_path / "t.png")
    assert not (tmp_path / "t.png").exists()


def _one_by_seed(prompt, sampling):
    """One at a time whose label of odd items follows the seed (sampling at work); the
    engine's fake replies ignore the seed."""
    k = int(re.search(r"ticket (\d+)", prompt).group(1))
    label = LABELS[(k + (k % 2) * sampling.seed) % 3]
    return PassReply(k, f"label: {label}, because plain", "stop", None, 3, "create_completion")


def test_agreement_compares_like_with_like_at_random_sampling():
    """The floor compares seeds 0 and 1; each slot count (seed 0) is compared with the
    one-at-a-time run of seed 1 too, not with the seed-0 run it always matches here."""
    report, _ = _run(
        sampling=SamplingParams(temperature=0.5),
        one_at_a_time=_one_by_seed,
        backend=lambda slots: FakeBackend(reply=_reply_for(1)),
    )
    assert report.floor.seeds == (0, 1) and report.agreement_against == "floor"
    floor = report.floor.label_share
    assert floor < 100.0  # odd items change their label with the seed
    # the engine's replies are seed 0's: against seed 0 they agreed on 100 %
    assert [s.label_share for s in report.settings] == [floor, floor]
    doc = report.to_json()
    assert doc["agreement_against"] == "floor"
    text = report.format()
    assert "its replies (seed 0) against one at a time with seed 1, like the floor" in text


class _FakeTime:
    """A clock the fake paths advance: one at a time 1 s per item, slot count K
    ``cost(K)`` s per reply made; no real time is measured."""

    def __init__(self, cost):
        self.now, self.cost = 0.0, cost

    def __call__(self) -> float:
        return self.now

    def backend(self, slots: int) -> FakeBackend:
        reply = _reply_for(1)

        def timed(tokens):
            self.now += self.cost(slots)
            return reply(tokens)

        return FakeBackend(reply=timed)


def _timed_run(cost, **kwargs):
    clock = _FakeTime(cost)
    kw = dict(
        backend=clock.backend,
        clock=clock,
        cpu_clock=None,
        load=lambda: 0.5,
        n_cores=2,
        items=2,
        rounds=2,
        slots=(2,),
    )
    kw.update(kwargs)
    return _run(**kw)[0]


def test_the_json_carries_intervals_noise_and_the_verdict_with_its_reason():
    report = _timed_run(lambda slots: 1.0 if slots == 1 else 0.5)
    doc = json.loads(json.dumps(report.to_json(), allow_nan=False))
    (s2,) = doc["settings"]
    assert s2["ratio"] == pytest.approx([0.5, 0.5])
    assert s2["ratio_interval"] == {"low": pytest.approx(0.5), "high": pytest.approx(0.5)}
    assert doc["noise"]["load_max"] == 0.5 and doc["noise"]["busy"] is False
    assert doc["noise"]["warnings"] == []
    rec = doc["recommendation"]
    assert (rec["verdict"], rec["slots"]) == ("use", 2)
    assert rec["reason"].startswith("slots 2: ratio 0.50 (95 % 0.50 to 0.50), all at or below")
    assert "95 % interval" in report.format()


def _swings(*costs):
    """Per-reply costs of slot count 2 that swing from pass to pass (2 replies a pass,
    the warm-up's first)."""
    return iter([c for c in costs for _ in range(2)] * 30)


def test_adaptive_rounds_go_on_while_it_cannot_tell_within_the_budget():
    draws = _swings(0.1, 1.9, 0.2, 1.8)
    noisy = _timed_run(lambda slots: 1.0 if slots == 1 else next(draws), budget_s=1e6)
    # 20 prompts, 2 per round, one kept for the warm-up: at most 9 rounds of fresh items
    assert noisy.n_rounds == 9 and len(noisy.rounds) == 9
    assert noisy.recommendation.verdict == "cannot_tell"
    assert any("prompts hold no fresh items for another round" in n for n in noisy.notes)
    seen = [i for r in noisy.to_json()["rounds"] for i in r["item_ids"]]
    assert len(seen) == len(set(seen)) == 18  # every round of fresh items
    quiet = _timed_run(lambda slots: 1.0 if slots == 1 else 0.5, budget_s=1e6)
    assert quiet.n_rounds == 2 and quiet.recommendation.verdict == "use"  # clear: stops


def test_adaptive_rounds_stop_before_the_budget():
    # warm-ups 1.2 s; rounds of 2 s one at a time + 3.8 / 0.4 / 3.6 s slots 2:
    # 15.0 s after 3 rounds, and a fourth as long as the longest (5.8 s) would pass 20 s
    draws = _swings(0.1, 1.9, 0.2, 1.8)
    report = _timed_run(lambda slots: 1.0 if slots == 1 else next(draws), budget_s=20.0)
    assert report.n_rounds == 3
    assert report.seconds == pytest.approx(15.0) and report.seconds <= 20.0
    assert any("another would pass the budget of 20 s" in n for n in report.notes)
    assert report.recommendation.verdict == "cannot_tell"


def test_a_budget_out_of_range_is_named():
    with pytest.raises(ValueError, match=r"budget_s=0 is out of range: valid is seconds > 0"):
        _run(budget_s=0)


def test_adaptive_rounds_do_not_go_on_when_no_slot_count_fits_a_round():
    draws = _swings(0.1, 1.9, 0.2, 1.8)
    report = _timed_run(lambda slots: 1.0 if slots == 1 else next(draws), budget_s=1e6, slots=(4,))
    assert report.n_rounds == 2  # 2 items a round fill no 4 slots: more rounds cannot tell
    assert report.recommendation.verdict == "cannot_tell"
    assert (
        "2 items per round fill none of the slot counts tried (4)" in report.recommendation.reason
    )
    assert not any("budget" in n or "fresh items" in n for n in report.notes)

"""Records with given timings and replies, for the tests of the tune report's rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from llamabatch.measure.compare import FLOOR, ONE_AT_A_TIME, setting_name
from llamabatch.measure.records import PassReplies, PassReply
from llamabatch.measure.rounds import Pass, Round
from llamabatch.measure.summary import floor_of, summarize


def run(
    setting: str,
    slots: int,
    seconds: float | None,
    texts: Sequence[str],
    *,
    batched: bool = True,
    disabled: str | None = None,
    error: str | None = None,
    cpu_seconds: float | None = None,
    load: float | None = None,
) -> Pass:
    """A pass over ``len(texts)`` items whose labels are their texts."""
    items = tuple(range(len(texts)))
    if error is not None:
        return Pass(setting, items, None, error=error)
    replies = tuple(
        PassReply(k, t, "stop", None, 1, "batch" if batched and slots > 1 else "alone", t)
        for k, t in enumerate(texts)
    )
    n = len(texts)
    return Pass(
        setting,
        items,
        seconds,
        PassReplies(
            replies,
            items_batched=n if batched and slots > 1 else 0,
            items_alone=0 if batched and slots > 1 else n,
            batch_disabled_reason=disabled,
        ),
        cpu_seconds=cpu_seconds,
        load=load,
    )


def rounds(
    per_round: Sequence[Mapping[str, Pass]],
) -> list[Round]:
    """Rounds holding the given passes (by setting name)."""
    return [Round(r, tuple(runs.values())) for r, runs in enumerate(per_round)]


def settings_and_floor(records: Sequence[Round], slots: Sequence[int]):
    """The SettingReports of ``slots`` and the floor, labels on."""
    reports = [
        summarize(setting_name(b), b, records, n_prompts=100, has_labels=True) for b in slots
    ]
    return reports, floor_of(records, True, (0, 1))


def simple(
    timings: Mapping[int, float],
    labels: Mapping[int, Sequence[str]] | None = None,
    *,
    base_s: float = 10.0,
    base_labels: Sequence[str] = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j"),
    floor_labels: Sequence[str] | None = None,
    n_rounds: int = 2,
    **run_kwargs: Mapping[int, dict],
) -> list[Round]:
    """``n_rounds`` equal rounds: one at a time takes ``base_s`` s for its items, slot
    count K takes ``timings[K]`` s and replies ``labels[K]`` (default: one at a time's)."""
    labels = labels or {}
    per_round = []
    for _ in range(n_rounds):
        runs = {ONE_AT_A_TIME: run(ONE_AT_A_TIME, 1, base_s, base_labels)}
        if floor_labels is not None:
            runs[FLOOR] = run(FLOOR, 1, base_s, floor_labels)
        for b, seconds in timings.items():
            extra = run_kwargs.get("extra", {}).get(b, {})
            runs[setting_name(b)] = run(
                setting_name(b), b, seconds, labels.get(b, base_labels), **extra
            )
        per_round.append(runs)
    return rounds(per_round)


def recorded(
    seconds: Mapping[int, Sequence[float]],
    *,
    n_items: int = 6,
    cpu: Mapping[int, Sequence[float]] | None = None,
    loads: Sequence[float] | None = None,
) -> list[Round]:
    """Rounds as a run recorded them: ``seconds[K][r]`` is slot count K's pass in round
    r (K = 1: one at a time), ``cpu[K][r]`` its CPU seconds, ``loads[r]`` the load
    average after each pass of round r; every reply agrees."""
    texts = tuple("abcdefghijklmnopqrstuvwxyz"[:n_items])
    n_rounds = len(seconds[1])
    per_round = []
    for r in range(n_rounds):
        runs = {}
        for k, values in seconds.items():
            name = ONE_AT_A_TIME if k == 1 else setting_name(k)
            runs[name] = run(
                name,
                k,
                values[r],
                texts,
                cpu_seconds=None if cpu is None else cpu[k][r],
                load=None if loads is None else loads[r],
            )
        per_round.append(runs)
    return rounds(per_round)

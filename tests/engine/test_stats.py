"""``Stats.step_split``: where the batch context's steps spent their time, as numbers that
add and subtract field by field (``b - a`` is the split between two readings)."""

from __future__ import annotations

import dataclasses

from llamabatch import Stats


def test_every_field_of_a_step_split_is_a_number_carried_by_add_and_subtract() -> None:
    stats = Stats(
        decode_calls=3,
        step_seconds=1.0,
        decode_seconds=0.5,
        logits_seconds=0.125,
        sampling_seconds=0.25,
        backend_sampled_rows=7,
    )
    a = stats.step_split
    assert (a.steps, a.decode, a.logits, a.sampling, a.other) == (3, 0.5, 0.125, 0.25, 0.125)
    twice = a + a
    for field in dataclasses.fields(a):
        value = getattr(a, field.name)
        assert isinstance(value, (int, float)), field.name
        assert getattr(twice, field.name) == 2 * value, field.name
        assert getattr(twice - a, field.name) == value, field.name

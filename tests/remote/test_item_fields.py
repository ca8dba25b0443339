"""The pool resolves an item's fields as the local engine does
(:func:`llamabatch.fields.resolve_item`): per-item ``sampling`` as for BatchGenerator, a
line's constraint replacing the generator's, and fields no request carries refused in
place (fake servers: no network, no model)."""

from __future__ import annotations

from fake_servers import FakeServers

from llamabatch import SamplingParams
from llamabatch.remote import RemoteGenerator


def _generator(fakes: FakeServers, sampling: SamplingParams | None = None) -> RemoteGenerator:
    return RemoteGenerator(fakes.urls, client=fakes.client, max_tokens=4, sampling=sampling)


def test_per_item_sampling_is_sent_as_for_batch_generator():
    fakes = FakeServers(1)
    with _generator(fakes) as gen:
        done = gen.complete_many(
            ["a", "b"], [SamplingParams(temperature=0.0), SamplingParams(top_k=3, seed=7)]
        )
    assert all(c.ok for c in done)
    bodies = sorted(fakes.servers[0].bodies, key=lambda b: b["prompt"])
    assert bodies[0]["temperature"] == 0.0 and (bodies[1]["top_k"], bodies[1]["seed"]) == (3, 7)


def test_a_lines_json_schema_on_a_choices_generator_and_a_refused_field_in_place():
    """Failed before: the schema item errored ("json_schema and choices are given") and
    logprobs were dropped without a word."""
    fakes = FakeServers(1)
    items = [
        {"prompt": "n", "json_schema": {"type": "integer"}},
        {"prompt": "l", "logprobs": 2},
        "plain",
    ]
    with _generator(fakes, SamplingParams(choices=["bug", "billing"])) as gen:
        done = gen.complete_many(items)
    assert [c.ok for c in done] == [True, False, True]
    assert "logprobs cannot be sent to a server" in done[1].error
    bodies = {b["prompt"]: b for b in fakes.servers[0].bodies}
    assert set(bodies) == {"n", "plain"}  # no request for the refused item
    assert '"bug"' not in bodies["n"]["grammar"] and '"bug"' in bodies["plain"]["grammar"]

"""The pool resolves an item's fields as the local engine does
(:func:`llamabatch.items.resolve_item`): per-item ``sampling`` as for BatchGenerator, a
line's constraint replacing the generator's, and fields no request carries refused in
place (fake servers: no network, no model)."""

from __future__ import annotations

import pytest
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


def _cut_off(prompt: str):
    """A hook: the server spells "billin" and runs out of max_tokens there."""
    import httpx

    if prompt != "cut":
        return None
    choice = {"index": 0, "text": "billin", "finish_reason": "length"}
    usage = {"prompt_tokens": 3, "completion_tokens": 6, "total_tokens": 9}
    return httpx.Response(200, json={"choices": [choice], "usage": usage})


def test_a_choices_reply_cut_off_by_max_tokens_is_the_items_error_as_locally():
    from llamabatch import BatchGenerator
    from llamabatch.testing import FakeBackend

    fakes = FakeServers(1)
    fakes.servers[0].hook = _cut_off
    labels = SamplingParams(choices=["billing", "bug"])
    with _generator(fakes) as gen:
        cut, plain = gen.complete_many([{"prompt": "cut", "choices": ["billing", "bug"]}, "long"])
    assert (cut.text, cut.finish_reason, cut.path) == ("", "error", "remote")
    assert plain.ok and plain.finish_reason == "length"  # no choices: a fragment is a reply
    local = BatchGenerator(backend=FakeBackend({"cut": "billing"}), max_tokens=6)
    (want,) = local.complete_many(["cut"], labels)
    assert cut.error == want.error  # the same rule, the same words
    assert "after 6 tokens ('billin') before it was one of the choices" in cut.error


def test_score_choices_without_choices_does_nothing_on_a_pool_as_locally():
    fakes = FakeServers(1)
    with _generator(fakes, SamplingParams(score_choices=True, choice_leading_space=False)) as gen:
        done = gen.complete_many(["free", {"prompt": "scored", "choices": ["a", "b"]}])
    assert done[0].ok and done[0].text == "re:free"
    assert not done[1].ok
    assert "score_choices, choice_leading_space cannot be sent to a server" in done[1].error


def test_a_sampling_list_that_does_not_match_unsized_prompts_is_refused():
    fakes = FakeServers(1)
    sampling = [SamplingParams(temperature=0.0)] * 3
    with _generator(fakes) as gen:
        for n in (2, 4):
            with pytest.raises(ValueError, match="sampling has 3 SamplingParams"):
                gen.complete_many(iter(["a", "b", "c", "d"][:n]), sampling)
        assert len(gen.complete_many(iter(["a", "b", "c"]), sampling)) == 3

"""The pool's order, slots, retries, backoff and recovery, against fake servers
(httpx.MockTransport: no network, no model; fast).

Every test checks the contract of issue 14: one completion per item, in input order,
each the reply to its own prompt, errors in place; a failed server's items go to another
server; a 4xx is the item's own error; a server that comes back is used again.
"""

from __future__ import annotations

import threading

import httpx
import pytest
from fake_servers import FakeServers

from llamabatch.errors import PoolUnavailable
from llamabatch.remote import RemoteGenerator

FAST = dict(
    backoff_s=0.001, max_backoff_s=0.002, cooldown_s=0.01, max_cooldown_s=0.05, give_up_s=10.0
)


def _generator(fakes: FakeServers, **kwargs) -> RemoteGenerator:
    return RemoteGenerator(fakes.urls, client=fakes.client, max_tokens=4, **{**FAST, **kwargs})


def _prompts(n: int) -> list[str]:
    return [f"item {i}" for i in range(n)]


def _answering(fakes: FakeServers, prompt: str, status: int, message: str) -> FakeServers:
    """``fakes`` whose every server answers ``prompt`` with HTTP ``status`` and an
    OpenAI-style error ``message``."""
    for server in fakes.servers:
        server.hook = lambda p: (
            httpx.Response(status, json={"error": {"message": message}}) if p == prompt else None
        )
    return fakes


def _check_in_order(done, prompts, skip: int | None = None) -> None:
    """``done`` answers ``prompts`` one by one, indexes counting from 0 (but ``skip``)."""
    indexes = [i for i in range(len(prompts) + (skip is not None)) if i != skip]
    assert [c.index for c in done] == indexes
    for c, p in zip(done, prompts):
        assert c.ok and c.text == "re:" + p and c.path == "remote", c


def test_every_item_once_in_input_order_across_servers_of_uneven_speed():
    fakes = FakeServers(3)
    delays = {0: 0.02, 1: 0.0, 2: 0.005}
    for k, server in enumerate(fakes.servers):
        server.hook = (lambda d: lambda prompt: threading.Event().wait(d) and None)(delays[k])
    prompts = _prompts(40)
    with _generator(fakes, concurrency=2, page_size=5) as gen:
        groups = list(gen.iter_groups(iter(prompts)))
        stats = gen.stats
    done = [c for g in groups for c in g]
    _check_in_order(done, prompts)
    assert all(1 <= len(g) <= 5 for g in groups)
    assert set(fakes.served_counts().values()) == {1}
    assert all(s.served for s in fakes.servers)  # every server took work
    assert stats.items == 40 and stats.requests == 40 and stats.retries == 0
    assert stats.generated_tokens == 80 and stats.prompt_tokens == sum(map(len, prompts))


def test_a_page_is_given_as_soon_as_its_first_item_is_done_not_held_for_a_slower_next():
    """A page is the run of completions done after the last one given: item 1 answers only
    once the caller holds item 0 (a pager that filled whole pages would wait 10 s first)."""
    fakes = FakeServers(1, total_slots=4)
    item_0_given = threading.Event()
    fakes.servers[0].hook = lambda p: (p == "item 1" and item_0_given.wait(10.0)) and None
    groups = []
    with _generator(fakes, page_size=3) as gen:
        for group in gen.iter_groups(_prompts(6)):
            groups.append([c.index for c in group])
            item_0_given.set()
    assert groups[0] == [0]
    assert [i for g in groups for i in g] == list(range(6))
    assert all(1 <= len(g) <= 3 for g in groups)


def test_a_server_gets_as_many_requests_in_flight_as_its_props_total_slots():
    fakes = FakeServers(1, total_slots=3)
    barrier = threading.Barrier(3, timeout=10)
    fakes.servers[0].hook = lambda prompt: barrier.wait() and None  # needs 3 at once
    with _generator(fakes, concurrency=1) as gen:  # /props wins over concurrency
        done = gen.complete_many(_prompts(9))
        assert gen.servers[0].slots == 3
    _check_in_order(done, _prompts(9))
    assert fakes.servers[0].max_in_flight == 3


def test_without_props_concurrency_sets_the_slots():
    fakes = FakeServers(2)
    barrier = threading.Barrier(4, timeout=10)  # 2 servers x 2 slots
    for server in fakes.servers:
        server.hook = lambda prompt: barrier.wait() and None
    with _generator(fakes, concurrency=2) as gen:
        done = gen.complete_many(_prompts(8))
    _check_in_order(done, _prompts(8))
    assert [s.max_in_flight for s in fakes.servers] == [2, 2]


def test_a_server_down_from_the_start_is_not_used_and_nothing_fails():
    fakes = FakeServers(2)
    fakes.servers[1].up = False
    with _generator(fakes) as gen:
        done = gen.complete_many(_prompts(10))
        assert not gen.servers[1].is_up and "refused" in gen.servers[1].last_error
    _check_in_order(done, _prompts(10))
    assert len(fakes.servers[0].served) == 10 and not fakes.servers[1].seen


@pytest.mark.parametrize("fault", ["disconnect", "503", "timeout", "garbage"])
def test_a_server_that_fails_mid_job_has_its_items_retried_elsewhere(fault):
    fakes = FakeServers(2)
    dying = fakes.servers[1]
    answered = []

    def hook(prompt):
        if len(answered) < 3:
            answered.append(prompt)
            return None
        if fault == "disconnect":
            dying.up = False  # the fake then breaks the answer off, and refuses probes
            return None
        if fault == "503":
            return httpx.Response(503, json={"error": {"message": "Loading model"}})
        if fault == "timeout":
            raise httpx.ReadTimeout("read timed out")
        return httpx.Response(200, text="<html>not json</html>")

    dying.hook = hook
    prompts = _prompts(30)
    with _generator(fakes, cooldown_s=60.0) as gen:  # no probe again during the test
        done = gen.complete_many(prompts)
        stats = gen.stats
    _check_in_order(done, prompts)
    assert set(fakes.served_counts().values()) == {1}  # nothing answered twice
    assert len(dying.served) == 3
    assert stats.retries >= 1 and stats.servers[dying.url]["faults"] >= 1
    retried = [c for c in done if c.attempts == 2]
    assert retried and all(c.server == fakes.servers[0].url for c in retried)


def test_a_4xx_is_the_items_own_error_in_place_and_is_not_retried():
    fakes = _answering(FakeServers(2), "item 4", 400, "bad prompt")
    prompts = _prompts(8)
    with _generator(fakes) as gen:
        done = gen.complete_many(prompts)
        assert gen.stats.items_failed == 1
    bad = done[4]
    assert bad.index == 4 and bad.finish_reason == "error" and bad.attempts == 1
    assert "HTTP 400" in bad.error and "bad prompt" in bad.error
    assert sum(s.seen.count("item 4") for s in fakes.servers) == 1
    _check_in_order(done[:4] + done[5:], prompts[:4] + prompts[5:], skip=4)
    assert all(s.is_up for s in gen.servers)  # a bad request says nothing of the server


def test_an_item_that_fails_everywhere_gets_its_error_after_max_attempts():
    fakes = _answering(FakeServers(2), "item 2", 500, "boom")
    prompts = _prompts(6)
    with _generator(fakes, max_attempts=3) as gen:
        done = gen.complete_many(prompts)
    failed = done[2]
    assert failed.finish_reason == "error" and failed.attempts == 3
    assert failed.error.startswith("failed 3 time(s)") and "HTTP 500: boom" in failed.error
    assert all(url in failed.error for url in fakes.urls)  # tried on both servers
    assert sum(s.seen.count("item 2") for s in fakes.servers) == 3
    _check_in_order(done[:2] + done[3:], prompts[:2] + prompts[3:], skip=2)


def test_a_server_that_comes_back_is_used_again():
    fakes = FakeServers(2)
    first, second = fakes.servers
    second.up = False
    came_back = threading.Event()

    def hook(prompt):
        if prompt == "item 3":  # bring the second server back, and stay busy until it works
            second.up = True
            assert came_back.wait(10), "the pool never used the server that came back"
        return None

    first.hook = hook
    second.hook = lambda prompt: came_back.set()
    prompts = _prompts(12)
    with _generator(fakes) as gen:
        done = gen.complete_many(prompts)
        assert gen.servers[1].is_up and gen.servers[1].n_probes >= 2
    _check_in_order(done, prompts)
    assert second.served and set(fakes.served_counts().values()) == {1}


def test_when_every_server_stays_down_the_done_items_come_first_then_pool_unavailable():
    fakes = FakeServers(1)
    server = fakes.servers[0]

    def hook(prompt):
        if len(server.served) >= 4:
            server.up = False
        return None

    server.hook = hook
    got = []
    with _generator(fakes, give_up_s=0.2) as gen:
        with pytest.raises(PoolUnavailable, match="no server answered"):
            for group in gen.iter_groups(_prompts(20)):
                got.extend(group)
    assert 1 <= len(got) <= 4
    _check_in_order(got, _prompts(len(got)))


def test_chat_messages_go_to_chat_completions_and_prompts_to_completions():
    fakes = FakeServers(1)
    items = ["plain", [{"role": "user", "content": "hello"}], "long one"]
    with _generator(fakes) as gen:
        done = gen.complete_many(items)
    assert [c.text for c in done] == ["re:plain", "re:hello", "re:long one"]
    assert [c.finish_reason for c in done] == ["stop", "stop", "length"]
    assert "messages" in fakes.servers[0].bodies[1] and "prompt" in fakes.servers[0].bodies[0]
    assert all(b["model"] == "fake-model" and b["max_tokens"] == 4 for b in fakes.servers[0].bodies)
    assert all(c.token_ids == () and c.n_tokens == 2 for c in done)


def test_a_bad_item_is_an_error_in_place_without_any_request():
    fakes = FakeServers(1)
    with _generator(fakes) as gen:
        done = gen.complete_many(["a", 12, b"\xff", "b"])
    assert [c.ok for c in done] == [True, False, False, True]
    assert "prompt is int" in done[1].error and "not valid UTF-8" in done[2].error
    assert fakes.servers[0].seen == ["a", "b"]


def test_an_abandoned_iteration_leaves_nothing_behind_for_the_next_one():
    fakes = FakeServers(2)
    with _generator(fakes, concurrency=2, page_size=1) as gen:
        for _group in gen.iter_groups(_prompts(10)):
            break
        again = [f"again {i}" for i in range(6)]
        done = gen.complete_many(again)
    _check_in_order(done, again)


def test_closed_generator_refuses_work_and_close_is_idempotent():
    fakes = FakeServers(1)
    gen = _generator(fakes)
    gen.close()
    gen.close()
    assert gen.closed
    with pytest.raises(ValueError, match="closed"):
        gen.complete_many(["a"])


@pytest.mark.parametrize(
    "servers, kwargs, message",
    [
        (["ftp://x"], {}, "is not a URL"),
        (["http://a:1", "http://a:1/v1/"], {}, "given twice"),
        ([], {}, "no server given"),
        ("http://a:1", {}, "one string"),
        (["http://a:1"], {"concurrency": 0}, "concurrency=0"),
        (["http://a:1"], {"max_attempts": 0}, "max_attempts=0"),
        (["http://a:1"], {"timeout_s": -1}, "timeout_s=-1"),
    ],
)
def test_bad_arguments_are_named(servers, kwargs, message):
    with pytest.raises(ValueError, match=message):
        RemoteGenerator(servers, client=httpx.Client(), **kwargs)


def test_a_server_that_comes_back_takes_work_beside_a_server_with_many_slots():
    fakes = FakeServers(2)
    first, second = fakes.servers
    first.total_slots = 8  # always a free slot on the first server
    second.up = False

    def hook(prompt):
        if prompt == "item 2":
            second.up = True
        if second.up:
            threading.Event().wait(0.02)  # the job lasts past the second's cool-down
        return None

    first.hook = hook
    prompts = _prompts(40)
    with _generator(fakes) as gen:
        done = gen.complete_many(prompts)
    _check_in_order(done, prompts)
    assert second.served and set(fakes.served_counts().values()) == {1}

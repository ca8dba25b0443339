"""The pool's lifetime. ``ServerPool(give_up_s=...)`` counts from the moment every
server is seen down, not from the pool's creation: a first probe that comes late must
not give up at once; and a ``RemoteGenerator`` whose pool refuses its servers closes
the client it made."""

from __future__ import annotations

import threading

import httpx
import pytest

from llamabatch.errors import PoolUnavailable, ServerFault
from llamabatch.remote import RemoteGenerator
from llamabatch.remote.pool import ServerPool


def _down(url: str):
    raise ServerFault(f"{url}: connection refused")


def _acquire_in_thread(pool: ServerPool) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def worker() -> None:
        try:
            outcome.append(pool.acquire())
        except PoolUnavailable as exc:
            outcome.append(exc)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    return thread, outcome


def test_give_up_counts_from_the_first_failed_probe_not_from_creation() -> None:
    now = [0.0]
    pool = ServerPool(
        ["http://127.0.0.1:9"], probe=_down, cooldown_s=1000.0, give_up_s=10.0, clock=lambda: now[0]
    )
    now[0] = 100.0  # the job reads its input for a while before the first probe
    pool.probe_all()  # down at t=100: give up at t=110, not now
    thread, outcome = _acquire_in_thread(pool)
    thread.join(timeout=0.3)
    assert outcome == []  # still waiting for a server or for give_up_s
    pool.close()
    thread.join(timeout=5)
    assert outcome == [None]

    now[0] = 111.0  # and it does give up once give_up_s has passed since
    fresh = ServerPool(
        ["http://127.0.0.1:9"], probe=_down, cooldown_s=1000.0, give_up_s=10.0, clock=lambda: now[0]
    )
    fresh.probe_all()
    now[0] = 121.0
    try:
        fresh.acquire()
    except PoolUnavailable as exc:
        assert "no server answered for 10 s" in str(exc)
    else:
        raise AssertionError("acquire did not give up after give_up_s")


def test_the_generators_own_client_is_closed_when_the_pool_refuses_the_servers(
    monkeypatch,
) -> None:
    made: list[httpx.Client] = []

    class Recording(httpx.Client):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(httpx, "Client", Recording)
    with pytest.raises(ValueError, match="given twice"):
        RemoteGenerator(["http://127.0.0.1:9", "http://127.0.0.1:9"])
    assert len(made) == 1 and made[0].is_closed


def _refused(url: str):
    raise ServerFault(f"{url}: cannot connect: connection refused", reached=False)


def test_a_pool_no_server_of_which_can_be_connected_to_gives_up_in_seconds() -> None:
    now = [0.0]
    pool = ServerPool(
        ["http://127.0.0.1:9", "http://127.0.0.1:10"],
        probe=_refused,
        cooldown_s=1000.0,
        clock=lambda: now[0],
    )  # give_up_s 120 and connect_give_up_s 10: the defaults
    pool.probe_all()
    now[0] = 10.0
    thread, outcome = _acquire_in_thread(pool)
    thread.join(timeout=5)
    pool.close()
    (exc,) = outcome
    assert isinstance(exc, PoolUnavailable), exc
    assert "could be connected to in 10 s" in str(exc) and "check the URLs" in str(exc)
    assert "http://127.0.0.1:10: " in str(exc)


def test_a_server_that_answers_with_an_error_keeps_the_long_give_up() -> None:
    # a llama-server loading its model answers 503: it is there, so give_up_s applies
    now = [0.0]
    answers = iter([_refused])

    def probe(url: str):
        return next(answers, _down)(url)

    pool = ServerPool(
        ["http://127.0.0.1:9"], probe=probe, cooldown_s=1.0, give_up_s=60.0, clock=lambda: now[0]
    )
    pool.probe_all()  # refused
    now[0] = 1.0
    thread, outcome = _acquire_in_thread(pool)  # probes again: it answers, with an error
    thread.join(timeout=0.3)
    now[0] = 30.0  # past connect_give_up_s, within give_up_s
    thread.join(timeout=0.3)
    assert outcome == []
    pool.close()
    thread.join(timeout=5)
    assert outcome == [None]


def test_a_remote_generator_on_urls_where_nothing_listens_fails_in_seconds() -> None:
    from llamabatch.testing.servers import free_port

    urls = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    with RemoteGenerator(urls, cooldown_s=0.05, connect_give_up_s=0.5) as gen:
        with pytest.raises(PoolUnavailable, match="could be connected to in 0.5 s"):
            gen.complete_many(["a", "b"])

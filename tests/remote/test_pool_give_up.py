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


def test_give_up_counts_from_the_first_failed_probe_not_from_creation() -> None:
    now = [0.0]
    pool = ServerPool(
        ["http://127.0.0.1:9"], probe=_down, cooldown_s=1000.0, give_up_s=10.0, clock=lambda: now[0]
    )
    now[0] = 100.0  # the job reads its input for a while before the first probe
    pool.probe_all()  # down at t=100: give up at t=110, not now
    outcome: list[object] = []

    def worker() -> None:
        try:
            outcome.append(pool.acquire())
        except PoolUnavailable as exc:
            outcome.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
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

"""The servers of a pool, their slots and their health.

Each server has ``slots`` requests in flight at most. A server that fails an exchange
(:class:`~llamabatch.remote.client.ServerFault`) is *down* for a cool-down; the first
worker that needs a server after it ends probes it again (``GET /v1/models``, and
``/props`` for its slots) and brings it back up, or doubles its cool-down (up to
``max_cooldown_s``). When every server has been down for ``give_up_s`` seconds, waiting
raises :class:`PoolUnavailable`; while no server could even be connected to since the
start (a wrong URL, nothing listening), after ``connect_give_up_s`` already.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import ParameterError, PoolUnavailable
from .client import ServerFault, ServerInfo


def normalize_url(url: object) -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing ``/`` or ``/v1``.

    Raises:
        ValueError: not an http or https URL with a host (the URL is named).
    """
    text = str(url).strip() if isinstance(url, str) else None
    parts = urlsplit(text) if text else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"server {url!r} is not a URL: expected http://HOST:PORT or "
            "https://HOST[:PORT][/PREFIX]"
        )
    text = text.rstrip("/")
    return text[:-3] if text.endswith("/v1") else text


@dataclass(slots=True)
class Server:
    """One server and what the pool knows of it (read it, do not change it).

    Attributes:
        url: base URL, without ``/v1``.
        slots: requests in flight at most (``total_slots`` of ``/props``, else the
            pool's ``concurrency``).
        model: the first model id of ``/v1/models``, sent as ``model``.
        is_up: False while down; is_probing: a worker is probing it now; down_until:
            when its cool-down ends (the pool's clock); cooldown: its length, seconds.
        last_error: the last fault or failed probe, or ``None``.
        in_flight: requests now in flight.
        n_requests: requests sent; n_faults: of those, failed ones; n_probes: probes.
    """

    url: str
    slots: int
    model: str | None = None
    # health: up, or down until a probe after its cool-down brings it back
    is_up: bool = False
    is_probing: bool = False
    down_until: float = 0.0
    cooldown: float = 0.0
    last_error: str | None = None
    # counts
    in_flight: int = 0
    n_requests: int = 0
    n_faults: int = 0
    n_probes: int = 0


class ServerPool:
    """Hand out server slots to worker threads; track faults and bring servers back.

    Args:
        urls: the servers' base URLs (distinct after :func:`normalize_url`).
        probe: ``probe(url) -> ServerInfo``; raises ServerFault when the server is down.
        concurrency: slots of a server that does not say (no ``/props``), >= 1.
        cooldown_s: first cool-down of a failed server, seconds; doubled after each
            failed probe up to ``max_cooldown_s``.
        give_up_s: seconds every server may stay down before :class:`PoolUnavailable`.
        connect_give_up_s: the same while no server was ever connected to (every probe
            so far failed to connect: ``ServerFault.reached`` False); at most
            ``give_up_s``. A server that answers at all, even with an error (a
            llama-server still loading its model answers 503), gets ``give_up_s``.
        clock: monotonic seconds (``time.monotonic``).

    Raises:
        ValueError: no URL, a duplicate or a bad URL, or a value out of range (named).
    """

    def __init__(
        self,
        urls: Collection[str],
        probe: Callable[[str], ServerInfo],
        *,
        concurrency: int = 1,
        cooldown_s: float = 2.0,
        max_cooldown_s: float = 30.0,
        give_up_s: float = 120.0,
        connect_give_up_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ParameterError(
                "concurrency", concurrency, "an integer >= 1 (requests in flight per server)"
            )
        for name, value in (
            ("cooldown_s", cooldown_s),
            ("max_cooldown_s", max_cooldown_s),
            ("give_up_s", give_up_s),
            ("connect_give_up_s", connect_give_up_s),
        ):
            if not isinstance(value, (int, float)) or not value >= 0:
                raise ParameterError(name, value, "seconds >= 0")
        normalized = [normalize_url(u) for u in urls]
        if not normalized:
            raise ValueError("no server given: at least one URL is needed")
        if len(set(normalized)) != len(normalized):
            dup = next(u for u in normalized if normalized.count(u) > 1)
            raise ValueError(f"server {dup!r} is given twice")
        self.servers = [Server(u, concurrency) for u in normalized]
        self._probe, self._concurrency = probe, concurrency
        self._cooldown, self._max_cooldown, self._give_up = cooldown_s, max_cooldown_s, give_up_s
        self._connect_give_up = min(connect_give_up_s, give_up_s)
        self._reached = False  # a server was connected to (a probe got an answer)
        self._clock = clock
        self._cond = threading.Condition()
        self._all_down_since: float | None = None  # set when a probe or fault leaves none up
        self._closed = False

    # -- state --------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """Sum of the servers' slots (requests in flight at most)."""
        with self._cond:
            return sum(s.slots for s in self.servers)

    def close(self) -> None:
        """Wake every waiting worker; :meth:`acquire` then returns ``None``."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def probe_all(self) -> None:
        """Probe every server once (at start): up ones get their slots and model."""
        for server in self.servers:
            with self._cond:
                server.is_probing = True
            self._run_probe(server)

    def _run_probe(self, server: Server) -> None:
        reached = True  # a failed probe that got an answer (ServerFault.reached)
        try:
            info, error = self._probe(server.url), None
        except ServerFault as exc:
            info, error, reached = None, str(exc), exc.reached
        with self._cond:
            server.is_probing = False
            server.n_probes += 1
            if info is not None:
                self._reached = True
                server.is_up, server.cooldown, server.last_error = True, 0.0, None
                server.model = info.model
                server.slots = info.total_slots or self._concurrency
                self._all_down_since = None
            else:
                self._reached = self._reached or reached
                server.last_error = error
                self._set_down(server, grow=True)
            self._cond.notify_all()

    def _set_down(self, server: Server, grow: bool) -> None:
        server.is_up = False
        base = server.cooldown * 2 if grow and server.cooldown else self._cooldown
        server.cooldown = min(base, self._max_cooldown) if grow else self._cooldown
        server.down_until = self._clock() + server.cooldown
        if self._all_down_since is None and not any(s.is_up for s in self.servers):
            self._all_down_since = self._clock()

    # -- slots --------------------------------------------------------------------------
    def _free(self, avoid: Collection[str]) -> Server | None:
        up = [s for s in self.servers if s.is_up]
        fresh = [s for s in up if s.url not in avoid]
        choices = [s for s in (fresh or up) if s.in_flight < s.slots]
        if not choices:
            return None
        return min(choices, key=lambda s: (s.in_flight / s.slots, s.n_requests))

    def acquire(self, avoid: Collection[str] = ()) -> Server | None:
        """Wait for a free slot, preferring servers not in ``avoid`` (URLs this item
        already failed on) while one of those is up; first probe a server whose cool-down
        ended, if any (this worker does it).

        Returns:
            the server (its ``in_flight`` counts this request), or ``None`` once closed.

        Raises:
            PoolUnavailable: every server has been down for ``give_up_s`` seconds.
        """
        with self._cond:
            while not self._closed:
                now = self._clock()
                due = [
                    s
                    for s in self.servers
                    if not s.is_up and not s.is_probing and s.down_until <= now
                ]
                if due:  # check it now, even with free slots elsewhere: use it again soon
                    due[0].is_probing = True
                    self._cond.release()
                    try:
                        self._run_probe(due[0])
                    finally:
                        self._cond.acquire()
                    continue
                server = self._free(avoid)
                if server is not None:
                    server.in_flight += 1
                    server.n_requests += 1
                    return server
                give_up = self._give_up if self._reached else self._connect_give_up
                if (
                    self._all_down_since is not None
                    and not any(s.is_probing for s in self.servers)
                    and now - self._all_down_since >= give_up
                ):
                    raise PoolUnavailable(self._unavailable(give_up))
                waits = [
                    s.down_until - now for s in self.servers if not s.is_up and not s.is_probing
                ]
                if self._all_down_since is not None:
                    waits.append(self._all_down_since + give_up - now)
                self._cond.wait(timeout=max(0.001, min(waits)) if waits else 1.0)
        return None

    def _unavailable(self, give_up: float) -> str:
        errors = "; ".join(f"{s.url}: {s.last_error}" for s in self.servers)
        if self._reached:
            return f"no server answered for {give_up:g} s ({errors})"
        return (
            f"no server of the pool could be connected to in {give_up:g} s ({errors}): "
            "check the URLs and that the servers are running"
        )

    def release(self, server: Server, fault: str | None = None) -> None:
        """Give a slot back; with ``fault``, the server goes down for a cool-down."""
        with self._cond:
            server.in_flight -= 1
            if fault is not None:
                server.n_faults += 1
                server.last_error = fault
                if server.is_up:
                    self._set_down(server, grow=False)
            self._cond.notify_all()

"""A library caller hears of a busy CPU once per generator, as a logged warning whose
hint follows the ``Llama``'s threads (the load figure is a stand-in; the machine is not
loaded, and no time is measured)."""

from __future__ import annotations

import logging
import os

import pytest

import llamabatch._util.busy as busy
from llamabatch import BatchGenerator
from llamabatch.testing import FakeBackend


class _Heard(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def heard(monkeypatch):
    logger = logging.getLogger("llamabatch.busy")
    handler = _Heard()
    logger.addHandler(handler)
    monkeypatch.setattr(busy, "BUSY_MIN_S", 0.0)  # any run speaks of the load
    yield handler
    logger.removeHandler(handler)


def _generator() -> BatchGenerator:
    return BatchGenerator(backend=FakeBackend(), slots=2)


def test_a_busy_cpu_is_logged_once_per_generator(heard, monkeypatch):
    cores = os.cpu_count()
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5 * cores, 2.0 * cores, cores))
    with _generator() as gen:
        gen.complete_many(["a", "b", "c"])
        gen.complete_many(["d"])
    (message,) = heard.messages
    assert message.startswith(
        f"llamabatch: the CPU was busy during this generator's runs (load average "
        f"{2.5 * cores:.1f} on {cores} cores)"
    )
    assert "try Llama(n_threads=1) (or fewer threads than the idle cores)" in message
    with _generator() as gen:  # another generator: told again
        gen.complete_many(["e"])
    assert len(heard.messages) == 2


def test_a_quiet_cpu_is_not_logged(heard, monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    with _generator() as gen:
        gen.complete_many(["a", "b"])
    assert heard.messages == []

"""Issue 10, fault 2 (the mechanism): a KeyboardInterrupt raised inside a ctypes callback
is dropped by ctypes; inside ``callback_interrupts()`` it is raised when the block ends.
A plain ctypes callback stands in for llama.cpp's log callback (no library needed)."""

from __future__ import annotations

import ctypes
import sys
import threading

import pytest

from llamabatch._util.interrupts import callback_interrupts

CALLBACK = ctypes.CFUNCTYPE(None)


def _interrupt() -> None:
    raise KeyboardInterrupt


def call_c_that_calls_back() -> str:
    """Run a C call whose Python callback raises KeyboardInterrupt; it returns normally."""
    CALLBACK(_interrupt)()  # ctypes reports the exception and drops it
    return "the C call went on"


def test_an_interrupt_dropped_in_a_callback_is_raised_when_the_block_ends(capsys):
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with callback_interrupts():
            reached.append(call_c_that_calls_back())
    assert reached == ["the C call went on"]
    assert "Exception ignored" not in capsys.readouterr().err


def test_without_raise_at_end_the_caller_sees_it():
    with callback_interrupts(raise_at_end=False) as seen:
        call_c_that_calls_back()
    assert seen.caught
    with pytest.raises(KeyboardInterrupt):
        seen.check()


@pytest.fixture()
def reports(monkeypatch) -> list:
    """The reports that reach the hook in place before ours (a recorder)."""
    seen: list = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


def test_outside_a_block_reports_go_to_the_previous_hook(reports):
    with callback_interrupts():
        pass
    call_c_that_calls_back()  # no block open: passed on as ctypes reported it
    assert [r.exc_type for r in reports] == [KeyboardInterrupt]


def test_blocks_closed_out_of_order_by_two_threads_leave_routing_intact(reports):
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
    caught = {}

    def thread_a():
        with callback_interrupts(raise_at_end=False) as seen:
            a_open.set()
            b_open.wait(10)
        caught["a"] = seen.caught
        a_closed.set()

    def thread_b():
        a_open.wait(10)
        with callback_interrupts(raise_at_end=False) as seen:
            b_open.set()
            a_closed.wait(10)
            call_c_that_calls_back()
        caught["b"] = seen.caught

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert caught == {"a": False, "b": True} and reports == []
    call_c_that_calls_back()  # both closed: not swallowed by a stale block
    assert [r.exc_type for r in reports] == [KeyboardInterrupt]

"""Online use on the fake backend: items submitted from many threads (or awaited from
asyncio) share the slots; cancellation, close and an engine-thread failure."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.errors import GeneratorBusy, GeneratorClosed
from llamabatch.testing import AloneCall, FakeBackend, StartSeqCall

REPLIES = {f"p{i}": f"reply {i}" + " x" * (i % 5) for i in range(64)}
SAMPLING = SamplingParams(temperature=0, seed=1)


def _gen(**kwargs: object) -> BatchGenerator:
    fake = FakeBackend(REPLIES, **kwargs)  # type: ignore[arg-type]
    return BatchGenerator(backend=fake, slots=4, max_tokens=40, sampling=SAMPLING)


def _wait(predicate, what: str) -> None:
    deadline = time.monotonic() + 20
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def test_sixteen_threads_of_four_prompts_share_the_slots():
    with _gen() as gen:
        want = {c.text for c in gen.complete_many(list(REPLIES))}
        futures: dict[str, object] = {}
        put = threading.Lock()

        def client(k: int) -> None:
            for j in range(4):
                prompt = f"p{4 * k + j}"
                future = gen.submit(prompt)
                with put:
                    futures[prompt] = future

        before = (gen.stats.decode_calls, gen.stats.generated_tokens)
        with gen.lock:  # the engine cannot step: every submission waits together
            threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        results = {p: f.result(timeout=30) for p, f in futures.items()}  # type: ignore[attr-defined]
        assert {p: c.text for p, c in results.items()} == REPLIES
        assert {c.text for c in results.values()} == want
        assert sorted(c.index for c in results.values()) == list(range(64))  # submission numbers
        assert all(c.path == "batch" for c in results.values())
        decodes = gen.stats.decode_calls - before[0]
        tokens = gen.stats.generated_tokens - before[1]
        assert decodes < tokens / 2, (decodes, tokens)  # several sequences per decode


def test_a_cancelled_waiting_item_never_runs_and_the_others_complete():
    with _gen() as gen:
        with gen.lock:
            first = gen.submit("p1")
            cancelled = gen.submit("p2", SamplingParams(temperature=0, seed=999))
            last = gen.submit("p3")
            assert cancelled.cancel()
        assert (first.result(timeout=30).text, last.result(timeout=30).text) == (
            REPLIES["p1"],
            REPLIES["p3"],
        )
        assert cancelled.cancelled()
        ran = [
            c.sampling.seed
            for c in gen.backend.log  # type: ignore[attr-defined]
            if isinstance(c, (StartSeqCall, AloneCall))
        ]
        assert 999 not in ran and ran


def test_asyncio_gather_of_acomplete():
    async def main(gen: BatchGenerator) -> list:
        return await asyncio.gather(*(gen.acomplete(f"p{i}") for i in range(16)))

    with _gen() as gen:
        out = asyncio.run(main(gen))
    assert [c.text for c in out] == [REPLIES[f"p{i}"] for i in range(16)]
    assert len({c.index for c in out}) == 16


def test_complete_many_while_the_engine_thread_runs_keeps_its_order():
    with _gen() as gen:
        futures = [gen.submit(f"p{i}") for i in range(8)]
        got = gen.complete_many([f"p{i}" for i in range(20, 40)])
        pages = list(gen.iter_groups([f"p{i}" for i in range(40, 50)]))
        assert [c.index for c in got] == list(range(20))
        assert [c.text for c in got] == [REPLIES[f"p{i}"] for i in range(20, 40)]
        assert [len(p) for p in pages] == [4, 4, 2]
        assert [c.text for p in pages for c in p] == [REPLIES[f"p{i}"] for i in range(40, 50)]
        assert [f.result(timeout=30).text for f in futures] == [REPLIES[f"p{i}"] for i in range(8)]


class Gated(FakeBackend):
    """A backend whose batch steps wait for ``gate`` (``entered``: one began)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.entered, self.gate = threading.Event(), threading.Event()

    def run(self, plan):  # type: ignore[no-untyped-def]
        self.entered.set()
        assert self.gate.wait(20)
        return super().run(plan)


def test_close_cancels_waiting_items_lets_running_ones_finish_and_refuses_more():
    fake = Gated(REPLIES)
    gen = BatchGenerator(backend=fake, slots=2, sampling=SAMPLING)
    with gen.lock:  # both wait, so the first step takes both
        running = [gen.submit("p1"), gen.submit("p2")]
    assert fake.entered.wait(20)  # the engine is inside a step with both items
    waiting = gen.submit("p3")
    closer = threading.Thread(target=gen.close)
    closer.start()
    _wait(waiting.cancelled, "close cancels the waiting item")
    with pytest.raises(GeneratorClosed):
        gen.submit("p4")
    assert closer.is_alive()  # close waits for the running items
    fake.gate.set()
    closer.join(timeout=30)
    assert not closer.is_alive() and gen.closed
    assert [f.result(timeout=0).text for f in running] == [REPLIES["p1"], REPLIES["p2"]]


class Broken(FakeBackend):
    """A backend whose one-at-a-time path fails with an error the engine does not expect."""

    def run_alone(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")


def test_an_engine_thread_exception_reaches_every_pending_future():
    gen = BatchGenerator(backend=Broken(REPLIES), slots=1, sampling=SAMPLING)
    with gen.lock:
        futures = [gen.submit(f"p{i}") for i in range(5)]
    for f in futures:
        with pytest.raises(RuntimeError, match="boom"):
            f.result(timeout=30)
    again = gen.submit("p1")  # a new engine thread: fails the same way, never hangs
    with pytest.raises(RuntimeError, match="boom"):
        again.result(timeout=30)
    gen.close()


CTRL_C = """
import os, signal, threading
from llamabatch import BatchGenerator
from llamabatch.testing import FakeBackend

class Gated(FakeBackend):
    gate = threading.Event()
    def run(self, plan):
        self.gate.wait(60)
        return super().run(plan)

gen = BatchGenerator(backend=Gated({"p1": "one"}), slots=2)
future = gen.submit("p1")
try:  # the Timer inside: on a loaded machine it may fire before result() is entered
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    future.result()
except KeyboardInterrupt:
    print("interrupted", flush=True)
Gated.gate.set()
gen.close()
print("closed", future.result(timeout=0).text)
"""


def test_ctrl_c_stops_a_wait_on_a_future_and_close_then_finishes_the_item():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", CTRL_C], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["interrupted", "closed", "one"]


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt(), ValueError("x")])
def test_a_raising_done_callback_reaches_no_other_future(caplog, raised: BaseException):
    def bad(_future) -> None:
        raise raised

    with _gen() as gen:
        later: list[str] = []
        with gen.lock:  # all four start in one step
            futures = [gen.submit(f"p{i}") for i in range(4)]
            futures[0].add_done_callback(bad)
            futures[0].add_done_callback(lambda f: later.append(f.result().text))
        texts = [f.result(timeout=20).text for f in futures]
        assert texts == [REPLIES[f"p{i}"] for i in range(4)]
        assert later == [REPLIES["p0"]]  # the callback after it still ran
        assert type(raised).__name__ in caplog.text  # logged, as concurrent.futures does
        assert gen.submit("p5").result(timeout=20).text == REPLIES["p5"]  # the engine goes on


def test_waiting_for_items_inside_a_done_callback_raises_generator_busy():
    with _gen() as gen:
        seen: list[object] = []
        ran = threading.Event()

        def callback(_future) -> None:
            for call in (
                lambda: gen.complete_many(["p5", "p6"]),
                lambda: list(gen.iter_groups(["p5"])),
                lambda: gen.submit("p7").result(),
            ):
                try:
                    seen.append(call())
                except Exception as exc:  # noqa: BLE001 - what the callback saw
                    seen.append(exc)
            ran.set()

        gen.submit("p1").add_done_callback(callback)
        assert ran.wait(20), "the callback never returned"
        assert [type(e) for e in seen] == [GeneratorBusy] * 3, seen
        assert "done-callback" in str(seen[0]) and "Future.result()" in str(seen[2])
        assert gen.submit("p3").result(timeout=20).text == REPLIES["p3"]  # nothing blocked


class SlowTokens(FakeBackend):
    """Tokenizing ``"slow"`` waits (up to 5 s) for ``loop_ran``, which a coroutine sets: it is
    set in time only when the event loop runs while the prompt is tokenized."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.loop_ran = threading.Event()
        self.loop_was_free: bool | None = None

    def tokenize(self, text: str) -> list[int]:
        if text == "slow":
            self.loop_was_free = self.loop_ran.wait(5)
            text = "p1"
        return super().tokenize(text)


def test_acomplete_tokenizes_off_the_event_loop_and_numbers_in_call_order():
    fake = SlowTokens(REPLIES)

    async def main(gen: BatchGenerator) -> list:
        slow = asyncio.ensure_future(gen.acomplete("slow"))
        others = [asyncio.ensure_future(gen.acomplete(f"p{i}")) for i in range(2, 6)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        fake.loop_ran.set()
        return await asyncio.gather(slow, *others)

    with BatchGenerator(backend=fake, slots=4, max_tokens=40, sampling=SAMPLING) as gen:
        out = asyncio.run(main(gen))
    assert fake.loop_was_free is True
    assert [c.text for c in out] == [REPLIES["p1"]] + [REPLIES[f"p{i}"] for i in range(2, 6)]
    assert [c.index for c in out] == list(range(5))  # numbered in call order


def _in_thread(fn):
    """``fn()`` in a thread joined with a timeout (a hang fails the test): what it raised."""
    out: list[BaseException | None] = []

    def body() -> None:
        try:
            fn()
            out.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "still waiting after 20 s"
    return out[0]


def test_waiting_while_holding_the_lock_raises_at_once_naming_it():
    with _gen() as gen:
        futures: list = []

        def result_under_lock() -> None:
            with gen.lock:
                futures.append(gen.submit("p1"))  # submitting under the lock is fine
                futures[0].result(timeout=30)

        def complete_many_under_lock() -> None:
            with gen.lock:
                gen.complete_many(["p2", "p3"])

        def close_under_lock() -> None:
            with gen.lock, gen.lock:  # held twice
                gen.close()

        for call in (result_under_lock, complete_many_under_lock, close_under_lock):
            exc = _in_thread(call)
            assert isinstance(exc, GeneratorBusy), (call.__name__, exc)
            assert "llm_lock" in str(exc), exc
        assert not gen.closed  # close changed nothing: it works outside the lock
        assert futures[0].result(timeout=20).text == REPLIES["p1"]
        assert [c.text for c in gen.complete_many(["p2", "p3"])] == [REPLIES["p2"], REPLIES["p3"]]
        assert _in_thread(gen.close) is None
        assert gen.closed


def test_acomplete_while_the_event_loops_thread_holds_the_lock_raises_at_once():
    """As ``result()`` does: the engine thread needs the lock for every step."""

    async def main(gen: BatchGenerator) -> tuple[BaseException | None, str]:
        raised = None
        with gen.lock:
            try:  # the bound turns a hang into a failure instead of a stuck test
                await asyncio.wait_for(gen.acomplete("p1"), 10)
            except (GeneratorBusy, asyncio.TimeoutError) as exc:
                raised = exc
        return raised, (await gen.acomplete("p2")).text

    with _gen() as gen:
        raised, text = asyncio.run(main(gen))
        assert isinstance(raised, GeneratorBusy), raised
        assert "llm_lock" in str(raised) and "acomplete()" in str(raised)
        assert text == REPLIES["p2"]  # outside the lock it works
        assert gen.submit("p3").result(timeout=20).text == REPLIES["p3"]


FORK = """
import os, signal, sys
from llamabatch import BatchGenerator
from llamabatch.errors import GeneratorClosed
from llamabatch.testing import FakeBackend

gen = BatchGenerator(backend=FakeBackend({"p1": "one", "p2": "two"}), slots=2)
print("parent", gen.submit("p1").result(timeout=20).text, flush=True)
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a hang ends the child by SIGALRM
    for name, call in [
        ("submit", lambda: gen.submit("p2").result()),
        ("complete_many", lambda: gen.complete_many(["p2"])),
    ]:
        try:
            call()
            print(name, "ran", flush=True)
        except GeneratorClosed as exc:
            says = ("os.fork()" in str(exc), str(os.getppid()) in str(exc))
            print(name, "refused", *says, flush=True)
    gen.close()
    print("child closed", gen.closed, flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child status", status, flush=True)
print("parent", gen.submit("p2").result(timeout=20).text, flush=True)
gen.close()
"""


def test_a_forked_child_is_told_to_make_its_own_generator_and_the_parent_goes_on():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FORK], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "parent one",
        "submit refused True True",
        "complete_many refused True True",
        "child closed True",
        "child status 0",
        "parent two",
    ], done.stdout + done.stderr[-2000:]

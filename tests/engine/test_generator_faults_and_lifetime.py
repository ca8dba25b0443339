"""Issue 5 on the fake backend (no llama.cpp): what the scheduler and the generator do
when a group is interrupted, odd prompt types, the lock of a generator without a Llama.

The broad properties (garbage prompts in place, decode faults, KV empty between groups)
are in tests/test_properties.py; these are the fault and lifetime cases.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from llamabatch import BatchGenerator
from llamabatch.testing import FakeBackend

REPLIES = {"apple": "fruit", "kale": "vegetable", "salmon": "fish", "rye": "grain"}


class InterruptedFake(FakeBackend):
    """A fake whose ``at``-th decode raises ``exc`` (e.g. Ctrl-C in a long decode)."""

    def __init__(self, *args, at: int, exc: BaseException, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at, self.exc, self.n_decodes = at, exc, 0

    def run(self, spans):
        self.n_decodes += 1
        if self.n_decodes == self.at:
            raise self.exc
        return super().run(spans)


@pytest.mark.parametrize("at", [1, 3])
def test_an_interrupt_in_the_middle_of_a_decode_leaves_no_slot_filled(at):
    fake = InterruptedFake(REPLIES, at=at, exc=KeyboardInterrupt())
    gen = BatchGenerator(backend=fake, slots=4, max_tokens=20)
    with pytest.raises(KeyboardInterrupt):
        gen.complete_many(["apple", "kale", "salmon", "rye"])
    assert fake.kv_lengths == (0, 0, 0, 0)  # cleared on the way out
    # the generator is still usable, and batching was not turned off by an interrupt
    out = gen.complete_many(["rye", "salmon", "kale", "apple"])
    assert [c.text for c in out] == ["grain", "fish", "vegetable", "fruit"]
    assert [c.path for c in out] == ["batch"] * 4 and gen.stats.batching_enabled
    assert fake.violations == []


@pytest.mark.parametrize("at", [1, 3])
def test_an_exception_of_the_backend_retries_the_items_alone_and_loses_nothing(at):
    fake = InterruptedFake(REPLIES, at=at, exc=RuntimeError("a library error"))
    gen = BatchGenerator(backend=fake, slots=4, max_tokens=20)
    out = gen.complete_many(["apple", "kale", "salmon", "rye"])
    assert [c.text for c in out] == ["fruit", "vegetable", "fish", "grain"]
    assert {c.path for c in out} == {"alone"}  # all four were in flight
    assert "RuntimeError: a library error" in gen.stats.last_batch_failure
    assert gen.stats.batching_enabled  # one failure does not turn batching off
    assert fake.kv_lengths == (0, 0, 0, 0) and fake.violations == []
    # with max_batch_failures=1 the first failure turns batching off for good
    fake = InterruptedFake(REPLIES, at=at, exc=RuntimeError("a library error"))
    gen = BatchGenerator(backend=fake, slots=4, max_tokens=20, max_batch_failures=1)
    out = gen.complete_many(["apple", "kale", "salmon", "rye"])
    assert [c.text for c in out] == ["fruit", "vegetable", "fish", "grain"]
    assert "RuntimeError: a library error" in gen.stats.batch_disabled_reason


def test_odd_prompt_types_are_text_or_an_error_in_place():
    fake = FakeBackend(REPLIES)
    out = BatchGenerator(backend=fake, slots=2, max_tokens=20).complete_many(
        [bytearray(b"apple"), np.array(3), "sal\ud800mon", np.array(list(b"kale")), "rye"]
    )
    assert [c.text for c in out] == ["fruit", "", "", "vegetable", "grain"]
    assert [c.finish_reason == "error" for c in out] == [False, True, True, False, False]
    assert "0-d" in out[1].error and "encode" in out[2].error


def test_a_generator_on_a_backend_without_a_lock_has_its_own():
    a = BatchGenerator(backend=FakeBackend(REPLIES), slots=2)
    b = BatchGenerator(backend=FakeBackend(REPLIES), slots=2)
    assert a.lock is not b.lock
    with a.lock:  # reentrant: the generator takes it again inside
        assert [c.text for c in a.complete_many(["apple", "kale"])] == ["fruit", "vegetable"]


def test_threads_sharing_one_generator_each_get_their_own_results_in_order():
    gen = BatchGenerator(backend=FakeBackend(REPLIES), slots=2, max_tokens=20)
    words = list(REPLIES)
    got: dict[int, list] = {}

    def work(k: int) -> None:
        prompts = [words[(k + i) % 4] for i in range(9)]
        got[k] = [(p, c.text) for p, c in zip(prompts, gen.complete_many(prompts))]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        assert [text for _, text in got[k]] == [REPLIES[p] for p, _ in got[k]]
    assert gen.backend.violations == []

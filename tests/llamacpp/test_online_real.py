"""Online use on the test model: threads submitting at once share the slots of one
engine thread, and the replies are those of ``complete_many`` (confident prompts)."""

from __future__ import annotations

import threading

import pytest

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model

WORDS = "apple pear river stone cloud green seven table".split()


def test_threads_submitting_share_the_slots_and_agree_with_complete_many(llm):
    prompts = [f"{w}, {w}, {w}, {w}," for w in WORDS]
    greedy = SamplingParams(temperature=0, max_tokens=6)
    with BatchGenerator(llm, slots=4, sampling=greedy) as gen:
        want = [c.text for c in gen.complete_many(prompts)]
        before = gen.stats.decode_calls, gen.stats.generated_tokens
        futures: list = [None] * len(prompts)

        def client(k: int) -> None:
            futures[k] = gen.submit(prompts[k])

        with gen.lock:  # every submission waits until all are in
            threads = [threading.Thread(target=client, args=(k,)) for k in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        got = [f.result(timeout=120) for f in futures]
        decodes = gen.stats.decode_calls - before[0]
        tokens = gen.stats.generated_tokens - before[1]
    assert all(c.ok and c.path == "batch" for c in got)
    assert sum(c.text == w for c, w in zip(got, want, strict=True)) >= len(prompts) - 1
    assert decodes < tokens, (decodes, tokens)  # several sequences per decode


def test_waiting_under_llm_lock_raises_naming_it_and_works_outside(llm):
    import llamabatch
    from llamabatch.errors import GeneratorBusy

    greedy = SamplingParams(temperature=0, max_tokens=4)
    with BatchGenerator(llm, slots=2, sampling=greedy) as gen:
        errors: list[BaseException] = []

        def under_lock() -> None:
            with llamabatch.llm_lock(llm):
                future = gen.submit("One, two,")
                for call in (lambda: future.result(timeout=60), gen.close):
                    try:
                        call()
                    except GeneratorBusy as exc:
                        errors.append(exc)

        t = threading.Thread(target=under_lock, daemon=True)
        t.start()
        t.join(60)
        assert not t.is_alive(), "a wait under llm_lock hung"
        assert len(errors) == 2 and all("llm_lock" in str(e) for e in errors), errors
        assert gen.submit("Red, green,").result(timeout=120).ok  # the engine goes on
    assert gen.closed

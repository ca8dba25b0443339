"""Plain examples of the scheduler on the fake backend, counterexamples found included.

Each test builds a :class:`FakeBackend` whose replies are given by text (the fake's
tokenizer is one token per UTF-8 byte) and checks results, paths and the call log.
The slot engine's own examples (cache reuse, copies, refill) are in test_slot_engine.py.
"""

from __future__ import annotations

import logging

import pytest

from llamabatch import BatchGenerator, Completion
from llamabatch.engine import Span
from llamabatch.engine.scheduler import smaller_tries
from llamabatch.testing import (
    ClearCall,
    DecodeCall,
    FakeBackend,
    OpenBatchCall,
    StartSeqCall,
)

REPLIES = {"apple": "fruit", "kale": "vegetable", "salmon": "fish", "rye": "grain", "fig": "fruit"}


def gen_for(fake: FakeBackend, **kw) -> BatchGenerator:
    kw.setdefault("max_tokens", 20)
    return BatchGenerator(backend=fake, **kw)


def summary(results: list[Completion]) -> list[tuple]:
    return [(c.index, c.text, c.finish_reason, c.path) for c in results]


def test_results_keep_input_order_with_errors_in_place() -> None:
    fake = FakeBackend(REPLIES)
    out = gen_for(fake, slots=4).complete_many(
        ["apple", "", None, [999], "kale", b"\xff", "salmon", b"rye"]
    )
    assert [c.index for c in out] == list(range(8))
    assert [c.text for c in out] == ["fruit", "", "", "", "vegetable", "", "fish", "grain"]
    assert [c.finish_reason for c in out] == [
        "stop",
        "error",
        "error",
        "error",
        "stop",
        "error",
        "stop",
        "stop",
    ]
    assert all(c.error for c in out if c.finish_reason == "error")
    assert fake.violations == []


def test_a_fifth_item_takes_the_first_slot_that_frees_up() -> None:
    fake = FakeBackend(REPLIES)
    out = gen_for(fake, slots=4).complete_many(["apple", "kale", "salmon", "rye", "fig"])
    assert summary(out)[-1] == (4, "fruit", "stop", "batch")
    assert [c.path for c in out[:4]] == ["batch"] * 4
    seqs = fake.seqs()
    assert [s.prompt for s in seqs] == [
        tuple(w.encode()) for w in ["apple", "kale", "salmon", "rye", "fig"]
    ]
    first_free = min(seqs[:4], key=lambda s: s.decode_calls[-1])  # "rye": "grain"
    assert seqs[4].seq_id == first_free.seq_id
    assert seqs[4].decode_calls[0] == first_free.decode_calls[-1] + 1


def test_a_prompt_too_long_for_its_sequence_is_completed_alone_in_place() -> None:
    long_prompt = "x" * 11  # 11 + max_tokens 6 > n_ctx_seq 16
    fake = FakeBackend({**REPLIES, long_prompt: "long"})
    out = gen_for(fake, slots=4, n_ctx_seq=16, max_tokens=6).complete_many(
        ["apple", long_prompt, "fig"]
    )
    assert summary(out) == [
        (0, "fruit", "stop", "batch"),
        (1, "long", "stop", "alone"),
        (2, "fruit", "stop", "batch"),
    ]
    assert [s.prompt for s in fake.seqs()] == [tuple(b"apple"), tuple(b"fig")]


def test_fitting_uses_the_allocated_n_ctx_seq() -> None:
    fake = FakeBackend({"y" * 100: "ok", "fig": "fruit"}, ctx_pad=256)
    out = gen_for(fake, slots=2, n_ctx_seq=16).complete_many(["y" * 100, "fig"])
    assert [c.path for c in out] == ["batch", "batch"]
    assert fake.limits.n_ctx_seq == 256


def test_prefill_splits_prompts_across_decodes_with_logits_on_last_tokens() -> None:
    fake = FakeBackend({"abcde": "1", "wxyz": "2"})
    gen_for(fake, slots=2, n_batch=3).complete_many(["abcde", "wxyz"])
    a, w = b"abcde", b"wxyz"
    decodes = fake.calls(DecodeCall)
    assert [d.spans for d in decodes[:2]] == [
        (Span(0, 0, tuple(a[:3]), False),),
        (Span(0, 3, tuple(a[3:]), True), Span(1, 0, tuple(w[:1]), False)),
    ]
    # decode tokens first, then the rest of the budget to the prompt still prefilling
    assert decodes[2].spans == (
        Span(0, 5, (ord("1"),), True),
        Span(1, 1, tuple(w[1:3]), False),
    )
    assert decodes[3].spans == (Span(1, 3, tuple(w[3:]), True),)
    assert [s.prompt_end for s in fake.seqs()] == [2, 4]


def test_decode_steps_take_turns_when_n_batch_is_below_the_running_sequences() -> None:
    fake = FakeBackend({"a": "xyz", "b": "xyz", "c": "xyz", "d": "xyz"})
    out = gen_for(fake, slots=4, n_batch=2).complete_many(["a", "b", "c", "d"])
    assert [c.text for c in out] == ["xyz"] * 4
    assert all(d.n_tokens <= 2 for d in fake.calls(DecodeCall))
    assert fake.violations == []


def test_a_capped_n_batch_is_respected() -> None:
    fake = FakeBackend(REPLIES, n_batch_cap=2)
    gen_for(fake, slots=4, n_batch=512).complete_many(["apple", "kale", "salmon", "rye"])
    assert max(d.n_tokens for d in fake.calls(DecodeCall)) == 2


def test_an_eog_inside_the_reply_stops_it_and_is_not_in_the_text() -> None:
    fake = FakeBackend({"q": [65, 256, 66], "r": [67, 257, 68]}, eog_ids={256, 257})
    out = gen_for(fake, slots=2).complete_many(["q", "r"])
    assert [(c.text, c.token_ids, c.finish_reason) for c in out] == [
        ("A", (65,), "stop"),
        ("C", (67,), "stop"),
    ]


def test_an_empty_reply_stops_at_once_and_the_sequence_is_not_decoded_again() -> None:
    fake = FakeBackend({"apple": "", "kale": "vegetable"}, max_tokens=20)
    out = gen_for(fake, slots=2).complete_many(["apple", "kale"])
    assert [(c.text, c.finish_reason) for c in out] == [("", "stop"), ("vegetable", "stop")]
    assert all(s.seq_id == 1 for d in fake.calls(DecodeCall)[1:] for s in d.spans)


def test_max_tokens_one() -> None:
    fake = FakeBackend(REPLIES, max_tokens=1)
    out = gen_for(fake, slots=4, max_tokens=1).complete_many(["apple", "kale", "fig"])
    assert [(c.text, c.finish_reason) for c in out] == [
        ("f", "length"),
        ("v", "length"),
        ("f", "length"),
    ]
    assert len(fake.calls(DecodeCall)) == 1


def test_no_eog_ids_means_every_reply_ends_at_the_cap() -> None:
    fake = FakeBackend({"apple": "ab"}, eog_ids=(), filler=ord("z"))
    out = gen_for(fake, slots=2, max_tokens=4).complete_many(["apple", "apple", "apple"])
    assert {(c.text, c.finish_reason) for c in out} == {("abzz", "length")}


@pytest.mark.parametrize("code", [1, 2, -1, -3])
def test_a_failed_decode_completes_the_items_alone_and_turns_batching_off(
    code: int, caplog: pytest.LogCaptureFixture
) -> None:
    prompts = ["apple", "kale", "salmon", "rye", "fig", "apple"]
    clean = gen_for(FakeBackend(REPLIES), slots=2).complete_many(prompts)
    fake = FakeBackend(REPLIES, fail_decode_at=2, fail_code=code)
    gen = gen_for(fake, slots=2, max_batch_failures=1)  # the first failure turns it off
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        out = gen.complete_many(prompts)
    assert [(c.text, c.finish_reason) for c in out] == [(c.text, c.finish_reason) for c in clean]
    assert [c.path for c in out] == ["alone"] * 6
    assert len(fake.calls(DecodeCall)) == 2 and len(fake.calls(StartSeqCall)) == 2
    assert isinstance(fake.log[fake.log.index(fake.calls(DecodeCall)[-1]) + 1], ClearCall)
    assert fake.kv_lengths == (0, 0)
    assert str(code) in gen.stats.batch_disabled_reason
    assert len([r for r in caplog.records if r.name == "llamabatch"]) == 1


@pytest.mark.parametrize(
    "exc", [MemoryError(), RuntimeError("a library error"), OSError("libggml")]
)
def test_any_exception_of_a_decode_takes_the_same_fallback(exc: BaseException) -> None:
    prompts = ["apple", "kale", "salmon", "rye", "fig"]
    fake = FakeBackend(REPLIES, fail_decode_at=3, fail_exc=exc)
    gen = gen_for(fake, slots=2, max_batch_failures=1)
    out = gen.complete_many(prompts)
    assert [c.text for c in out] == ["fruit", "vegetable", "fish", "grain", "fruit"]
    assert type(exc).__name__ in gen.stats.batch_disabled_reason
    assert fake.kv_lengths == (0, 0) and fake.violations == []


def test_batch_unavailable_completes_everything_alone_after_the_smaller_tries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeBackend(REPLIES, fail_open=True)
    gen = gen_for(fake, slots=4)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        out = gen.complete_many(list(REPLIES) * 3)
    assert {c.path for c in out} == {"alone"} and all(c.ok for c in out)
    # the longest item waiting when it opens ("apple": 5 tokens + max_tokens 20) bounds it
    tries = smaller_tries(4, 4096, 25)
    assert [(c.slots, c.n_ctx_seq) for c in fake.calls(OpenBatchCall)] == tries
    assert "fail_open" in gen.stats.batch_disabled_reason
    assert len(caplog.records) == len(tries) + 1  # one line per try, one for "off"
    assert gen.limits is None and gen.stats.batch_slots == 0
    gen.complete_many(list(REPLIES))
    assert len(fake.calls(OpenBatchCall)) == len(tries)  # never tried again


def test_an_item_failing_alone_is_an_error_in_its_place_only() -> None:
    long_prompt = "f" * 30  # 30 + max_tokens 20 > n_ctx_seq 32: alone
    fake = FakeBackend({**REPLIES, long_prompt: "x"}, fail_alone={tuple(long_prompt.encode())})
    out = gen_for(fake, slots=2, n_ctx_seq=32).complete_many(["fig", long_prompt, "kale"])
    assert [(c.finish_reason, c.path) for c in out] == [
        ("stop", "batch"),
        ("error", "alone"),
        ("stop", "batch"),
    ]
    assert "fail_alone" in out[1].error


def test_closing_iter_groups_between_pages_keeps_finished_pages() -> None:
    fake = FakeBackend(REPLIES)
    gen = gen_for(fake, slots=2)
    prompts = ["apple", "kale", "salmon", "rye", "fig"]
    groups = gen.iter_groups(prompts)
    first = next(groups)
    groups.close()
    assert [c.index for c in first] == [0, 1]
    assert gen.stats.items_batched + gen.stats.items_alone <= 4  # 2 yielded + in flight
    rest = gen.complete_many(prompts[2:])
    assert [c.text for c in first + rest] == ["fruit", "vegetable", "fish", "grain", "fruit"]
    assert fake.violations == []


def test_slots_above_the_backend_ceiling_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="slots"):
        gen_for(FakeBackend(max_slots=4), slots=8)


def test_no_prompts_give_no_results_and_no_batch_context() -> None:
    fake = FakeBackend()
    assert gen_for(fake, slots=4).complete_many([]) == []
    assert fake.log == []


# -- counterexamples found by tests/test_properties.py ---------------------------------
def test_counterexample_batched_reply_is_capped_like_alone_by_the_model_context() -> None:
    """Property 1: batching never changes a deterministic result.

    Alone, an item's budget is min(max_tokens, n_ctx - n_prompt) (n_ctx: the Llama's
    context). Found: a batched item fitting n_ctx_seq got max_tokens instead, so its
    reply was longer than the same prompt's alone (minimised: prompts ['a', 'aaaa'],
    n_ctx=5, n_ctx_seq=6, max_tokens=2). Real case: Llama(n_ctx=2048) with the default
    n_ctx_seq=4096 and a 1,900-token prompt.
    """
    fake = FakeBackend({"aaaa": "bbbbbbbbbb", "cc": "dd"}, n_ctx=6)
    batched = gen_for(fake, slots=2, n_ctx_seq=64, max_tokens=5).complete_many(["aaaa", "cc"])
    alone = gen_for(fake.copy(), slots=1, n_ctx_seq=64, max_tokens=5).complete_many(["aaaa", "cc"])
    assert [c.path for c in batched] == ["batch", "batch"]
    assert [(c.text, c.finish_reason) for c in alone] == [("bb", "length"), ("dd", "stop")]
    assert [(c.text, c.finish_reason) for c in batched] == [("bb", "length"), ("dd", "stop")]

"""Issue 10: items sent alone for a reason the user can change are said so, once, in the
log and counted in ``stats.alone_reasons``; the default n_ctx_seq follows the backend."""

from __future__ import annotations

import logging

from llamabatch import BatchGenerator
from llamabatch.testing import FakeBackend

REPLIES = {"apple": "fruit", "kale": "vegetable", "salmon": "fish", "rye": "grain"}
KEY = "n_prompt_tokens + max_tokens > n_ctx_seq"


def test_a_huge_max_tokens_is_capped_by_n_ctx_and_still_batched() -> None:
    # a reply can never pass the one-at-a-time context: the cap is min(max_tokens,
    # n_ctx - n_prompt), which fits the default n_ctx_seq = min(4096, n_ctx)
    gen = BatchGenerator(backend=FakeBackend(REPLIES, n_ctx=512), slots=2, max_tokens=10**12)
    out = gen.complete_many(["apple", "kale", "salmon", "rye"])
    assert [c.text for c in out] == ["fruit", "vegetable", "fish", "grain"]
    assert {c.path for c in out} == {"batch"}
    assert gen.stats.alone_reasons == {}


def test_a_huge_max_tokens_over_a_small_slot_sends_every_item_alone_and_says_so_once(
    caplog,
) -> None:
    caplog.set_level(logging.WARNING, logger="llamabatch")
    gen = BatchGenerator(backend=FakeBackend(REPLIES), slots=2, n_ctx_seq=256, max_tokens=10**12)
    out = gen.complete_many(["apple", "kale", "salmon", "rye"])
    assert [c.text for c in out] == ["fruit", "vegetable", "fish", "grain"]
    assert {c.path for c in out} == {"alone"}
    assert gen.stats.alone_reasons == {KEY: 4}
    warnings = [r.getMessage() for r in caplog.records if KEY in r.getMessage()]
    assert len(warnings) == 1
    assert "max_tokens=1000000000000" in warnings[0] and "raise n_ctx_seq" in warnings[0]


def test_only_the_items_that_do_not_fit_are_counted() -> None:
    # one token per byte: apple 5 + 6, kale 4 + 6 and rye 3 + 6 fit 11 tokens, salmon
    # 6 + 6 does not (counted, completed alone in its place)
    gen = BatchGenerator(
        backend=FakeBackend(REPLIES, ctx_pad=1), slots=2, n_ctx_seq=11, max_tokens=6
    )
    out = gen.complete_many(["apple", "kale", "salmon", "rye"])
    assert [c.path for c in out] == ["batch", "batch", "alone", "batch"]
    assert gen.stats.alone_reasons == {KEY: 1}


def test_items_that_fit_leave_no_reason() -> None:
    gen = BatchGenerator(backend=FakeBackend(REPLIES), slots=2, max_tokens=8)
    gen.complete_many(["apple", "kale"])
    assert gen.stats.alone_reasons == {}


def test_default_n_ctx_seq_is_at_most_4096_and_at_most_n_ctx() -> None:
    assert BatchGenerator(backend=FakeBackend(REPLIES, n_ctx=512)).config.n_ctx_seq == 512
    assert BatchGenerator(backend=FakeBackend(REPLIES, n_ctx=9000)).config.n_ctx_seq == 4096
    assert (
        BatchGenerator(backend=FakeBackend(REPLIES, n_ctx=512), n_ctx_seq=1024).config.n_ctx_seq
        == 1024
    )


REFUSED = "refused before it ran (its Completion.error says why)"


def _refused_items_stats(submit: bool) -> tuple[list, object]:
    # one token per byte: 80 tokens cannot be held by n_ctx=64 (refused, its tokens kept
    # so n_prompt_tokens tells its length); "" is empty (refused); the others run
    gen = BatchGenerator(backend=FakeBackend(REPLIES, n_ctx=64), slots=2, max_tokens=6)
    items = ["apple", "x" * 80, "", "kale"]
    with gen:
        if submit:
            with gen.lock:  # all wait together, as complete_many's do
                futures = [gen.submit(item) for item in items]
            out = [f.result(timeout=20) for f in futures]
        else:
            out = gen.complete_many(items)
        return out, gen.stats


def test_a_refused_item_counts_with_its_reason_and_without_its_prompt() -> None:
    for submit in (False, True):
        out, stats = _refused_items_stats(submit)
        assert [c.ok for c in out] == [True, False, False, True], submit
        assert out[1].n_prompt_tokens == 80  # the completion still tells its length
        assert stats.items_failed == 2
        assert stats.prompt_tokens == len("apple") + len("kale"), submit
        assert stats.items_alone + stats.items_batched == 4
        assert stats.alone_reasons.get(REFUSED) == 2, stats.alone_reasons
        # every item counted alone has its reason, or batching was off for all
        assert sum(stats.alone_reasons.values()) == stats.items_alone, stats

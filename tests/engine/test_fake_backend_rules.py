"""The fake backend's own checks: each rule it enforces fires on a plan that breaks it.

Without these, a scheduler bug could hide behind a checker that never complains.
"""

from __future__ import annotations

import dataclasses

import pytest

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.engine.backend import Backend, SeqState
from llamabatch.engine.step import Span
from llamabatch.errors import BackendError, BatchUnavailable, DecodeError
from llamabatch.testing import (
    AloneCall,
    Call,
    CopyCall,
    DecodeCall,
    FakeBackend,
    FakeBackendViolation,
    HashReply,
    OpenBatchCall,
    TrimCall,
)

SAMPLING = SamplingParams()


def decode(fake: FakeBackend, spans) -> list[int]:
    """``fake.run(spans)``'s sampled tokens, one per span with logits, in span order."""
    result = fake.run(spans)
    return [result.outputs[s.seq_id].token for s in spans if s.logits]


def alone(fake: FakeBackend, tokens):
    """The tokens of ``fake.run_alone`` with :data:`SAMPLING`, lazily."""
    return (out.token for out in fake.run_alone(tokens, SAMPLING, None))


def opened(n_seqs: int = 2, **kw) -> FakeBackend:
    """A fake with a batch context of 4 slots (n_ctx_seq 16, n_batch 8), sequences
    [0, n_seqs) started."""
    fake = FakeBackend({(1, 2): [5, 6, 7], (3,): [9]}, **kw)
    fake.open(4, 16, 8)
    for s in range(n_seqs):
        fake.start_seq(s, SAMPLING)
    return fake


def test_it_is_a_backend() -> None:
    assert isinstance(FakeBackend(), Backend)


def test_tokenize_is_one_token_per_byte_and_detokenize_inverts_it() -> None:
    fake = FakeBackend()
    assert fake.tokenize("") == []
    assert fake.tokenize("é") == [0xC3, 0xA9]
    assert fake.detokenize([0xC3, 0xA9, 300]) == "é<|300|>"
    with pytest.raises(BackendError):
        FakeBackend(n_vocab=100).tokenize("z")


def test_a_valid_plan_samples_the_reply_then_the_eog() -> None:
    fake = opened()
    assert decode(fake, [Span(0, 0, (1,), False), Span(1, 0, (3,), True)]) == [9]
    assert decode(fake, [Span(0, 1, (2,), True), Span(1, 1, (9,), True)]) == [5, 256]
    assert decode(fake, [Span(0, 2, (5,), True)]) == [6]
    assert fake.kv_lengths == (3, 2, 0, 0)
    fake.clear()
    assert fake.kv_lengths == (0, 0, 0, 0) and fake.violations == []
    assert fake.calls(DecodeCall)[0].sampled == (9,)


def test_the_log_keeps_each_call_as_a_frozen_record_of_its_kind() -> None:
    fake = opened()
    fake.trim(0, 0)
    decode(fake, [Span(0, 0, [1, 2], True)])  # a list: logged as a tuple
    assert all(isinstance(c, Call) for c in fake.log)
    (call,) = fake.calls(DecodeCall)
    assert call.spans == (Span(0, 0, (1, 2), True),) and call.n_tokens == 2
    assert fake.calls(TrimCall) == [TrimCall(0, 0, True)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.call = 2
    assert TrimCall(0, 0, 1) != CopyCall(0, 0, 1)  # equal only to its own kind


@pytest.mark.parametrize(
    "spans, message",
    [
        ([], "zero tokens"),
        ([Span(0, 0, tuple(range(1, 10)), True)], "n_batch"),
        ([Span(2, 0, (1,), True)], "seq 2 decoded without start_seq"),
        ([Span(4, 0, (1,), True)], "seq id 4"),
        ([Span(-1, 0, (1,), True)], "seq id -1"),
        ([Span(0, 1, (1,), True)], "position 1, expected 0"),
        ([Span(0, 0, (), True), Span(1, 0, (1,), True)], "empty span"),
        ([Span(0, 0, (400,), True)], "outside"),
        ([Span(0, 0, (1,), True), Span(0, 1, (2,), True)], "same call"),
    ],
)
def test_a_broken_plan_is_a_violation(spans, message) -> None:
    fake = opened()
    with pytest.raises(FakeBackendViolation, match=message):
        decode(fake, spans)
    assert fake.violations


def test_feeding_anything_but_the_sampled_token_is_a_violation() -> None:
    fake = opened()
    decode(fake, [Span(0, 0, (1, 2), True)])  # samples 5
    with pytest.raises(FakeBackendViolation, match="sampled 5"):
        decode(fake, [Span(0, 2, (6,), True)])
    with pytest.raises(FakeBackendViolation, match="one token with logits"):
        decode(fake, [Span(0, 2, (5,), False)])


def test_decoding_a_finished_sequence_is_a_violation() -> None:
    fake = opened()
    decode(fake, [Span(1, 0, (3,), True)])
    decode(fake, [Span(1, 1, (9,), True)])  # samples the EOG
    with pytest.raises(FakeBackendViolation, match="finished"):
        decode(fake, [Span(1, 2, (256,), True)])
    capped = opened(max_tokens=1)
    decode(capped, [Span(0, 0, (1, 2), True)])
    with pytest.raises(FakeBackendViolation, match="finished"):
        decode(capped, [Span(0, 2, (5,), True)])


def test_overflowing_the_sequence_context_is_a_violation() -> None:
    fake = opened()
    decode(fake, [Span(0, 0, tuple(range(8)), False)])
    decode(fake, [Span(0, 8, tuple(range(8)), False)])
    with pytest.raises(FakeBackendViolation, match="n_ctx_seq"):
        decode(fake, [Span(0, 16, (1,), True)])


def test_decoding_after_a_clear_or_after_close_is_a_violation() -> None:
    fake = opened()
    fake.clear()
    with pytest.raises(FakeBackendViolation, match="without start_seq"):
        decode(fake, [Span(0, 0, (1,), True)])
    fake.close()
    fake.close()
    with pytest.raises(FakeBackendViolation, match="after close"):
        decode(fake, [Span(0, 0, (1,), True)])
    with pytest.raises(FakeBackendViolation, match="without a batch context"):
        FakeBackend().start_seq(0, SAMPLING)


def test_a_cache_is_reused_trimmed_and_copied_and_positions_must_continue_it() -> None:
    fake = opened(n_seqs=1)
    assert decode(fake, [Span(0, 0, (1, 2), True)]) == [5]
    fake.start_seq(1, SAMPLING)
    fake.copy_seq(0, 1)
    assert fake.cached(1) == (1, 2)
    with pytest.raises(FakeBackendViolation, match="position 0, expected 2"):
        decode(fake, [Span(1, 0, (1,), True)])
    fake.violations.clear()
    assert fake.trim(1, 1)
    assert decode(fake, [Span(1, 1, (2,), True)]) == [5]  # the reply of the whole cache
    fake.start_seq(0, SAMPLING)
    assert fake.trim(0, 0) and fake.kv_lengths[0] == 0
    assert decode(fake, [Span(0, 0, (3,), True)]) == [9]
    assert fake.violations == []


def test_a_saved_state_loads_into_another_slot_and_only_a_saved_state_loads() -> None:
    fake = opened()
    decode(fake, [Span(0, 0, (1,), False)])
    state = fake.save_seq(0)
    assert isinstance(state, SeqState) and state.nbytes == len(state.data)
    fake.load_seq(1, state)
    assert fake.cached(1) == (1,) and fake.cut_floor(1) == 0  # no window: any cut
    assert decode(fake, [Span(1, 1, (2,), True)]) == [5]  # the reply of (1, 2)
    with pytest.raises(FakeBackendViolation, match="not a state save_seq returned"):
        fake.load_seq(0, state.data)  # type: ignore[arg-type]
    with pytest.raises(FakeBackendViolation, match="not a state save_seq returned"):
        fake.load_seq(0, SeqState(b"x", 1))


def test_a_recurrent_fake_refuses_partial_trims_and_then_needs_a_clear() -> None:
    fake = opened(n_seqs=1, recurrent=True)
    assert not fake.partial_trim
    decode(fake, [Span(0, 0, (1, 2), True)])
    assert fake.trim(0, 2)  # nothing to cut: fine
    assert not fake.trim(0, 1)
    fake.start_seq(0, SAMPLING)
    with pytest.raises(FakeBackendViolation, match="unknown"):
        decode(fake, [Span(0, 2, (3,), True)])
    assert fake.trim(0, 0)  # a whole sequence: always
    assert decode(fake, [Span(0, 0, (3,), True)]) == [9]
    assert FakeBackend(recurrent=True, declares_recurrent=False).partial_trim


def test_open_pads_caps_and_refuses_a_second_call_while_open() -> None:
    fake = FakeBackend(ctx_pad=256, n_batch_cap=32)
    limits = fake.open(3, 300, 512)
    assert (limits.n_seq_max, limits.n_ctx_seq, limits.n_batch, limits.n_ctx) == (3, 512, 32, 1536)
    with pytest.raises(FakeBackendViolation, match="while its batch context is open"):
        fake.open(3, 300, 512)
    fake.close()  # after close, a new empty context
    assert fake.open(2, 300, 512).n_seq_max == 2 and fake.kv_lengths == (0, 0)
    with pytest.raises(BatchUnavailable):
        FakeBackend(fail_open=True).open(2, 16, 8)
    with pytest.raises(BatchUnavailable):
        FakeBackend(max_slots=2).open(3, 16, 8)


def test_open_fails_above_max_kv_tokens_and_may_be_tried_again_smaller() -> None:
    fake = FakeBackend(ctx_pad=256, max_kv_tokens=1024)
    with pytest.raises(BatchUnavailable, match="max_kv_tokens=1024"):
        fake.open(4, 300, 512)  # 4 x 512 padded
    limits = fake.open(2, 300, 512)  # a failed open may be tried again
    assert (limits.n_seq_max, limits.n_ctx_seq) == (2, 512)
    assert [c.limits is None for c in fake.calls(OpenBatchCall)] == [True, False]


@pytest.mark.parametrize("code, kept", [(1, 0), (-1, 0), (2, 2), (-3, 2)])
def test_an_injected_decode_fault_raises_with_its_code(code: int, kept: int) -> None:
    fake = opened(fail_decode_at=1, fail_code=code)
    with pytest.raises(DecodeError) as info:
        decode(fake, [Span(0, 0, (1, 2), True)])
    assert info.value.code == code
    assert fake.kv_lengths[0] == kept
    assert fake.calls(DecodeCall)[0].error_code == code


def test_run_alone_streams_the_reply_and_polices_the_caller() -> None:
    fake = FakeBackend({(1, 2): [5, 6]}, n_ctx=5, max_tokens=3)
    stream = alone(fake, [1, 2])
    assert [next(stream) for _ in range(3)] == [5, 6, 256]
    with pytest.raises(FakeBackendViolation, match="after an EOG"):
        next(stream)
    call = fake.calls(AloneCall)[0]
    assert (call.n_pulled, call.closed) == (3, True)
    filler = alone(FakeBackend({(1, 2): []}, eog_ids=(), n_ctx=4, filler=7), [1, 2])
    assert [next(filler) for _ in range(3)] == [7, 7, 7]  # n_ctx - n_prompt + 1
    with pytest.raises(FakeBackendViolation, match="past n_ctx"):
        next(filler)


@pytest.mark.parametrize("tokens", [[], [1] * 5, [7]])
def test_run_alone_fails_when_iterated(tokens) -> None:
    fake = FakeBackend(n_ctx=5, fail_alone=lambda t: t == (7,))
    stream = alone(fake, tokens)  # lazy: no error yet
    with pytest.raises(BackendError):
        next(stream)


def test_replies_by_mapping_text_or_function_agree() -> None:
    by_text = FakeBackend({"hi": "yo"})
    assert by_text.configured_reply(by_text.tokenize("hi")) == tuple(b"yo")
    assert by_text.configured_reply([1]) == ()
    reply = HashReply(seed=3, max_len=5, n_vocab=260)
    assert FakeBackend(reply).configured_reply([1, 2]) == tuple(reply((1, 2)))


def test_fast_mode_logs_nothing_and_gives_the_same_replies() -> None:
    fake = opened(check=False)
    assert decode(fake, [Span(0, 0, (1, 2), True)]) == [5]
    assert fake.calls(DecodeCall) == [] and fake.num_decode_calls == 1


def test_an_items_own_larger_max_tokens_is_no_violation_of_the_fakes_max_tokens() -> None:
    # the fake knows the generator's max_tokens=3; the item asks for 6 and gets them
    fake = FakeBackend({"a": "abcdefgh", "b": "abcdefgh"}, max_tokens=3)
    with BatchGenerator(backend=fake, slots=2, max_tokens=3) as gen:
        out = gen.complete_many(["a", "b"], [SamplingParams(max_tokens=6), SamplingParams()])
        alone = BatchGenerator(backend=fake.copy(), slots=1, max_tokens=3)
        out_alone = alone.complete_many(["a"], [SamplingParams(max_tokens=6)])
    assert [c.text for c in out] == ["abcdef", "abc"]
    assert [c.text for c in out_alone] == ["abcdef"]
    assert fake.violations == []


class _BrokenRule(FakeBackend):
    """A fake whose ``where`` call reports a broken rule (as a scheduler bug would)."""

    def __init__(self, *args, where: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.where = where

    def open(self, slots, n_ctx_seq, n_batch):
        if self.where == "open":
            raise FakeBackendViolation("open: a broken rule")
        return super().open(slots, n_ctx_seq, n_batch)

    def run(self, spans):
        if self.where == "run":
            raise FakeBackendViolation("run: a broken rule")
        return super().run(spans)


@pytest.mark.parametrize("where", ["open", "run"])
def test_a_violation_propagates_instead_of_turning_batching_off(where) -> None:
    fake = _BrokenRule({"a": "x", "b": "y"}, where=where)
    with BatchGenerator(backend=fake, slots=2, max_tokens=4) as gen:
        with pytest.raises(FakeBackendViolation, match="a broken rule"):
            gen.complete_many(["a", "b"])
        assert gen.stats.batch_disabled_reason is None

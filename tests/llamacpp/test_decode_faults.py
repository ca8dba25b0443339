"""Issue 5 — faults of llama.cpp on the real model: a failed batched decode, a batch
context that cannot be created, a llama-cpp-python without an essential symbol.

Decode failures are injected with ``LlamaBackend(llm, decode_hook=...)``: the hook sees
each batched decode and returns llama.cpp's code instead of decoding. It fails while
sequences are running (their prompts in the KV cache) so that clearing every sequence
is really tested, and after some items already finished in the batch.
"""

from __future__ import annotations

import logging

import llama_cpp.llama_cpp as binding
import pytest

from llamabatch import BatchGenerator, SamplingParams, _ffi
from llamabatch.errors import LibraryError
from llamabatch.llamacpp.backend import LlamaBackend

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0)
MAX_TOKENS = 6
QUESTIONS = (
    "Name a fruit.",
    "Name a color.",
    "What is two plus two?",
    "Name an animal.",
    "Name a country.",
    "Say hello.",
)


def chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


PROMPTS = [chat(q) for q in QUESTIONS]


def run(llm, prompts, slots):
    """Token ids of each prompt, and the stats, on a fresh generator."""
    with BatchGenerator(
        llm, slots=slots, n_ctx_seq=256, max_tokens=MAX_TOKENS, sampling=GREEDY
    ) as gen:
        return [c.token_ids for c in gen.complete_many(prompts)], gen.stats


@pytest.fixture(scope="module")
def clean(llm):
    """Token ids of every prompt completed alone, and of the first two batched."""
    alone, _ = run(llm, PROMPTS, slots=1)
    batched, stats = run(llm, PROMPTS[:2], slots=2)
    assert stats.items_batched == 2
    return {"alone": alone, "batched": batched}


class FailingDecode:
    """Decode hook: the ``at``-th batched decode (1-based) returns ``code``; every other
    decode runs. Records the KV cache when it fails."""

    def __init__(self, code: int, at: int) -> None:
        self.code, self.at = code, at
        self.backend: LlamaBackend | None = None
        self.n_calls = self.n_after = 0
        self.failed = False
        self.kv_at_failure: list[int] = []

    def __call__(self, n_tokens: int) -> int | None:
        if self.failed:
            self.n_after += 1
            return None
        self.n_calls += 1
        if self.n_calls == self.at:
            ctx = self.backend.batch_context
            self.kv_at_failure = [ctx.seq_pos_max(s) for s in range(ctx.limits.n_seq_max)]
            self.failed = True
            return self.code
        return None


def warnings_of(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "llamabatch"
    ]


@pytest.mark.parametrize(
    ("code", "at"),
    [
        (1, 3),
        (2, 3),
        (-1, 3),
        (-3, 3),  # sequences running: the KV cache holds data
        (-1, 1),  # the first prefill decode
        (-3, 2 + MAX_TOKENS + 1),  # after the first items ended in the batch
    ],
)
def test_a_failed_batched_decode_clears_every_sequence_and_completes_the_rest_alone(
    llm, clean, caplog, code, at
):
    hook = FailingDecode(code, at)
    backend = hook.backend = LlamaBackend(llm, decode_hook=hook)
    prompts = PROMPTS if at > 3 else PROMPTS[:4]
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        with BatchGenerator(
            backend=backend,
            slots=2,
            n_ctx_seq=256,
            max_tokens=MAX_TOKENS,
            sampling=GREEDY,
            max_batch_failures=1,  # the first failure turns batching off
        ) as gen:
            results = gen.complete_many(prompts)
            ctx = backend.batch_context
            kv_after = [ctx.seq_pos_max(s) for s in range(ctx.limits.n_seq_max)]
            stats = gen.stats
    assert hook.failed and hook.n_after == 0  # batching stayed off after it
    if at > 1:
        assert max(hook.kv_at_failure) >= 0  # sequences were in the KV cache ...
    assert kv_after == [-1, -1]  # ... and every sequence is removed
    n_good = stats.items_batched
    assert (n_good > 0) == (at > 3)
    assert (
        sorted(c.path for c in results) == ["alone"] * (len(prompts) - n_good) + ["batch"] * n_good
    )
    for c in results:  # greedy: the same tokens either way
        want = clean["batched"][c.index] if c.index < 2 else clean["alone"][c.index]
        assert c.token_ids == (
            want if c.path == "batch" or c.index >= 2 else clean["alone"][c.index]
        )
    assert all(c.error is None for c in results)
    assert stats.items_alone == len(prompts) - n_good
    assert f"llama_decode returned {code}" in stats.batch_disabled_reason
    assert len(warnings_of(caplog)) == 1


def test_one_failed_batched_decode_costs_the_items_in_flight_a_retry_and_batching_goes_on(
    llm, clean, caplog
):
    hook = FailingDecode(-3, 3)  # sequences running, none finished yet
    backend = hook.backend = LlamaBackend(llm, decode_hook=hook)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        with BatchGenerator(
            backend=backend, slots=2, n_ctx_seq=256, max_tokens=MAX_TOKENS, sampling=GREEDY
        ) as gen:
            results = gen.complete_many(PROMPTS)
            stats = gen.stats
    assert [c.index for c in results] == list(range(len(PROMPTS)))
    assert [c.path for c in results[:2]] == ["alone", "alone"]  # in flight at the failure
    assert all(c.path == "batch" for c in results[2:]) and hook.n_after > 0
    assert [c.token_ids for c in results[:2]] == clean["alone"][:2]
    assert all(c.error is None and c.token_ids for c in results)
    assert stats.batching_enabled and stats.batch_failures == 1 and stats.items_retried == 2
    assert "llama_decode returned -3" in stats.last_batch_failure
    assert len(warnings_of(caplog)) == 1 and "batching goes on" in warnings_of(caplog)[0]


def test_a_batch_context_too_large_for_llama_cpp_is_refused_at_construction(llm):
    """n_ctx = n_ctx_seq * slots is a 32-bit count in llama.cpp: a larger one is the
    caller's parameter error (issue 10), named before anything is allocated."""
    with pytest.raises(
        ValueError,
        match=r"n_ctx_seq=2147483648 is out of range: valid is "
        r"an integer in \[1, \d+\] with slots=2",
    ):
        BatchGenerator(llm, slots=2, n_ctx_seq=2**31, max_tokens=MAX_TOKENS, sampling=GREEDY)


@pytest.fixture
def hide(monkeypatch):
    """Make llama-cpp-python's binding look as if it lacked some symbols."""

    def hide_(*names: str) -> None:
        for name in names:
            monkeypatch.delattr(binding, name)
        _ffi.load.cache_clear()  # resolve the symbols again, without these

    yield hide_
    _ffi.load.cache_clear()  # the next load() resolves the restored binding


@pytest.mark.parametrize(
    "names",
    [
        ("llama_batch_init",),
        ("llama_n_seq_max",),
        ("llama_init_from_model", "llama_new_context_with_model"),
    ],
)
def test_without_a_symbol_batching_needs_it_is_off_and_alone_works(llm, clean, hide, caplog, names):
    hide(*names)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        with BatchGenerator(
            llm, slots=2, n_ctx_seq=256, max_tokens=MAX_TOKENS, sampling=GREEDY
        ) as gen:
            results = gen.complete_many(PROMPTS[:3])
            stats = gen.stats
    assert [c.token_ids for c in results] == clean["alone"][:3]
    assert stats.items_batched == 0 and {c.path for c in results} == {"alone"}
    reason = stats.batch_disabled_reason
    assert names[-1] in reason and binding_version() in reason, reason
    assert len(warnings_of(caplog)) == 1


def test_without_a_symbol_even_alone_needs_the_generator_says_which(llm, hide):
    hide("llama_vocab_is_eog", "llama_token_is_eog")
    with pytest.raises(
        LibraryError,
        match=f"llama-cpp-python {binding_version()} has no "
        "llama_vocab_is_eog / llama_token_is_eog",
    ):
        BatchGenerator(llm, slots=2)


def binding_version() -> str:
    from importlib.metadata import version

    return version("llama-cpp-python")


def test_a_real_abort_of_llama_decode_mid_group_is_handled_like_code_2(llm, clean, caplog):
    """llama.cpp itself aborts a decode (``llama_set_abort_callback``), not a stand-in."""
    calls: list[int] = []

    def arm_abort_on_third_decode(n_tokens: int) -> None:
        calls.append(n_tokens)
        if len(calls) == 3:
            backend.batch_context.set_abort_callback(lambda: True)
        return None  # always the real llama_decode

    backend = LlamaBackend(llm, decode_hook=arm_abort_on_third_decode)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        with BatchGenerator(
            backend=backend,
            slots=2,
            n_ctx_seq=256,
            max_tokens=MAX_TOKENS,
            sampling=GREEDY,
            max_batch_failures=1,
        ) as gen:
            results = gen.complete_many(PROMPTS[:4])
            ctx = backend.batch_context
            kv_after = [ctx.seq_pos_max(s) for s in range(2)]
            stats = gen.stats
    assert len(calls) == 3 and kv_after == [-1, -1]
    assert "llama_decode returned 2 (aborted)" in stats.batch_disabled_reason
    assert [c.token_ids for c in results] == clean["alone"][:4]
    assert [c.path for c in results] == ["alone"] * 4
    assert len(warnings_of(caplog)) == 1

"""Issue 5 — faults of llama.cpp on the real model: a failed batched decode, a batch
context that cannot be created, a llama-cpp-python without an essential symbol.

Decode failures are injected with ``LlamaBackend(llm, decode_hook=...)``: the hook sees
each batched decode and returns llama.cpp's code instead of decoding. It fails mid-group
(after the prompts are in the KV cache) so that clearing the group is really tested.
"""

from __future__ import annotations

import logging

import pytest

import llama_cpp.llama_cpp as binding
from llamabatch import BatchGenerator, LibraryError, SamplingParams, _ffi
from llamabatch.llamacpp.backend import LlamaBackend

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0)
MAX_TOKENS = 6
QUESTIONS = ("Name a fruit.", "Name a color.", "What is two plus two?",
             "Name an animal.", "Name a country.", "Say hello.")


def chat(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


PROMPTS = [chat(q) for q in QUESTIONS]


def run(llm, prompts, slots):
    """Token ids of each prompt, and the stats, on a fresh generator."""
    with BatchGenerator(llm, slots=slots, n_ctx_seq=256, max_tokens=MAX_TOKENS,
                        sampling=GREEDY) as gen:
        return [c.token_ids for c in gen.complete_many(prompts)], gen.stats


@pytest.fixture(scope="module")
def clean(llm):
    """Token ids of every prompt completed alone, and of the first two batched."""
    alone, _ = run(llm, PROMPTS, slots=1)
    batched, stats = run(llm, PROMPTS[:2], slots=2)
    assert stats.groups_batched == 1
    return {"alone": alone, "batched": batched}


class FailingDecode:
    """Decode hook: the ``step``-th decode (1-based) of the ``group``-th batched group
    returns ``code``; every other decode runs. Records the KV cache when it fails."""

    def __init__(self, code: int, group: int, step: int) -> None:
        self.code, self.group, self.step = code, group, step
        self.backend: LlamaBackend | None = None
        self.n_groups = self.n_in_group = self.n_after = 0
        self.failed = False
        self.kv_at_failure: list[int] = []

    def __call__(self, n_tokens: int) -> int | None:
        if self.failed:
            self.n_after += 1
            return None
        if n_tokens > 2:  # a prefill (prompts are > 2 tokens; a step has <= 2)
            self.n_groups += 1
            self.n_in_group = 0
        self.n_in_group += 1
        if self.n_groups == self.group and self.n_in_group == self.step:
            ctx = self.backend.batch_context
            self.kv_at_failure = [ctx.seq_pos_max(s) for s in range(ctx.limits.n_seq_max)]
            self.failed = True
            return self.code
        return None


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "llamabatch"]


@pytest.mark.parametrize(("code", "group", "step"), [
    (1, 1, 3), (2, 1, 3), (-1, 1, 3), (-3, 1, 3),   # mid-group: the KV cache holds data
    (-1, 1, 1),                                      # the first prefill decode
    (-3, 2, 2),                                      # after a good group
])
def test_a_failed_batched_decode_clears_the_group_and_completes_it_alone(
        llm, clean, caplog, code, group, step):
    hook = FailingDecode(code, group, step)
    backend = hook.backend = LlamaBackend(llm, decode_hook=hook)
    prompts = PROMPTS if group == 2 else PROMPTS[:4]
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        with BatchGenerator(backend=backend, slots=2, n_ctx_seq=256, max_tokens=MAX_TOKENS,
                            sampling=GREEDY) as gen:
            results = gen.complete_many(prompts)
            ctx = backend.batch_context
            kv_after = [ctx.seq_pos_max(s) for s in range(ctx.limits.n_seq_max)]
            stats = gen.stats
    assert hook.failed and hook.n_after == 0          # batching stayed off after it
    if step > 1:
        assert min(hook.kv_at_failure) >= 0           # the group was in the KV cache ...
    assert kv_after == [-1, -1]                       # ... and every sequence is removed
    n_good = 2 * (group - 1)
    assert [c.path for c in results] == ["batch"] * n_good + ["alone"] * (len(prompts) - n_good)
    want = clean["batched"][:n_good] + clean["alone"][n_good:len(prompts)]
    assert [c.token_ids for c in results] == want
    assert all(c.error is None for c in results)
    assert stats.groups_batched == group - 1 and stats.items_alone == len(prompts) - n_good
    assert f"llama_decode returned {code}" in stats.batch_disabled_reason
    assert len(warnings_of(caplog)) == 1


def test_a_batch_context_too_large_for_llama_cpp_is_refused_at_construction(llm):
    """n_ctx = n_ctx_seq * slots is a 32-bit count in llama.cpp: a larger one is the
    caller's parameter error (issue 10), named before anything is allocated."""
    with pytest.raises(ValueError, match=r"n_ctx_seq=2147483648 is out of range: valid is "
                                         r"an integer in \[1, \d+\] with slots=2"):
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


@pytest.mark.parametrize("names", [
    ("llama_batch_init",), ("llama_n_seq_max",),
    ("llama_init_from_model", "llama_new_context_with_model"),
])
def test_without_a_symbol_batching_needs_it_is_off_and_alone_works(
        llm, clean, hide, caplog, names):
    hide(*names)
    with caplog.at_level(logging.WARNING, logger="llamabatch"):
        with BatchGenerator(llm, slots=2, n_ctx_seq=256, max_tokens=MAX_TOKENS,
                            sampling=GREEDY) as gen:
            results = gen.complete_many(PROMPTS[:3])
            stats = gen.stats
    assert [c.token_ids for c in results] == clean["alone"][:3]
    assert stats.groups_batched == 0 and {c.path for c in results} == {"alone"}
    reason = stats.batch_disabled_reason
    assert names[-1] in reason and binding_version() in reason, reason
    assert len(warnings_of(caplog)) == 1


def test_without_a_symbol_even_alone_needs_the_generator_says_which(llm, hide):
    hide("llama_vocab_is_eog", "llama_token_is_eog")
    with pytest.raises(LibraryError, match=f"llama-cpp-python {binding_version()} has no "
                                           "llama_vocab_is_eog / llama_token_is_eog"):
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
        with BatchGenerator(backend=backend, slots=2, n_ctx_seq=256, max_tokens=MAX_TOKENS,
                            sampling=GREEDY) as gen:
            results = gen.complete_many(PROMPTS[:4])
            ctx = backend.batch_context
            kv_after = [ctx.seq_pos_max(s) for s in range(2)]
            stats = gen.stats
    assert len(calls) == 3 and kv_after == [-1, -1]
    assert "llama_decode returned 2 (aborted)" in stats.batch_disabled_reason
    assert [c.token_ids for c in results] == clean["alone"][:4]
    assert [c.path for c in results] == ["alone"] * 4
    assert len(warnings_of(caplog)) == 1

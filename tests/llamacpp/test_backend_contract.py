"""LlamaBackend on the real model: the Backend contract, batched == alone at temperature 0."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from agreement import divergence

from llamabatch.engine.backend import Backend, BatchLimits, SeqState
from llamabatch.engine.step import Span
from llamabatch.errors import BackendError, BatchUnavailable, DecodeError
from llamabatch.llamacpp.backend import LlamaBackend
from llamabatch.params import SamplingParams

pytestmark = pytest.mark.real_model

GREEDY = SamplingParams(temperature=0)


def decode(backend, spans) -> list[int]:
    """``backend.run(spans)``'s sampled tokens, one per span with logits, in span order."""
    result = backend.run(spans)
    return [result.outputs[s.seq_id].token for s in spans if s.logits]


def alone(backend, tokens, n: int = 8) -> list[int]:
    """The first ``n`` tokens ``run_alone`` generates greedily after ``tokens``."""
    stream = backend.run_alone(tokens, GREEDY, None)
    return [out.token for out in itertools.islice(stream, n)]


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
def backend(llm):
    b = LlamaBackend(llm)
    yield b
    b.close()


def test_is_a_backend_with_the_model_s_sizes(backend, llm):
    assert isinstance(backend, Backend)
    assert backend.vocab.n_vocab == llm.n_vocab() and backend.info.n_ctx == llm.n_ctx()
    assert backend.info.max_slots >= 4


def test_eog_ids_contain_im_end(backend, llm):
    (im_end,) = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
    assert im_end in backend.vocab.eog_ids
    assert llm.token_eos() in backend.vocab.eog_ids


def test_tokenize_parses_special_tokens(backend, llm):
    tokens = backend.vocab.tokenize(chat("Hi"))
    assert tokens == llm.tokenize(chat("Hi").encode(), add_bos=True, special=True)
    assert tokens.count(llm.tokenize(b"<|im_start|>", add_bos=False, special=True)[0]) == 2
    assert backend.vocab.detokenize(backend.vocab.tokenize("héllo wörld")).endswith("héllo wörld")


def test_batched_greedy_equals_alone(backend, reference):
    prompts = [
        backend.vocab.tokenize(chat("Name a fruit.")),
        backend.vocab.tokenize(chat("Write one word about the sea, then a short poem.")),
    ]
    limits = backend.open(slots=2, n_ctx_seq=256, n_batch=16)  # prefill in chunks
    # llama.cpp before llama-cpp-python 0.3.2x raised an n_batch below 64 to 64
    # (GGML_KQ_MASK_PAD); the limits say what it allocated
    assert limits.n_batch in (16, 64)
    assert limits.kv_bytes > 0
    assert dataclasses.replace(limits, kv_bytes=0) == BatchLimits(
        n_seq_max=2, n_ctx_seq=256, n_batch=limits.n_batch, n_ctx=512
    )
    backend.start_seq(0, GREEDY)
    backend.start_seq(1, GREEDY)
    # prefill in chunks of <= 16 tokens, both prompts in each decode, then lockstep steps
    replies: list[list[int]] = [[], []]
    pos = [0, 0]
    n_decodes = 0
    while any(p < len(t) for p, t in zip(pos, prompts)):
        n_decodes += 1
        spans, room = [], 16
        for seq, tokens in enumerate(prompts):
            take = min(len(tokens) - pos[seq], room // (2 - seq))
            if take > 0:
                end = pos[seq] + take
                spans.append(Span(seq, pos[seq], tokens[pos[seq] : end], end == len(tokens)))
                pos[seq], room = end, room - take
        sampled = iter(decode(backend, spans))
        for span in spans:
            if span.logits:
                replies[span.seq_id].append(next(sampled))
    assert n_decodes > 2
    for _ in range(7):
        spans = [
            Span(s, len(prompts[s]) + len(replies[s]) - 1, [replies[s][-1]], True) for s in range(2)
        ]
        for seq, token in zip(range(2), decode(backend, spans)):
            replies[seq].append(token)
    backend.clear()
    for tokens, reply in zip(prompts, replies):
        divergence(
            reference, tokens, reply, alone(backend, tokens), label="alone"
        )  # up to a near tie


def greedy_after(backend, seq, pos, tokens, n=8):
    """Feed ``tokens`` to ``seq`` from ``pos`` in one decode, then decode greedily."""
    out = decode(backend, [Span(seq, pos, tokens, True)])
    pos += len(tokens)
    while len(out) < n:
        out += decode(backend, [Span(seq, pos, [out[-1]], True)])
        pos += 1
    return out


def test_a_trimmed_and_a_copied_cache_continue_like_a_fresh_prompt(backend, reference):
    a = backend.vocab.tokenize(chat("Name a fruit."))
    b = backend.vocab.tokenize(chat("Name a vegetable."))
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert shared >= 5
    backend.open(slots=3, n_ctx_seq=256, n_batch=64)
    assert backend.info.partial_trim and backend.info.can_copy  # SmolLM2: a plain KV cache
    backend.start_seq(0, GREEDY)
    reply_a = greedy_after(backend, 0, 0, a)
    backend.copy_seq(0, 1)  # seq 1: a copy of seq 0's cells
    assert backend.batch_context.seq_pos_max(1) == backend.batch_context.seq_pos_max(0)
    assert backend.trim(1, shared)
    assert backend.batch_context.seq_pos_max(1) == shared - 1
    backend.start_seq(1, GREEDY)
    reply_b_copied = greedy_after(backend, 1, shared, b[shared:])
    assert backend.trim(0, shared)  # seq 0 reused for b itself
    backend.start_seq(0, GREEDY)
    reply_b_reused = greedy_after(backend, 0, shared, b[shared:])
    backend.clear()
    assert backend.batch_context.seq_pos_max(0) == -1
    # the same cells fed the same split: bit for bit the same; alone: up to a near tie
    assert reply_b_copied == reply_b_reused
    divergence(reference, a, reply_a, alone(backend, a), label="a")
    divergence(reference, b, reply_b_copied, alone(backend, b), label="b")


def test_a_saved_state_loads_into_another_sequence_and_continues_like_its_source(backend):
    a = backend.vocab.tokenize(chat("Name a fruit."))
    backend.open(slots=2, n_ctx_seq=256, n_batch=64)
    backend.start_seq(0, GREEDY)
    decode(backend, [Span(0, 0, a[:-1], False)])
    state = backend.save_seq(0)
    assert isinstance(state, SeqState) and state.nbytes == len(state.data) > 0
    backend.load_seq(1, state)
    assert backend.batch_context.seq_pos_max(1) == len(a) - 2
    assert backend.cut_floor(1) == 0  # no sliding window: any cut works
    backend.start_seq(1, GREEDY)
    # the same cells fed the same split: bit for bit the same
    assert greedy_after(backend, 1, len(a) - 1, a[-1:]) == greedy_after(
        backend, 0, len(a) - 1, a[-1:]
    )


def test_decode_failure_raises_with_its_code(llm):
    backend = LlamaBackend(llm, decode_hook=lambda n_tokens: -1)
    try:
        backend.open(slots=2, n_ctx_seq=256, n_batch=64)
        backend.start_seq(0, GREEDY)
        with pytest.raises(DecodeError, match="invalid batch") as info:
            backend.run([Span(0, 0, backend.vocab.tokenize(chat("Hi")), True)])
        assert info.value.code == -1
    finally:
        backend.close()


def test_decode_refuses_empty_and_oversized(backend):
    n = backend.open(slots=1, n_ctx_seq=256, n_batch=8).n_batch  # 8, or 64 (see above)
    backend.start_seq(0, GREEDY)
    with pytest.raises(ValueError, match=r"0 tokens"):
        backend.run([])
    with pytest.raises(ValueError, match=rf"{n + 1} tokens: valid is \[1, {n}\]"):
        backend.run([Span(0, 0, list(range(1, n + 2)), True)])


def test_too_many_slots_is_batch_unavailable(backend):
    with pytest.raises(BatchUnavailable, match="llama_max_parallel_sequences"):
        backend.open(slots=backend.info.max_slots + 1, n_ctx_seq=256, n_batch=64)


def test_run_alone_reports_a_bad_prompt_as_backend_error(backend):
    with pytest.raises(BackendError):
        next(backend.run_alone([backend.vocab.n_vocab + 5], GREEDY, None))


def test_close_is_idempotent(llm):
    backend = LlamaBackend(llm)
    backend.open(slots=2, n_ctx_seq=256, n_batch=64)
    backend.close()
    backend.close()
    backend.clear()  # no context: nothing to clear

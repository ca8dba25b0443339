"""A reply whose grammar is complete ends there (``finish_reason`` ``"stop"``) on a model
with no end-of-generation token: the random models of ``scripts/make-tiny-models``
(``test-llama-archs``' dummy vocabulary has none), where llama.cpp's grammar, which
allows only such a token after a complete sentence, allows nothing. A grammar with no way
forward that is not complete still ends its item with an error (tests/engine,
test_failure_isolation.py; tests/llamacpp, test_grammar_dead_ends.py)."""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module", params=("qwen3", "mamba2"))
def tiny_llm(request, tiny_models_dir):
    import llama_cpp

    path = tiny_models_dir / f"{request.param}-dense.gguf"
    if not path.is_file():
        pytest.fail(f"{path} is missing: scripts/make-tiny-models writes it")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_threads=2, verbose=False)
    yield llm
    llm.close()


def _piece(llm, token: int) -> str:
    return llm.detokenize([token]).decode("utf-8")


@pytest.mark.parametrize("slots", [1, 2])
def test_a_complete_choice_or_grammar_ends_the_reply_with_stop(tiny_llm, slots):
    with BatchGenerator(tiny_llm, slots=slots, n_ctx_seq=256) as gen:
        assert gen.backend.vocab.eog_ids == frozenset()  # the case: no token can end a reply
        a, b, c = _piece(tiny_llm, 5), _piece(tiny_llm, 9) + _piece(tiny_llm, 7), "zz"
        assert a and b and a != b
        choice = SamplingParams(temperature=0.0, max_tokens=16, choices=[a, b])
        grammar = SamplingParams(temperature=0.0, max_tokens=16, grammar=f'root ::= "{b}"')
        dead = SamplingParams(temperature=0.0, max_tokens=16, grammar=f'root ::= "{a}{c}"')
        prompts = [[1, 2, 3, 4], [10, 11, 12], [20, 21, 22, 23], [30, 31]]
        out = gen.complete_many(prompts, [choice, grammar, choice, dead])
    assert [x.finish_reason for x in out[:3]] == ["stop"] * 3, [x.error for x in out]
    assert out[0].text in (a, b) and out[2].text in (a, b) and out[1].text == b
    # a grammar that needs a character no token has is a dead end, not a complete reply
    assert out[3].finish_reason == "error" and "allows no token" in out[3].error

"""The ``llamabatch`` lm-evaluation-harness model on the fake backend: requests sharing a
context are one item, results come back in request order and equal the fake model's,
rolling windows add up, ``gen_kwargs`` are honoured or refused by name, and the model is
in the harness's registry."""

from __future__ import annotations

import pytest

from llamabatch import BatchGenerator
from llamabatch.errors import ModelFileError
from llamabatch.testing import FakeBackend

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from llamabatch.lm_eval import LlamaBatchLM  # noqa: E402
from llamabatch.lm_eval.model import move_trailing_whitespace, slots_of  # noqa: E402
from llamabatch.shapes.sampling_map import generation_sampling  # noqa: E402


def make(**kwargs) -> tuple[LlamaBatchLM, FakeBackend]:
    fake = FakeBackend()
    return LlamaBatchLM(BatchGenerator(backend=fake, slots=3), **kwargs), fake


def inst(kind: str, *args) -> Instance:
    return Instance(kind, {}, tuple(args), 0)


def logprob(fake: FakeBackend, tokens: list[int], start: int) -> float:
    return sum(fake.token_logprob(tokens[:j], tokens[j]) for j in range(start, len(tokens)))


def test_choices_of_one_context_are_one_item_and_come_back_in_order() -> None:
    lm, fake = make()
    contexts = ["Q: one?\nA:", "Q: two?\nA:"]
    reqs = [
        inst("loglikelihood", contexts[i % 2], cont)
        for i, cont in enumerate([" yes", " no", " maybe", " yes", "", " no"])
    ]
    out = lm.loglikelihood(reqs, disable_tqdm=True)
    for req, (lp, greedy) in zip(reqs, out):
        context, cont = req.args
        if not cont:
            assert (lp, greedy) == (0.0, True)
            continue
        p = fake.tokenize(context)
        assert lp == pytest.approx(logprob(fake, fake.tokenize(context + cont), len(p)))
        assert isinstance(greedy, bool)
    assert lm.generator.stats.labels_scored == 2  # one item per context
    assert fake.violations == []


def test_a_contexts_trailing_whitespace_is_scored_with_the_continuation() -> None:
    # the harness's rule (TemplateLM._encode_pair): "...A:\n" + "4" is scored as
    # "...A:" + "\n4", so contexts differing only in trailing whitespace are one item
    lm, fake = make()
    contexts = ["Q: one?\nA:\n", "Q: one?\nA: ", "Q: one?\nA:"]
    reqs = [inst("loglikelihood", c, "4") for c in contexts]
    reqs.append(inst("loglikelihood", "Q: one?\nA: \n", ""))  # the whitespace alone
    out = lm.loglikelihood(reqs, disable_tqdm=True)
    start = len(fake.tokenize("Q: one?\nA:"))
    for text, (lp, _) in zip(["\n4", " 4", "4", " \n"], out):
        assert lp == pytest.approx(logprob(fake, fake.tokenize("Q: one?\nA:" + text), start))
    assert out[3][0] < 0.0
    assert lm.generator.stats.labels_scored == 1


def test_the_whitespace_rule_is_the_harness_own() -> None:
    from lm_eval.api.model import TemplateLM

    class Bytes(TemplateLM):  # the harness's pair encoding over a byte tokenizer
        eot_token_id = 0
        tok_encode = staticmethod(lambda text, **_: list(text.encode()))
        loglikelihood_rolling = generate_until = _loglikelihood_tokens = None

    harness = Bytes()
    for context in ["Answer:\n", "Answer: \t\n ", "Answer:", " ", "a\n\nb  "]:
        want = harness._encode_pair(context, "4")
        got = move_trailing_whitespace(context, "4")
        assert (list(got[0].encode()), list(got[1].encode())) == tuple(map(list, want))


def test_no_scored_row_is_decoded_in_a_ubatch_of_one_token_per_sequence() -> None:
    # llama.cpp's CPU kernels round such a row differently (up to 0.6 nats on an AVX-512
    # CPU); the fake adds 1 nat there, so any such row shows in the log-likelihoods
    fake = FakeBackend(one_per_seq_noise=1.0)
    lm = LlamaBatchLM(BatchGenerator(backend=fake, slots=4))
    countries = ["France", "Germany", "Italy", "Spain", "Japan", "Egypt", "Canada", "Peru"]
    cities = [" Paris", " Lyon", " Nice", " Ottawa", " Rome", " Cairo", " Lima", " Bonn"]
    reqs = [
        inst("loglikelihood", f"Question: What is the capital of {country}?\nAnswer:", city)
        for k, country in enumerate(countries)
        for city in cities[k % 3 : k % 3 + 4]
    ]
    out = lm.loglikelihood(reqs, disable_tqdm=True)
    for req, (lp, _) in zip(reqs, out):
        context, cont = req.args
        start = len(fake.tokenize(context))
        assert lp == pytest.approx(logprob(fake, fake.tokenize(context + cont), start)), req.args
    assert fake.violations == []


def test_an_empty_context_starts_from_the_prefix_token() -> None:
    lm, fake = make(prefix_token_id=7)
    ((lp, _),) = lm.loglikelihood([inst("loglikelihood", "", "abc")], disable_tqdm=True)
    assert lp == pytest.approx(logprob(fake, [7, *fake.tokenize("abc")], 1))


def test_rolling_windows_cover_every_token_once() -> None:
    lm, fake = make(max_length=5, prefix_token_id=3)
    text = "hello there, rolling windows"
    tokens = fake.tokenize(text)
    (total,) = lm.loglikelihood_rolling([inst("loglikelihood_rolling", text)], disable_tqdm=True)
    # byte tokens, windows of 5 predicted tokens: each token scored once after the
    # window's context (the token before it, the last window more)
    want, start = 0.0, 0
    while start < len(tokens):
        end = min(start + 5, len(tokens))
        begin = max(0, end - 5)
        context = ([3] + tokens)[begin:start + 1]  # fmt: skip
        want += logprob(fake, context + tokens[start:end], len(context))
        start = end
    assert total == pytest.approx(want)
    assert lm.loglikelihood_rolling([inst("loglikelihood_rolling", "")]) == [0.0]


def test_generation_follows_the_gen_kwargs() -> None:
    lm, fake = make()
    out = lm.generate_until(
        [inst("generate_until", "prompt", {"until": ["\n"], "max_gen_toks": 4})],
        disable_tqdm=True,
    )
    reply = fake.expected("prompt", 4)
    assert out == [reply.text.split("\n")[0]]


def test_gen_kwargs_map_to_sampling_or_are_refused_by_name() -> None:
    greedy = generation_sampling({"until": "\n\n", "do_sample": False, "temperature": 0.7}, 9)
    assert (greedy.temperature, greedy.stop, greedy.max_tokens) == (0.0, ("\n\n",), 9)
    sampled = generation_sampling({"do_sample": True, "top_p": 0.9, "max_gen_toks": 3}, 9)
    assert (sampled.temperature, sampled.top_p, sampled.top_k, sampled.min_p) == (1.0, 0.9, 0, 0.0)
    assert sampled.max_tokens == 3
    assert generation_sampling({"temperature": 0.5}, 9).temperature == 0.5
    with pytest.raises(ValueError, match="'num_beams' cannot be honoured.*valid keys are until"):
        generation_sampling({"num_beams": 4}, 9)
    with pytest.raises(ValueError, match="top_p"):
        generation_sampling({"do_sample": True, "top_p": 2}, 9)


def test_arguments_from_the_harness() -> None:
    lm, _ = make(batch_size=8, max_batch_size=None, device="cuda:0")  # as the harness passes
    assert lm.max_length == lm.generator.config.n_ctx_seq - 2
    assert [slots_of(None, b) for b in (8, "8", 1, "auto", None)] == [8, 8, 4, 4, 4]
    assert slots_of(2, 8) == 2
    with pytest.raises(ValueError, match="slots=0"):
        slots_of(0, None)
    with pytest.raises(ValueError, match="max_length=0"):
        make(max_length=0)


def test_an_item_that_fails_names_its_request() -> None:
    fake = FakeBackend(n_ctx=64)
    lm = LlamaBatchLM(BatchGenerator(backend=fake, slots=2))
    with pytest.raises(ValueError, match="loglikelihood request 0 .*n_ctx=64"):
        lm.loglikelihood([inst("loglikelihood", "x" * 100, " y")], disable_tqdm=True)


def test_the_model_is_registered_and_made_from_an_argument_string() -> None:
    from lm_eval.api.registry import get_model

    assert get_model("llamabatch") is LlamaBatchLM
    with pytest.raises(ModelFileError, match="model file not found: /nonexistent.gguf"):
        LlamaBatchLM.create_from_arg_string("model=/nonexistent.gguf", {"batch_size": 1})

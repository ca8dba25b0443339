"""lm-evaluation-harness with the ``llamabatch`` model on the real model (SmolLM2): a local
multiple-choice task through ``lm_eval.simple_evaluate``, every request's log-likelihood
against ``Llama(logits_all=True)``, ``is_greedy`` on a case built to be greedy and one built
not to be, whole texts in rolling windows, and generation."""

from __future__ import annotations

from pathlib import Path

import pytest
from agreement import reference_continuation, reference_scores

pytest.importorskip("lm_eval")  # the eval extra (CI installs it)
pytestmark = pytest.mark.real_model

TASKS = Path(__file__).resolve().parent / "tasks"

#: Bound on a log-likelihood's distance from ``Llama(logits_all=True)``'s (nats). It holds
#: on CPUs whose kernels round a ubatch of one token per sequence differently (an AVX-512
#: AMD EPYC host: 0.16-0.28 before such runs were decoded in calls of their own) because
#: no scored row is decoded in one (docs/labels.md, "Agreement").
NATS = 0.05

#: SmolLM2 continues this with " apple," at temperature 0 (docs/design facts).
APPLES = "apple, apple, apple, apple,"


@pytest.fixture(scope="module")
def ref(model_path):
    import llama_cpp

    made = llama_cpp.Llama(
        model_path=str(model_path), n_ctx=1024, n_threads=1, logits_all=True, verbose=False
    )
    yield made
    made.close()


@pytest.fixture(scope="module")
def lm(llm):
    from llamabatch.lm_eval import LlamaBatchLM

    made = LlamaBatchLM(llm, slots=4, n_ctx_seq=512)
    yield made
    made.close()


def instance(kind: str, args: tuple):
    from lm_eval.api.instance import Instance

    return Instance(kind, {}, args, 0)


def test_simple_evaluate_on_a_local_task_agrees_with_logits_all(lm, ref, monkeypatch) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(TASKS)  # the task's data_files are relative to it
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=["llamabatch_capitals"],
        task_manager=TaskManager(include_path=str(TASKS)),
        log_samples=True,
    )
    assert results is not None
    acc = results["results"]["llamabatch_capitals"]["acc,none"]
    assert 0.5 <= acc <= 1.0  # 8 questions; SmolLM2 knows most capitals
    samples = results["samples"]["llamabatch_capitals"]
    assert len(samples) == 8
    n = 0
    for sample in samples:
        for (context, cont), resp in zip(sample["arguments"], sample["resps"]):
            (logprob, is_greedy) = resp[0]
            want, want_greedy = reference_continuation(ref, context, cont)
            assert logprob == pytest.approx(want, abs=NATS), (context, cont)
            assert is_greedy == want_greedy, (context, cont)
            n += 1
    assert n == 32
    assert lm.generator.stats.labels_scored >= 8


def test_rolling_and_generation_tasks_run_through_the_harness(lm, monkeypatch) -> None:
    import lm_eval
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.chdir(TASKS)
    tasks = ["llamabatch_capitals_text", "llamabatch_capitals_gen"]
    results = lm_eval.simple_evaluate(
        model=lm, tasks=tasks, task_manager=TaskManager(include_path=str(TASKS)), limit=2
    )
    assert results is not None
    text, gen = (results["results"][t] for t in tasks)
    assert 1.0 < text["byte_perplexity,none"] < 10.0  # SmolLM2 on plain English sentences
    assert 0.0 <= gen["exact_match,none"] <= 1.0


def test_is_greedy_on_a_greedy_and_a_not_greedy_continuation(lm, ref) -> None:
    conts = [" apple, apple,", " banana, apple,", " apple"]
    out = lm.loglikelihood(
        [instance("loglikelihood", (APPLES, c)) for c in conts], disable_tqdm=True
    )
    assert [g for _, g in out] == [True, False, True]
    for (logprob, _), cont in zip(out, conts):
        want, want_greedy = reference_continuation(ref, APPLES, cont)
        assert logprob == pytest.approx(want, abs=NATS)
    assert out[1][0] < out[0][0]


def test_an_empty_context_scores_after_the_prefix_token(lm, ref) -> None:
    text = "The capital of France is Paris."
    ((logprob, _),) = lm.loglikelihood([instance("loglikelihood", ("", text))], disable_tqdm=True)
    tokens = ref.tokenize(text.encode(), add_bos=False, special=True)
    want, _ = reference_scores(ref, [lm.prefix_token_id, *tokens], 1)
    assert logprob == pytest.approx(want, abs=NATS)


def test_rolling_windows_add_up_to_the_whole_text(llm, ref) -> None:
    from llamabatch.lm_eval import LlamaBatchLM

    text = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(6))
    tokens = ref.tokenize(text.encode(), add_bos=False, special=True)
    with LlamaBatchLM(llm, slots=2, n_ctx_seq=256, max_length=40) as small:
        (total,) = small.loglikelihood_rolling(
            [instance("loglikelihood_rolling", (text,))], disable_tqdm=True
        )
        prefix = small.prefix_token_id
    assert len(tokens) > 2 * 40  # three windows at least
    # the harness's windows: 40 predicted tokens each, after the token before them (the
    # last window after as many tokens as fill it up to 40)
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    want = 0.0
    windows = get_rolling_token_windows(tokens, prefix, 40, 1)
    for context, pred in map(make_disjoint_window, windows):
        want += reference_scores(ref, context + pred, len(context))[0]
    assert total == pytest.approx(want, abs=NATS * 3)


def test_generate_until_stops_at_until(lm) -> None:
    out = lm.generate_until(
        [
            instance("generate_until", (APPLES, {"until": ["\n"], "max_gen_toks": 6})),
            instance("generate_until", (APPLES, {"until": [" apple, apple"], "do_sample": False})),
        ],
        disable_tqdm=True,
    )
    assert out[0].startswith(" apple, apple")
    assert out[1] == ""  # cut before the stop string, which starts the reply

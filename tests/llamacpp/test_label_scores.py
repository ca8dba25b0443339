"""Label scores and n replies on the real model: scores agree with an independent
computation (``Llama(logits_all=True)``: eval prompt + label, log-softmax of ``scores``),
alone and batched, cold and from cached slots; n replies share one prefill."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from agreement import reference_logprob

from llamabatch import BatchGenerator, SamplingParams

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tag_prompts.jsonl"
ROWS = [json.loads(line) for line in EXAMPLES.read_text().splitlines() if line.strip()]

#: The label a reader gives each example (the file carries none); a set where two fit.
EXPECTED = {
    "t01": {"billing"},
    "t02": {"bug"},
    "t03": {"account"},
    "t04": {"feature_request"},
    "t05": {"billing", "account"},
    "t06": {"bug"},
    "t07": {"work"},
    "t08": {"spam"},
    "t09": {"personal"},
    "t10": {"newsletter"},
    "t11": {"work"},
    "t12": {"todo", "reminder"},
    "t13": {"idea"},
    "t14": {"shopping"},
    "t15": {"reminder", "todo"},
    "t16": {"idea"},
    "t17": {"positive"},
    "t18": {"negative"},
    "t19": {"neutral"},
    "t20": {"neutral", "positive"},
}


@pytest.fixture(scope="module")
def reference(model_path):
    import llama_cpp

    ref = llama_cpp.Llama(
        model_path=str(model_path), n_ctx=2048, n_threads=2, logits_all=True, verbose=False
    )
    yield ref
    ref.close()


def close(a: float, b: float) -> bool:
    return abs(a - b) <= max(0.05, 0.01 * abs(b))


def scored(row) -> SamplingParams:
    return SamplingParams(choices=row["choices"], score_choices=True)


def test_scores_agree_with_logits_all_alone_batched_cold_and_cached(llm, reference) -> None:
    """Every example (four label sets, prompts of unequal lengths, so that batched
    prefills end unevenly); a label may lack up to SKIP_NATS for the forms left out."""
    rows = ROWS
    want = [
        {lab: reference_logprob(reference, r["prompt"], lab) for lab in r["choices"]} for r in rows
    ]
    prompts, sampling = [r["prompt"] for r in rows], [scored(r) for r in rows]
    runs = {}
    with BatchGenerator(llm, slots=4, n_ctx_seq=512) as gen:
        runs["batch cold"] = gen.complete_many(prompts, sampling)
        runs["batch cached"] = gen.complete_many(prompts, sampling)
        assert gen.stats.prompt_tokens_cached > 0
    with BatchGenerator(llm, slots=1) as gen:
        runs["alone"] = gen.complete_many(prompts, sampling)
    bad = []
    for name, out in runs.items():
        for r, c, w in zip(rows, out, want):
            assert c.error is None, (name, c.error)
            assert c.text == max(c.choice_probs, key=c.choice_probs.get)
            assert sum(c.choice_probs.values()) == pytest.approx(1.0)
            bad += [
                (name, r["id"], lab, c.choice_logprobs[lab], w[lab])
                for lab in w
                if not close(c.choice_logprobs[lab], w[lab])
            ]
    assert not bad, bad


def nearest(text: str, labels: list[str]) -> str:
    words = text.strip().lower()
    return max(labels, key=lambda lab: difflib.SequenceMatcher(None, words, lab).ratio())


def test_scored_accuracy_is_no_lower_than_the_free_reply_matched_to_a_label(llm) -> None:
    prompts = [r["prompt"] for r in ROWS]
    with BatchGenerator(llm, slots=4, n_ctx_seq=512) as gen:
        labels = gen.complete_many(prompts, [scored(r) for r in ROWS])
        free = gen.complete_many(prompts, SamplingParams(temperature=0.0, max_tokens=8))
    right_scored = sum(c.text in EXPECTED[r["id"]] for r, c in zip(ROWS, labels))
    right_free = sum(nearest(c.text, r["choices"]) in EXPECTED[r["id"]] for r, c in zip(ROWS, free))
    assert right_scored >= right_free, (right_scored, right_free)


def test_n_replies_are_reproducible_differ_vote_and_prefill_once(llm) -> None:
    prompt = ROWS[2]["prompt"]
    n_prompt = len(llm.tokenize(prompt.encode(), add_bos=True, special=True))
    free = SamplingParams(n=3, temperature=0.8, seed=42, max_tokens=12)
    voted = SamplingParams(n=3, temperature=0.8, seed=42, choices=ROWS[2]["choices"])
    results = []
    for _ in range(2):
        with BatchGenerator(llm, slots=4, n_ctx_seq=512) as gen:
            (c,) = gen.complete_many([prompt], free)
            assert gen.stats.prefix_copies == 2
            # the prompt once; each other reply copies it and decodes its last token again
            assert gen.stats.prompt_tokens_prefilled == n_prompt + 2
            (v,) = gen.complete_many([prompt], voted)
        results.append(c)
        assert c.error is None and len(c.samples) == 3
        assert c.text == c.samples[0].text
        assert sum(v.votes.values()) == 3
        assert all(s.text in v.votes for s in v.samples)
    assert [s.token_ids for s in results[0].samples] == [s.token_ids for s in results[1].samples]
    assert len({s.token_ids for s in results[0].samples}) > 1


def test_a_label_longer_than_the_room_in_a_slot_costs_no_batch_failure(llm) -> None:
    """A 246-token prompt + 8 reply tokens fit n_ctx_seq=256, the prompt + a 14-token
    label do not: the scored item goes alone, the other items stay batched, and no
    decode fails for want of a KV cache slot."""
    body = "The printer on the third floor jams whenever someone sends a long report. "
    long_prompt = "Ticket 11: " + body * 17 + "Category:"
    labels = ["hardware", "hardware fault in the shared office printer, twice a day, every day"]
    prompts = ["apple, apple, apple, apple,", long_prompt, "pear, pear, pear, pear,"]
    labelled = SamplingParams(choices=labels, score_choices=True, max_tokens=8)
    free = SamplingParams(temperature=0.0, max_tokens=8)
    sampling = [labelled if p == long_prompt else free for p in prompts]
    with BatchGenerator(llm, slots=4, n_ctx_seq=256) as gen:
        out = gen.complete_many(prompts, sampling)
        stats = gen.stats
    assert stats.batch_failures == 0, stats.last_batch_failure
    assert stats.batching_enabled
    assert stats.alone_reasons == {"n_prompt_tokens + label tokens > n_ctx_seq": 1}
    for p, c in zip(prompts, out):
        assert c.error is None, c.error
        if p == long_prompt:
            assert c.path == "alone"  # scored there as the test above checks
            assert list(c.choice_probs) == labels and c.text == "hardware"
        else:
            assert c.path == "batch"

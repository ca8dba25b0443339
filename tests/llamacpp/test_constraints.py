"""Issue 12 on the real model: choices, JSON schemas, grammars, stop strings, logprobs,
batched and alone (SmolLM2-135M-Instruct Q4_1)."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import jsonschema
import pytest
from agreement import SPLIT_NOISE, assert_completions_agree, pick_is_near_best, prompt_ids

from llamabatch import BatchGenerator, SamplingParams
from llamabatch.llamacpp.backend import LlamaBackend
from llamabatch.llamacpp.batch import LlamaBatch
from llamabatch.llamacpp.context import BatchContext
from llamabatch.llamacpp.sampler import SeqSampler

pytestmark = pytest.mark.real_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tag_prompts.jsonl"


def example_tickets() -> list[tuple[str, tuple[str, ...]]]:
    """(prompt, the labels its question offers) of each example ticket."""
    out = []
    for line in EXAMPLES.read_text(encoding="utf-8").splitlines():
        prompt = json.loads(line)["prompt"]
        labels = re.search(r"best: ([^?]*)\?", prompt).group(1)
        out.append((prompt, tuple(label.strip() for label in labels.split(","))))
    return out


def complete(llm, prompts, slots: int, **sampling) -> list:
    with BatchGenerator(
        llm,
        slots=slots,
        n_ctx_seq=512,
        max_tokens=60,
        sampling=SamplingParams(temperature=0.0, **sampling),
    ) as gen:
        return gen.complete_many(prompts)


@pytest.mark.parametrize("slots", [1, 4, 8])
def test_every_example_ticket_gets_exactly_one_of_its_own_labels(llm, slots: int) -> None:
    tickets = example_tickets()
    replies = []
    for labels, run in itertools.groupby(tickets, key=lambda t: t[1]):
        done = complete(llm, [prompt for prompt, _ in run], slots, choices=labels)
        replies += [(c.text, c.finish_reason, c.error, labels) for c in done]
    assert len(replies) == 20
    assert all(
        text in labels and reason == "stop" and error is None
        for text, reason, error, labels in replies
    ), replies


SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"enum": ["billing", "bug", "account", "feature_request"]},
        "confidence": {"type": "number"},
    },
    "required": ["label", "confidence"],
}


@pytest.mark.parametrize("slots", [1, 4])
def test_json_schema_replies_parse_and_validate(llm, slots: int) -> None:
    prompts = [prompt for prompt, _ in example_tickets()[:6]]
    done = complete(llm, prompts, slots, json_schema=SCHEMA)
    assert {c.path for c in done} == ({"alone"} if slots == 1 else {"batch"})
    for c in done:
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.text), SCHEMA)


def test_the_batched_grammar_picks_what_the_full_grammar_chain_picks_alone(llm, reference) -> None:
    # batched: grammar checked lazily; alone: Llama.generate's chain with the grammar
    # over the whole vocabulary. Greedy, so the two agree up to a near tie.
    prompts = [prompt for prompt, _ in example_tickets()[::4]]
    batched = complete(llm, prompts, 5, json_schema=SCHEMA)
    alone = complete(llm, prompts, 1, json_schema=SCHEMA)
    assert [c.path for c in batched] == ["batch"] * 5
    assert_completions_agree(reference, llm, prompts, batched, alone, n=8)


def test_the_grammar_stage_sits_after_penalties_like_llama_s(llm) -> None:
    params = SamplingParams(temperature=0.0, choices=["a", "b"])
    with SeqSampler(llm, params, lazy_grammar=False) as sampler:
        assert [n.lstrip("?") for n in sampler.stage_names()] == ["penalties", "grammar", "greedy"]


def test_lazy_and_full_grammar_chains_pick_the_same_greedy_tokens(llm) -> None:
    eog = LlamaBackend(llm).vocab.eog_ids
    params = SamplingParams(temperature=0.0, repeat_penalty=1.3, json_schema=SCHEMA)
    for prompt, _ in example_tickets()[::10]:
        prompt_ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        outputs = []
        for lazy in (True, False):
            with (
                BatchContext(llm, slots=1, n_ctx_seq=512) as ctx,
                LlamaBatch(512, 1) as batch,
                SeqSampler(llm, params, lazy_grammar=lazy) as sampler,
            ):
                tokens, pos, out = prompt_ids, 0, []
                while len(out) < 30:
                    batch.clear()
                    row = batch.add_run(tokens, pos, 0, True)
                    assert ctx.decode(batch) == 0
                    pos += len(tokens)
                    token = sampler.sample(ctx, row)
                    out.append(token)
                    if token in eog:
                        break
                    tokens = [token]
            outputs.append(out)
        assert outputs[0] == outputs[1]
        assert outputs[0][-1] in eog


def test_a_refused_grammar_is_each_items_error_and_nothing_else_breaks(llm) -> None:
    prompts = [prompt for prompt, _ in example_tickets()[:3]]
    with BatchGenerator(
        llm,
        slots=2,
        n_ctx_seq=512,
        max_tokens=8,
        sampling=SamplingParams(grammar="root ::= undefined-rule"),
    ) as gen:
        done = gen.complete_many(prompts)
        assert [c.finish_reason for c in done] == ["error"] * 3
        assert all("grammar" in c.error for c in done)
        assert gen.stats.batching_enabled
    assert complete(llm, prompts[:2], 2, choices=["bug"])[0].text == "bug"


def test_a_grammar_string_is_honoured_batched_and_alone(llm) -> None:
    prompts = [prompt for prompt, _ in example_tickets()[:4]]
    grammar = 'root ::= "label: " ("yes" | "no")'
    for slots in (1, 4):
        assert {c.text for c in complete(llm, prompts, slots, grammar=grammar)} <= {
            "label: yes",
            "label: no",
        }


STOP_PROMPTS = [
    "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nList three colors, one per line.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nExplain what a tagger is.<|im_end|>\n<|im_start|>assistant\n",
]


def create_completion(llm, prompt: str, stop: list[str]) -> tuple[str, str]:
    out = llm.create_completion(prompt, max_tokens=24, temperature=0.0, stop=stop, seed=1)
    choice = out["choices"][0]
    return choice["text"], choice["finish_reason"]


def spanning_stop(llm, prompt: str) -> str:
    """A stop string made of the end of one reply token and the start of the next."""
    tokens = complete(llm, [prompt], 1, max_tokens=24)[0].token_ids
    pieces = [llm.detokenize([t]).decode("utf-8", errors="ignore") for t in tokens]
    for k in range(2, len(pieces) - 1):
        a, b = pieces[k], pieces[k + 1]
        if len(a.strip()) >= 2 and len(b.strip()) >= 2 and not b[0].isspace():
            return a[-2:] + b[:2]
    pytest.fail(
        f"no two neighbouring word pieces in the greedy reply {pieces!r}: pick a "
        "prompt whose reply has some, so the spanning stop string is tested"
    )


def agrees_with_create_completion(llm, reference, prompt: str, c, stop) -> bool:
    """True when our reply (text, finish reason) is ``create_completion``'s; else the
    two must have parted at a near tie before the stop rule acted (our token there is
    within the tie tolerance of the likeliest one), and False is returned."""
    text, reason = create_completion(llm, prompt, stop)
    if (c.text, c.finish_reason) == (text, reason):
        return True
    ids = list(c.token_ids)
    k = 0  # our tokens whose text is also the start of create_completion's
    while k < len(ids) and text.startswith(llm.detokenize(ids[: k + 1]).decode("utf-8", "replace")):
        k += 1
    assert k < len(ids), (c.index, c.text, text, "same tokens, other stop handling")
    pick_is_near_best(reference, prompt_ids(llm, prompt) + ids[:k], ids[k], label=c.index)
    return False


@pytest.mark.parametrize("stop", [["\n"], [".", ","], "spanning"])
def test_stop_strings_equal_create_completion_greedy(llm, reference, stop) -> None:
    """Our stop rule cuts where ``create_completion``'s does; the two paths' greedy
    replies are compared until their first near tie (another ubatch split can part
    them), and most must agree in full."""
    if stop == "spanning":
        stop = [spanning_stop(llm, STOP_PROMPTS[0])]
        assert len(stop[0]) == 4
    agreed = []
    for slots in (1, 3):
        ours = complete(llm, STOP_PROMPTS, slots, stop=stop, max_tokens=24)
        for prompt, c in zip(STOP_PROMPTS, ours):
            agreed.append(agrees_with_create_completion(llm, reference, prompt, c, stop))
    assert sum(agreed) >= len(agreed) // 2, agreed
    if len(stop[0]) == 4:
        assert ours[0].finish_reason == "stop"  # the spanning stop string was found


def test_per_item_max_tokens_caps_the_reply(llm) -> None:
    for c in complete(llm, STOP_PROMPTS, 3, max_tokens=3):
        assert c.n_tokens == 3 and c.finish_reason == "length"


def test_logprobs_are_the_models_top_tokens_batched_and_alone(llm, reference) -> None:
    """Batched and alone agree up to a near tie, and where the first token is the same,
    its log-probability is the same within the measured split noise."""
    batched = complete(llm, STOP_PROMPTS, 3, logprobs=3, max_tokens=5)
    alone = complete(llm, STOP_PROMPTS, 1, logprobs=3, max_tokens=5)
    assert_completions_agree(reference, llm, STOP_PROMPTS, batched, alone)
    for b, a in zip(batched, alone):
        assert len(b.logprobs) == b.n_tokens and len(a.logprobs) == a.n_tokens
        for token, entry in zip(b.token_ids, b.logprobs):
            ids = [t for t, _ in entry]
            values = [lp for _, lp in entry]
            assert len(entry) == 3 and ids[0] == token  # greedy: the chosen is the top
            assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
        if b.token_ids[0] == a.token_ids[0]:
            assert b.logprobs[0][0][1] == pytest.approx(a.logprobs[0][0][1], abs=SPLIT_NOISE)


#: Schemas whose replies are JSON strings; each bounded, so every reply ends in the grammar.
STRING_SCHEMAS = [
    {"type": "string", "maxLength": 10},
    {
        "type": "object",
        "properties": {"poem": {"type": "string", "maxLength": 40}},
        "required": ["poem"],
    },
    {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3},
]
#: Prompts that ask for line breaks: llama-cpp-python's converter let the model write
#: them raw inside a string (``"The waves\n"``), which ``json.loads`` refuses.
LINE_PROMPTS = [
    "<|im_start|>user\nWrite a short poem about the sea, one line per verse.<|im_end|>\n"
    "<|im_start|>assistant\n",
    "<|im_start|>user\nList three colors, one per line.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nSend me three emojis on three lines.<|im_end|>\n<|im_start|>assistant\n",
]


def test_strings_of_a_schema_grammar_exclude_control_characters() -> None:
    from llamabatch.llamacpp.constraints import JSON_STRING_CHAR, schema_grammar

    for schema in STRING_SCHEMAS:
        rules = dict(line.split(" ::= ", 1) for line in schema_grammar(schema).splitlines())
        assert rules["char"] == JSON_STRING_CHAR
    assert "\\x00-\\x1F" in JSON_STRING_CHAR and "\\x7F" in JSON_STRING_CHAR


@pytest.mark.parametrize("slots", [1, 4])
@pytest.mark.parametrize("schema", STRING_SCHEMAS, ids=["string", "object", "array"])
def test_json_string_replies_parse_and_validate(llm, slots: int, schema) -> None:
    done = complete(llm, LINE_PROMPTS, slots, json_schema=schema, max_tokens=120)
    assert {c.path for c in done} == ({"alone"} if slots == 1 else {"batch"})
    for c in done:
        assert c.finish_reason == "stop", c
        jsonschema.validate(json.loads(c.text), schema)


def _nested_schema(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


@pytest.mark.parametrize("slots", [1, 4])
def test_a_schema_nested_too_deeply_is_its_items_error_only(llm, slots: int) -> None:
    deep = {"prompt": "Reply in JSON:", "json_schema": _nested_schema(600)}
    greedy = SamplingParams(temperature=0.0, max_tokens=4)
    with BatchGenerator(llm, slots=slots, n_ctx_seq=256, sampling=greedy) as gen:
        done = gen.complete_many(["One, two,", deep, "Red, green,"])
        assert [c.ok for c in done] == [True, False, True], [c.error for c in done]
        assert "nested too deeply" in done[1].error
        assert gen.stats.batch_failures == 0
        online = [gen.submit(item) for item in (deep, "One, two,")]  # the engine thread lives
        got = [f.result(timeout=120) for f in online]
        assert [c.ok for c in got] == [False, True], [c.error for c in got]
        assert "nested too deeply" in got[0].error

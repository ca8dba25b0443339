"""A grammar that allows no token at some step ends its own item with an error, batched
and alone, and llama.cpp never sees an accept it aborts on (``llama-grammar.cpp: fatal
error``, SIGABRT). Each case runs in a subprocess, so a regression fails the test
instead of killing pytest. The dead ends that can be seen in the grammar are refused up
front (as is a grammar nested deep enough to overflow llama.cpp's parser, SIGSEGV); the
``backstop`` cases switch that check off, so that the empty class reaches the
check made while sampling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import llama_cpp
    from llamabatch import BatchGenerator, SamplingParams
    if os.environ.get("NO_UPFRONT_CHECK"):
        import llamabatch.llamacpp.constraints as constraints
        constraints.check_literals = lambda grammar: None

    poison = SamplingParams(temperature=0.0, **json.loads(sys.argv[1]))
    slots = int(sys.argv[2])
    llm = llama_cpp.Llama(model_path=os.environ["MODEL"], n_ctx=2048, n_threads=2,
                          verbose=False)
    plain = SamplingParams(temperature=0.0)
    prompts = ["The capital of France is", "One, two, three,", "Say yes:", "Red, green,"]
    sampling = [plain, plain, poison, plain]
    with BatchGenerator(llm, slots=slots, n_ctx_seq=512, max_tokens=6) as gen:
        out = gen.complete_many(prompts, sampling)
        stats = gen.stats
    print(json.dumps({
        "out": [[c.finish_reason, c.error, c.path, c.text] for c in out],
        "batching": stats.batching_enabled,
        "failures": stats.batch_failures,
    }))
    """
)

POISONS = {
    "nul-in-choice": {"choices": ["a\x00b", "c"]},
    "empty-class": {"grammar": 'root ::= "a" [^\\x00-\\U0010FFFF]'},
    "empty-class-first": {"grammar": "root ::= [^\\x00-\\U0010FFFF]"},
    "nul-literal": {"grammar": 'root ::= "yes\\x00"'},
    # 30,000 nested groups overflowed llama.cpp's parser's stack (SIGSEGV)
    "deep-groups": {"grammar": "root ::= " + "(" * 30_000 + '"a"' + ")" * 30_000},
}
BACKSTOP = {"backstop-empty-class", "backstop-empty-class-first"}
POISONS |= {
    "backstop-empty-class": POISONS["empty-class"],
    "backstop-empty-class-first": POISONS["empty-class-first"],
}


def run_case(model_path, poison: dict, slots: int, backstop: bool = False) -> dict:
    env = dict(os.environ, MODEL=str(model_path))
    if backstop:
        env["NO_UPFRONT_CHECK"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(poison), str(slots)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.real_model
@pytest.mark.parametrize("slots", [4, 1])
@pytest.mark.parametrize("kind", list(POISONS))
def test_a_dead_end_grammar_ends_only_its_item(model_path, kind: str, slots: int) -> None:
    result = run_case(model_path, POISONS[kind], slots, backstop=kind in BACKSTOP)
    out = result["out"]
    reason, error, path, _ = out[2]
    assert reason == "error", out[2]
    if kind.startswith("nul"):
        assert "NUL character" in error  # refused up front, with its place
        assert ("choices[0]" in error) if kind == "nul-in-choice" else ("line 1" in error)
    elif kind == "deep-groups":
        assert "nested 101 deep" in error and "line 1, column 110" in error, error
    elif kind.startswith("empty"):
        assert "matches no character but NUL" in error and "line 1" in error, error
    else:
        assert "allows no token" in error
        n = 1 if kind == "backstop-empty-class" else 0
        assert f"after {n} reply token" in error, error
    for k in (0, 1, 3):
        assert out[k][0] in ("stop", "length") and out[k][1] is None, out[k]
        assert out[k][2] == ("batch" if slots > 1 else "alone")
    if slots > 1:  # the item's own error: batching goes on, nothing counted
        assert result["batching"] and result["failures"] == 0

"""The device check and ``slots="auto"`` on real llama.cpp builds: the check passes on the
CPU (SmolLM2; the tiny architecture models in tests/archs), a build whose mixed steps give wrong
logits (``tests/cli/corrupting_binding``) is caught and its items completed alone, and
``"auto"`` sizes the slots from the host's available memory on a CPU build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llamabatch import BatchGenerator, SamplingParams

pytestmark = pytest.mark.real_model

ROOT = Path(__file__).resolve().parents[2]
CORRUPTING = ROOT / "tests" / "cli" / "corrupting_binding"
WORDS = ("apple", "dog", "red", "blue", "cat")
PROMPTS = [f"{w}, {w}, {w}, {w}," for w in WORDS]
GREEDY = SamplingParams(temperature=0, max_tokens=4)


@pytest.mark.parametrize("slots", [2, 4])
def test_batched_equals_alone_on_the_cpu(llm, slots):
    with BatchGenerator(llm, slots=slots, n_ctx_seq=256, check_device=True) as gen:
        done = gen.complete_many(PROMPTS, GREEDY)
        stats = gen.stats
    assert "logits on the CPU agree" in stats.device_check, stats.device_check
    assert f"{slots} sequences" in stats.device_check
    assert stats.batching_enabled and stats.items_batched == len(PROMPTS)
    assert all(c.ok for c in done)


def test_a_second_generator_on_the_same_settings_reuses_the_check(llm):
    """The verdict is kept for the process by the ``Llama``'s model file, offload, context
    settings and the batch context's size: the second generator probes nothing and says so;
    a backend with a decode hook (it may decode otherwise) checks again."""
    from llamabatch.engine.device_check import CHECKS
    from llamabatch.llamacpp.backend import LlamaBackend

    CHECKS.clear()
    said = []
    for backend in (None, None, LlamaBackend(llm, decode_hook=lambda n: None)):
        kwargs = {"llm": llm} if backend is None else {"backend": backend}
        with BatchGenerator(**kwargs, slots=3, n_ctx_seq=256, check_device=True) as gen:
            done = gen.complete_many(PROMPTS[:3], GREEDY)
            said.append(gen.stats.device_check)
        assert all(c.ok and c.path == "batch" for c in done)
    reused = " (the check made earlier in this process)"
    assert "logits on the CPU agree" in said[0] and not said[0].endswith(reused)
    assert said[1] == said[0] + reused
    assert not said[2].endswith(reused)
    CHECKS.clear()


CORRUPTED_RUN = """
    import json, os, llama_cpp
    from llamabatch import BatchGenerator, SamplingParams
    llm = llama_cpp.Llama(os.environ["MODEL"], n_ctx=512, n_threads=2, verbose=False)
    prompts = [f"{w}, {w}, {w}," for w in ("apple", "dog", "red")]
    with BatchGenerator(llm, slots=2, n_ctx_seq=256, check_device=True) as gen:
        done = gen.complete_many(prompts, SamplingParams(temperature=0, max_tokens=3))
        stats = gen.stats
    with BatchGenerator(llm, slots=1) as gen:
        alone = gen.complete_many(prompts, SamplingParams(temperature=0, max_tokens=3))
    print("RESULT", json.dumps({
        "reason": stats.batch_disabled_reason, "check": stats.device_check,
        "paths": [c.path for c in done], "texts": [c.text for c in done],
        "alone": [c.text for c in alone],
    }))
"""


@pytest.mark.parametrize(
    ("mode", "step", "report"),
    [
        ("mixed", "mixed step", "#28537"),
        ("long", "long prefill", "#28211"),
        ("refill", "refill", "#28056"),
    ],
)
def test_a_build_that_corrupts_a_defect_shape_is_caught_named_and_items_complete_alone(
    model_path, mode, step, report
):
    """The stand-in binding (``tests/cli/corrupting_binding``) wrong only for one shape:
    a prompt beside other sequences' steps, a prompt past ``n_ubatch`` beside them, or a
    refill into a sequence just removed; the check names that step first."""
    env = dict(
        os.environ,
        MODEL=str(model_path),
        LLAMABATCH_CORRUPT=mode,
        PYTHONPATH=os.pathsep.join([str(CORRUPTING), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CORRUPTED_RUN)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line[len("RESULT ") :])
    assert "logits on the CPU disagree" in got["check"]
    assert f"first failed step: {step} (seq " in got["check"] and report in got["check"]
    assert got["check"] in got["reason"] and "every item is completed alone" in got["reason"]
    assert got["paths"] == ["alone"] * 3
    assert got["texts"] == got["alone"]  # alone: single-sequence decodes are not corrupted


def test_auto_slots_on_a_cpu_build_use_the_hosts_available_memory(llm):
    with BatchGenerator(llm, slots="auto", n_ctx_seq=512) as gen:
        choice = gen.slots_choice
        done = gen.complete_many(PROMPTS, GREEDY)
    assert choice is not None and gen.config.slots == choice.slots
    assert 1 <= choice.slots <= 8
    assert "free on host" in choice.reason and "per slot of 512 tokens" in choice.reason
    assert all(c.ok for c in done)

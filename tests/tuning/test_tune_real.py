"""``llamabatch.tune`` on the real test model: the caller's ``Llama`` answers afterwards
exactly as one we never touched, and one at a time is ``Llama.create_completion``."""

from __future__ import annotations

import pytest

from llamabatch import SamplingParams, tune

pytestmark = pytest.mark.real_model


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


ITEMS = [chat(f"Label ticket {k}: the printer jams. Reply bug or billing.") for k in range(4)]
CALLER = [chat("Write a short line about the sea."), chat("Name three fruits.")]


def caller_replies(llm) -> list[str]:
    return [
        llm.create_completion(p, max_tokens=8, temperature=0.9, repeat_penalty=1.3)["choices"][0][
            "text"
        ]
        for p in CALLER
    ]


def test_tune_leaves_the_llama_as_it_was(pair):
    used, untouched = pair
    report = tune(
        used,
        ITEMS,
        slots=(2,),
        rounds=2,
        items=2,
        sampling=SamplingParams(temperature=0.5, seed=3, choices=("bug", "billing")),
        max_tokens=4,
        n_ctx_seq=256,
    )
    assert report.floor.measured and report.floor.seeds == (3, 4)
    base = report.rounds[0].get("one_at_a_time")
    assert base is not None and {r.path for r in base.result.replies} == {"create_completion"}
    assert all(r.label in ("bug", "billing") for r in base.result.replies)
    assert report.settings[0].kv_mib_total == pytest.approx(2 * report.settings[0].kv_mib_per_slot)
    assert caller_replies(used) == caller_replies(untouched)

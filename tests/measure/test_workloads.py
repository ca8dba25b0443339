"""The synthetic workloads: ChatML prompts, deterministic for a seed, fresh for another,
of the lengths each promises (counted by a one-token-per-byte tokenizer)."""

from __future__ import annotations

import pytest

from llamabatch.measure.workloads import SYSTEM, WORKLOADS, tagging, warmup_prompt


def tok(text: str) -> list[int]:
    return list(text.encode())


def test_tagging_prompts_are_chatml_deterministic_and_near_the_target():
    w = tagging(400)
    a = w.prompts(6, tok, seed=3)
    assert a == w.prompts(6, tok, seed=3)
    assert a != w.prompts(6, tok, seed=4)
    for p in a:
        assert p.startswith("<|im_start|>system\n" + SYSTEM)
        assert p.endswith("<|im_end|>\n<|im_start|>assistant\n")
        assert 0.6 * 400 <= len(tok(p)) <= 1.4 * 400 + 100
    assert len({len(tok(p)) for p in a}) > 1
    assert w.max_tokens == 64 and "400 tokens" in w.description


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_named_workloads_are_fresh_per_seed(name):
    w = WORKLOADS[name]
    a, b = w.prompts(4, tok, seed=0), w.prompts(4, tok, seed=1)
    assert a == w.prompts(4, tok, seed=0) and not set(a) & set(b)
    assert all(p.endswith("<|im_start|>assistant\n") for p in a + b)


def test_s_shares_its_system_prompt_and_u_stays_in_its_range():
    s = WORKLOADS["S"].prompts(3, tok, seed=0)
    system = s[0][: s[0].index("<|im_start|>user")]
    assert len(tok(system)) >= 300 and all(p.startswith(system) for p in s)
    assert all(150 <= len(tok(p)) <= 350 + 80 for p in WORKLOADS["U"].prompts(5, tok, seed=0))
    assert warmup_prompt().startswith("<|im_start|>system\n" + SYSTEM)

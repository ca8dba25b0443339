"""Helpers of the Ray tests: the 24-item input, and comparing greedy replies tolerantly."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tag_prompts.jsonl"

#: A step whose two likeliest tokens are closer than this (natural log) is a near tie:
#: llama.cpp's logits move by up to 0.2 with another batch split (docs/engine.md), so
#: two paths may pick either token there and part after it.
NEAR_TIE = 0.5


def job_lines(n: int = 24) -> list[dict]:
    """``n`` items: the examples' prompts (without their choices) and chats made of
    their tickets, each asking for the top-2 log-probs of every reply token."""
    examples = [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines()]
    lines = []
    for k in range(n):
        example = examples[k % len(examples)]
        if k < len(examples):
            lines.append({"id": f"p{k}", "prompt": example["prompt"], "logprobs": 2})
        else:
            ticket = example["prompt"].split("\n\n")[1]
            messages = [{"role": "user", "content": f"Summarize: {ticket}"}]
            lines.append({"id": f"m{k}", "messages": messages, "logprobs": 2})
    return lines


def agree_until_near_tie(a: dict, b: dict) -> bool:
    """True when the greedy replies of records ``a`` and ``b`` pick the same token at
    every step up to the first near tie of ``a`` (or the end of the shorter one)."""
    for step_a, step_b in zip(a["logprobs"], b["logprobs"]):
        if int(step_a[0][0]) != int(step_b[0][0]):
            return False
        if len(step_a) > 1 and step_a[0][1] - step_a[1][1] < NEAR_TIE:
            return True
    return True

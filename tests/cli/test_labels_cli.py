"""``llamabatch complete`` with label scores and n replies: --score-choices, --n and the
line fields ``score_choices`` / ``n``; ``choice_probs``, ``samples``, ``votes`` in the
output; OpenAI's ``n`` as ``choices[]``; --resume over such lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_util import EXAMPLES, FAST, read_jsonl, run_cli, write_jsonl

from llamabatch.cli.job.input import read_prompts


def example_lines(n: int) -> list[dict]:
    return [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines()[:n]]


def test_n_and_score_choices_are_line_fields(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [{"prompt": "a", "n": 3}, {"prompt": "b", "choices": ["x"], "score_choices": True}],
    )
    entries = read_prompts(path)
    assert entries[0].fields == {"n": 3}
    assert entries[1].fields == {"choices": ["x"], "score_choices": True}
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "a", "n": 0}])
    (entry,) = read_prompts(bad, skip_bad=True)
    assert "n=0" in entry.error


@pytest.mark.real_model
def test_score_choices_and_n_in_output_lines_and_resume(capsys, tmp_path: Path) -> None:
    lines = example_lines(3)
    lines[2]["n"] = 2  # a line's own n: two constrained replies and their votes
    lines[2]["score_choices"] = False
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    args = ("complete", path, "-o", out, *FAST, "--slots", "4", "--quiet", "--score-choices")
    code, _, err = run_cli(capsys, *args, "--max-tokens", "8")
    assert code == 0, err
    records = read_jsonl(out)
    for line, rec in zip(lines[:2], records[:2]):
        probs = rec["choice_probs"]
        assert list(probs) == line["choices"] and abs(sum(probs.values()) - 1) < 1e-9
        assert rec["text"] == max(probs, key=probs.get)
    assert "choice_probs" not in records[2]
    assert len(records[2]["samples"]) == 2 and sum(records[2]["votes"].values()) == 2
    code, _, err = run_cli(capsys, *args, "--max-tokens", "8", "--resume")
    assert code == 0, err
    assert read_jsonl(out) == records  # nothing left to do, nothing rewritten


@pytest.mark.real_model
def test_openai_n_becomes_choices(capsys, tmp_path: Path) -> None:
    request = {
        "custom_id": "r1",
        "method": "POST",
        "url": "/v1/completions",
        "body": {"model": "any", "prompt": "The sky is", "max_tokens": 4, "n": 3, "seed": 1},
    }
    path = write_jsonl(tmp_path / "b.jsonl", [request])
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys, "complete", path, "-o", out, *FAST, "--output-format", "openai", "--quiet"
    )
    assert code == 0, err
    (rec,) = read_jsonl(out)
    choices = rec["response"]["body"]["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]


@pytest.mark.real_model
def test_the_summary_counts_the_tokens_of_every_reply(capsys, tmp_path: Path) -> None:
    lines = [
        {"id": "a", "prompt": "apple, apple, apple, apple,", "n": 3, "temperature": 0.9},
        {"id": "b", "prompt": "pear, pear, pear, pear,"},
    ]
    path = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(capsys, "complete", path, "-o", out, *FAST, "--seed", "3")
    assert code == 0, err
    a, b = read_jsonl(out)
    replies = sum(len(s["token_ids"]) for s in a["samples"]) + b["n_tokens"]
    assert replies > a["n_tokens"] + b["n_tokens"]  # the other replies hold tokens too
    summary = [line for line in err.splitlines() if "tokens in" in line]
    assert len(summary) == 1 and f", out {replies};" in summary[0], summary
    # OpenAI's usage counts every choice too
    request = {"custom_id": "r", "url": "/v1/completions", "body": {"prompt": lines[0]["prompt"]}}
    request["body"].update(n=3, temperature=0.9, seed=3)
    path = write_jsonl(tmp_path / "b.jsonl", [request])
    code, _, err = run_cli(
        capsys, "complete", path, "-o", tmp_path / "o.jsonl", *FAST, "--output-format", "openai"
    )
    assert code == 0, err
    (rec,) = read_jsonl(tmp_path / "o.jsonl")
    usage = rec["response"]["body"]["usage"]
    assert usage["completion_tokens"] == sum(len(s["token_ids"]) for s in a["samples"])
    assert f", out {usage['completion_tokens']};" in err


@pytest.mark.real_model
def test_openai_lines_carry_the_logprobs_asked_for(capsys, tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "Name a fruit."}]
    lines = [
        {
            "custom_id": "chat",
            "url": "/v1/chat/completions",
            "body": {"messages": chat, "logprobs": True, "top_logprobs": 2},
        },
        {"custom_id": "text", "url": "/v1/completions", "body": {"prompt": "Sky", "logprobs": 2}},
    ]
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys,
        "complete",
        write_jsonl(tmp_path / "b.jsonl", lines),
        "-o",
        out,
        *FAST,
        "--output-format",
        "openai",
        "--quiet",
    )
    assert code == 0, err
    chat_rec, text_rec = read_jsonl(out)
    assert chat_rec["error"] is None and text_rec["error"] is None
    (chat_choice,) = chat_rec["response"]["body"]["choices"]
    (text_choice,) = text_rec["response"]["body"]["choices"]
    content = chat_choice["logprobs"]["content"]
    assert "".join(c["token"] for c in content) == chat_choice["message"]["content"]
    assert all(len(c["top_logprobs"]) in (2, 3) for c in content)  # the 2, then the chosen
    text_lp = text_choice["logprobs"]
    assert "".join(text_lp["tokens"]) == text_choice["text"]
    assert text_lp["text_offset"][0] == len("Sky")  # as create_completion: after the prompt
    assert (
        len(text_lp["token_logprobs"]) == text_rec["response"]["body"]["usage"]["completion_tokens"]
    )

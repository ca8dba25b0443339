"""``llamabatch complete`` for taggers (issue 12): per-line fields, --choices / --stop /
--json-schema / --grammar, text lines through the chat template, standard input,
--version, and OpenAI batch files in and out (with --resume)."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from cli_util import EXAMPLES, FAST, example_prompts, read_jsonl, run_cli, write_jsonl

from llamabatch import SamplingParams
from llamabatch.cli.job.input import read_prompts
from llamabatch.items import with_fields
from llamabatch.llamacpp.constraints import json_object_grammar

LABELS = ["billing", "bug", "account", "feature_request"]


# -- reading (no model) -----------------------------------------------------------------


def test_an_unknown_field_is_warned_once_per_file_naming_it(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": 1, "prompt": "a", "colour": "red"},
            {"id": 2, "prompt": "b", "colour": "x"},
            {"id": 3, "prompt": "c", "max_tokens": 3, "sizee": 1},
        ],
    )
    warnings: list[str] = []
    entries = read_prompts(path, warn=warnings.append)
    assert len(warnings) == 2
    assert '"colour"' in warnings[0] and ":1:" in warnings[0]
    assert '"sizee"' in warnings[1] and ":3:" in warnings[1]
    assert entries[2].fields == {"max_tokens": 3}


def test_a_bad_field_value_is_a_bad_line_named_by_number(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": 1, "prompt": "a", "max_tokens": 0},
            {"id": 2, "prompt": "b", "choices": []},
            {"id": 3, "prompt": "c", "choices": ["x"], "grammar": 'root ::= "x"'},
        ],
    )
    bad = read_prompts(path, skip_bad=True)
    assert [b.error.split(":")[0] for b in bad] == ["line 1", "line 2", "line 3"]
    assert "max_tokens" in bad[0].error and "choices" in bad[1].error


def test_response_format_becomes_the_bindings_constraint(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"prompt": "x", "response_format": {"type": "json_object"}},
            {
                "prompt": "y",
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "s", "schema": schema},
                },
            },
            {"prompt": "z", "response_format": {"type": "text"}},
        ],
    )
    flags = SamplingParams(choices=["a", "b"])
    resolved = [with_fields(flags, e.fields) for e in read_prompts(path)]
    assert [(s.grammar, s.json_schema, s.choices) for s in resolved] == [
        (json_object_grammar(), None, None),  # llama-cpp-python's JSON_GBNF
        (None, schema, None),
        (None, None, None),  # {"type": "text"} lifts the flags' constraint
    ]


def openai_lines() -> list[dict]:
    chat = [{"role": "user", "content": "Name a colour. One word."}]
    return [
        {
            "custom_id": "r1",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "any", "messages": chat, "max_tokens": 3},
        },
        {
            "custom_id": "r2",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": "any", "input": "x"},
        },
        {
            "custom_id": "r3",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"model": "any", "prompt": "The sky is", "max_tokens": 2, "stop": ["."]},
        },
        {
            "custom_id": "r4",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "any",
                "messages": chat,
                "max_completion_tokens": 40,
                "response_format": {"type": "json_object"},
            },
        },
    ]


def test_openai_requests_are_read_as_items(tmp_path: Path) -> None:
    entries = read_prompts(write_jsonl(tmp_path / "b.jsonl", openai_lines()), skip_bad=True)
    assert [e.id for e in entries] == ["r1", "r2", "r3", "r4"]  # a rejected line keeps its own
    assert "/v1/embeddings" in entries[1].error
    assert entries[0].url == "/v1/chat/completions" and entries[0].messages
    assert entries[2].prompt == "The sky is" and entries[2].fields == {
        "max_tokens": 2,
        "stop": ["."],
    }
    assert entries[3].fields == {"max_tokens": 40, "response_format": {"type": "json_object"}}
    assert with_fields(SamplingParams(), entries[3].fields).grammar == json_object_grammar()


def test_version(capsys) -> None:
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and re.match(r"llamabatch \d+\.\d+\.\d+ \(llama-cpp-python ", out)


def test_template_without_text_placeholder_is_a_usage_error(capsys, tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("hello\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "complete", path, "--template", "no placeholder")
    assert code == 2 and "{text}" in err


# -- real jobs --------------------------------------------------------------------------


@pytest.mark.real_model
def test_every_example_ticket_gets_one_of_its_own_labels(capsys, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys,
        "complete",
        EXAMPLES,
        "-o",
        out,
        *FAST,
        "--max-tokens",
        "8",
        "--slots",
        "4",
        "--quiet",
    )
    assert code == 0, err
    allowed = {
        json.loads(line)["id"]: json.loads(line)["choices"]
        for line in EXAMPLES.read_text(encoding="utf-8").splitlines()
    }
    records = read_jsonl(out)
    assert len(records) == 20
    assert all(r["text"] in allowed[r["id"]] and r["finish_reason"] == "stop" for r in records), (
        records
    )


@pytest.mark.real_model
def test_per_line_fields_and_flags(capsys, tmp_path: Path) -> None:
    prompts = example_prompts(4)
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": "short", "prompt": prompts[0], "max_tokens": 3, "choices": None},
            {"id": "labels", "prompt": prompts[1]},
            {
                "id": "json",
                "prompt": prompts[2],
                "max_tokens": 40,
                "json_schema": {
                    "type": "object",
                    "properties": {"label": {"enum": LABELS}},
                    "required": ["label"],
                },
            },
            {
                "id": "stop",
                "prompt": prompts[3],
                "choices": ["bug report", "billing"],
                "stop": [" "],
            },
        ],
    )
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys,
        "complete",
        path,
        "-o",
        out,
        *FAST,
        "--max-tokens",
        "20",
        "--choices",
        ",".join(LABELS),
        "--quiet",
        "--slots",
        "2",
    )
    assert code == 0, err
    r = {rec["id"]: rec for rec in read_jsonl(out)}
    assert r["short"]["n_tokens"] <= 3
    assert r["labels"]["text"] in LABELS
    assert json.loads(r["json"]["text"])["label"] in LABELS
    assert r["stop"]["text"] in ("bug", "billing")


@pytest.mark.real_model
def test_grammar_and_json_schema_files(capsys, tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "in.jsonl", [{"id": k, "prompt": p} for k, p in enumerate(example_prompts(3))]
    )
    grammar = tmp_path / "g.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n', encoding="utf-8")
    schema = tmp_path / "s.json"
    schema.write_text(
        json.dumps(
            {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        ),
        encoding="utf-8",
    )
    for flag, file, check in (
        ("--grammar", grammar, lambda t: t in ("yes", "no")),
        ("--json-schema", schema, lambda t: isinstance(json.loads(t)["ok"], bool)),
    ):
        out = tmp_path / f"out{flag}.jsonl"
        code, _, err = run_cli(
            capsys, "complete", path, "-o", out, *FAST, "--max-tokens", "20", flag, file, "--quiet"
        )
        assert code == 0, err
        assert all(check(r["text"]) for r in read_jsonl(out)), read_jsonl(out)


@pytest.mark.real_model
def test_text_lines_from_standard_input_go_through_the_chat_template(
    capsys, monkeypatch, tmp_path: Path
) -> None:
    lines = "I was charged twice.\nThe app crashes on start.\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.encode())))
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys,
        "complete",
        "-",
        "-o",
        out,
        *FAST,
        "--max-tokens",
        "12",
        "--quiet",
        "--system",
        "You tag tickets.",
        "--template",
        "Ticket: {text}\nCategory?",
        "--choices",
        "billing,bug",
    )
    assert code == 0, err
    records = read_jsonl(out)
    assert [r["id"] for r in records] == [1, 2]
    assert all(r["text"] in ("billing", "bug") for r in records), records
    chat_tokens = records[0]["n_prompt_tokens"]
    code, _, err = run_cli(
        capsys,
        "complete",
        _text_file(tmp_path, lines),
        "-o",
        out,
        "--overwrite",
        *FAST,
        "--quiet",
        "--raw",
    )
    assert code == 0, err
    assert read_jsonl(out)[0]["n_prompt_tokens"] < chat_tokens


def _text_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "in.txt"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.real_model
def test_an_openai_batch_file_round_trips_and_resumes(capsys, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "batch.jsonl", openai_lines())
    out = tmp_path / "out.jsonl"
    argv = (
        "complete",
        path,
        "-o",
        out,
        *FAST,
        "--max-tokens",
        "30",
        "--skip-bad",
        "--output-format",
        "openai",
        "--quiet",
        "--slots",
        "2",
    )
    code, _, err = run_cli(capsys, *argv)
    assert code == 0, err
    records = read_jsonl(out)
    assert [r["custom_id"] for r in records] == ["r1", "r2", "r3", "r4"]  # its own id
    assert all(r["id"].startswith("batch_req_") for r in records)
    ok = {r["custom_id"]: r for r in records if r["error"] is None}
    assert set(ok) == {"r1", "r3", "r4"}
    assert records[1]["response"] is None and "/v1/embeddings" in records[1]["error"]["message"]
    chat = ok["r1"]["response"]
    assert chat["status_code"] == 200 and chat["body"]["object"] == "chat.completion"
    assert chat["body"]["choices"][0]["message"]["role"] == "assistant"
    assert chat["body"]["usage"]["completion_tokens"] <= 3
    usage = chat["body"]["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    text = ok["r3"]["response"]["body"]
    assert text["object"] == "text_completion" and "." not in text["choices"][0]["text"]
    r4 = ok["r4"]["response"]["body"]["choices"][0]
    if r4["finish_reason"] == "stop":
        assert isinstance(json.loads(r4["message"]["content"]), dict)
    # resume: keep the first two lines, the job writes the other two, each id once
    out.write_text("".join(json.dumps(r) + "\n" for r in records[:2]), encoding="utf-8")
    code, _, err = run_cli(capsys, *argv, "--resume")
    assert code == 0, err
    assert [r["custom_id"] for r in read_jsonl(out)] == ["r1", "r2", "r3", "r4"]

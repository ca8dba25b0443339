"""Every SamplingParams field is a line field of ``llamabatch complete`` (one resolution,
:mod:`llamabatch.items`), and a line's constraint replaces the flags' locally."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_util import FAST, read_jsonl, run_cli, write_jsonl

from llamabatch.cli.job.input import read_prompts


def test_logprobs_and_stop_token_ids_are_line_fields_not_unknown(tmp_path: Path) -> None:
    """Failed before: both were "unknown field ... ignored"."""
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [{"prompt": "a", "logprobs": 2}, {"prompt": "b", "stop_token_ids": [2]}],
    )
    warnings: list[str] = []
    entries = read_prompts(path, warn=warnings.append)
    assert warnings == []
    assert entries[0].fields == {"logprobs": 2} and entries[1].fields == {"stop_token_ids": [2]}


@pytest.mark.real_model
def test_a_lines_response_format_text_lifts_choices_and_logprobs_are_written(
    capsys, tmp_path: Path, model_path
) -> None:
    """The text line failed before: --choices still held it to "bug" / "billing"."""
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": "free", "prompt": "Once upon a time", "response_format": {"type": "text"}},
            {
                "id": "number",
                "prompt": "The year after 1999 is",
                "json_schema": {"type": "integer"},
            },
            {"id": "label", "prompt": "Is a crash a bug? Answer:", "logprobs": 2},
        ],
    )
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys, "complete", path, "-o", out, "--model", model_path, *FAST,
        "--max-tokens", "6", "--choices", "bug,billing", "--quiet",
    )  # fmt: skip
    assert code == 0, err
    r = {rec["id"]: rec for rec in read_jsonl(out)}
    assert r["free"]["n_tokens"] == 6 and r["free"]["finish_reason"] == "length"
    assert r["free"]["text"] not in ("bug", "billing")
    assert isinstance(json.loads(r["number"]["text"]), int)
    assert r["label"]["text"] in ("bug", "billing") and "logprobs" not in r["free"]
    steps = r["label"]["logprobs"]
    assert len(steps) == r["label"]["n_tokens"] and all(len(s) >= 2 for s in steps)
    assert all(isinstance(tok, int) and lp <= 0 for s in steps for tok, lp in s)

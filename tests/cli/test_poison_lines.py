"""A JSONL job with a grammar that allows no token on some lines (a NUL in a choice, an
empty character class) completes every other line, and each poison line gets its error
in place; ``--resume`` finishes the job the same way. The job runs in a subprocess: an
abort of llama.cpp (exit 134) fails the test instead of killing pytest."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cli_util import FAST, example_prompts, read_jsonl, write_jsonl

POISON_CHOICE = {"choices": ["N/A\u0000"]}
POISON_GRAMMAR = {"grammar": 'root ::= "a" [^\\x00-\\U0010FFFF]'}


def lines() -> list[dict]:
    out = [{"id": f"t{k}", "prompt": p} for k, p in enumerate(example_prompts(12))]
    out[8].update(POISON_CHOICE)
    out[3].update(POISON_GRAMMAR)
    out[5].update({"choices": ["bug", "billing"]})
    return out


def run_job(model_path, path, out, *extra: str) -> subprocess.CompletedProcess:
    argv = ["complete", path, "-o", out, "--model", model_path, *FAST, "--slots", "4"]
    return subprocess.run(
        [sys.executable, "-m", "llamabatch", *map(str, argv), "--quiet", *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )


def check(records: list[dict]) -> None:
    assert [r["id"] for r in records] == [f"t{k}" for k in range(12)]
    for k, r in enumerate(records):
        if k in (3, 8):
            assert r["finish_reason"] == "error", r
        else:
            assert r["error"] is None and r["finish_reason"] in ("stop", "length"), r
    assert "NUL character" in records[8]["error"] and "choices[0]" in records[8]["error"]
    assert "matches no character but NUL" in records[3]["error"]  # refused up front
    assert "line 1, column 14" in records[3]["error"]


@pytest.mark.real_model
def test_poison_lines_get_their_error_in_place_and_resume_works(model_path, tmp_path) -> None:
    path = write_jsonl(tmp_path / "job.jsonl", lines())
    out = tmp_path / "out.jsonl"
    proc = run_job(model_path, path, out)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    check(read_jsonl(out))
    # cut the output after the first poison line: --resume writes the rest, poison included
    kept = out.read_text(encoding="utf-8").splitlines(keepends=True)[:5]
    out.write_text("".join(kept), encoding="utf-8")
    proc = run_job(model_path, path, out, "--resume")
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    check(read_jsonl(out))

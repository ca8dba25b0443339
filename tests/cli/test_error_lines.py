"""The error lines of ``llamabatch complete``: which id they carry, what they say, in both
output formats, how ``--resume`` redoes the ones whose input line was fixed, and how a
failed write is counted."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from cli_util import FAST, read_jsonl, run_cli, single_error_line, write_jsonl

from llamabatch.cli.job.input import BadLine, read_prompts

NO_MODEL = "no-model.gguf"  # a path that does not exist: these jobs must not load a model


def _job(capsys, src, out, *flags):
    return run_cli(capsys, "complete", src, "-o", out, "--skip-bad", "--model", NO_MODEL, *flags)


# -- the id of an error line ----------------------------------------------------------------


def test_a_bad_line_with_its_own_id_keeps_it_and_one_without_gets_its_number(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(
        '{"id": "t7", "prompt": 5}\n{"id": 40, "prompt": "ok", "max_tokens": "many"}\n'
        '{"prompt": 5}\n{"id": null, "prompt": 5}\n',
        encoding="utf-8",
    )
    entries = read_prompts(src, skip_bad=True)
    assert all(isinstance(e, BadLine) for e in entries)
    assert [e.id for e in entries] == ["t7", 40, 3, 4]
    assert [e.line for e in entries] == [1, 2, 3, 4]


def test_a_batch_line_without_body_is_a_request_that_names_the_missing_body(tmp_path):
    line = {"custom_id": "r2", "method": "POST", "url": "/v1/chat/completions"}
    src = write_jsonl(tmp_path / "in.jsonl", [line])
    warnings: list[str] = []
    (bad,) = read_prompts(src, skip_bad=True, warn=warnings.append)
    assert isinstance(bad, BadLine) and bad.id == "r2"
    assert '"body"' in bad.error and bad.error.startswith("line 1: ")
    assert warnings == []  # custom_id, method and url are a request's own keys


def test_every_openai_error_line_has_a_string_custom_id(capsys, tmp_path):
    lines = [
        {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions"},
        {"custom_id": "r2", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}},
        {"prompt": 3},
        {"id": 12, "prompt": 3},
    ]
    src, out = write_jsonl(tmp_path / "in.jsonl", lines), tmp_path / "out.jsonl"
    code, _, err = _job(capsys, src, out, "--output-format", "openai", "--quiet")
    assert code == 0, err
    records = read_jsonl(out)
    assert [r["custom_id"] for r in records] == ["r1", "r2", "3", "12"]
    assert all(r["response"] is None and r["error"]["code"] == "invalid_request" for r in records)
    assert '"body"' in records[0]["error"]["message"]
    # resumed with the same input, the string custom_ids are its items: nothing to redo
    code, _, err = _job(capsys, src, out, "--output-format", "openai", "--resume")
    assert code == 0, err
    assert "nothing to do: all 4 items are already in" in err
    assert len(read_jsonl(out)) == 4


def test_ids_that_are_one_custom_id_are_refused_for_openai_output(capsys, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": 7, "prompt": 1}, {"id": "7", "prompt": 1}])
    code, _, err = _job(capsys, src, tmp_path / "out.jsonl", "--output-format", "openai")
    assert code == 2
    line = single_error_line(err)
    assert '"7"' in line and "custom_id" in line and "line 1" in line and "line 2" in line


# -- --resume redoes the error lines whose input line was fixed ----------------------------


def test_resume_redoes_an_error_line_whose_line_changed(capsys, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "a", "prompt": 1}\n{"id": "b", "prompt": 2}\n', encoding="utf-8")
    assert _job(capsys, src, out, "--quiet")[0] == 0
    first = read_jsonl(out)
    assert [r["id"] for r in first] == ["a", "b"]
    src.write_text('{"id": "a", "prompt": 1}\n{"id": "b", "prompt": [2]}\n', encoding="utf-8")
    code, _, err = _job(capsys, src, out, "--resume")
    assert code == 0, err
    records = read_jsonl(out)
    assert [r["id"] for r in records] == ["a", "b"]
    assert records[0] == first[0]
    assert "is list, not a string" in records[1]["error"]  # the line as it is now
    assert "1 error lines whose input line changed since were removed" in err


def test_resume_redoes_an_error_line_keyed_by_its_line_number_once_it_has_an_id(capsys, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "a", "prompt": 1}\nnot json\n', encoding="utf-8")
    assert _job(capsys, src, out, "--quiet")[0] == 0
    assert [r["id"] for r in read_jsonl(out)] == ["a", 2]
    src.write_text('{"id": "a", "prompt": 1}\n{"id": "x", "prompt": 2}\n', encoding="utf-8")
    code, _, err = _job(capsys, src, out, "--resume", "--quiet")
    assert code == 0, err
    assert [r["id"] for r in read_jsonl(out)] == ["a", "x"]


def test_resume_still_refuses_a_changed_line_whose_reply_is_not_an_error(capsys, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('{"id": "a", "prompt": 1}\n', encoding="utf-8")
    assert _job(capsys, src, out, "--quiet")[0] == 0
    reply = {"id": "a", "text": "x", "finish_reason": "stop", "error": None}
    out.write_text(json.dumps(reply) + "\n", encoding="utf-8")  # as if it had been answered
    src.write_text('{"id": "a", "prompt": [1]}\n', encoding="utf-8")
    code, _, err = _job(capsys, src, out, "--resume")
    assert code == 2 and "changed since" in single_error_line(err)
    assert read_jsonl(out) == [reply]


@pytest.mark.real_model
def test_a_fixed_line_is_completed_on_resume(capsys, tmp_path, model_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    good = {"id": "b", "prompt": "The sky is"}
    write_jsonl(src, [{"id": "a", "prompt": "x", "max_tokens": "many"}, good])
    job = ("complete", src, "-o", out, "--model", model_path, "--skip-bad", *FAST, "--quiet")
    assert run_cli(capsys, *job)[0] == 0
    assert [(r["id"], r["finish_reason"]) for r in read_jsonl(out)][0] == ("a", "error")
    write_jsonl(src, [{"id": "a", "prompt": "x", "max_tokens": 2}, good])
    code, _, err = run_cli(capsys, *job, "--resume")
    assert code == 0, err
    records = {r["id"]: r for r in read_jsonl(out)}
    assert sorted(records) == ["a", "b"] and len(read_jsonl(out)) == 2
    assert records["a"]["error"] is None and records["a"]["n_tokens"] <= 2


# -- a write that fails is counted by what reached the file --------------------------------


def test_dev_full_says_no_item_was_written(capsys, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": k} for k in range(4)])
    code, _, err = _job(capsys, src, "/dev/full", "--quiet")
    assert code == 1
    line = single_error_line(err)
    assert "no space left on the device" in line and "0 of 4 items were written" in line


def test_a_file_size_limit_counts_the_whole_lines_that_reached_the_file(tmp_path):
    """RLIMIT_FSIZE cuts the write part-way, as a disk that fills up does (EFBIG for
    ENOSPC); Python ignores SIGXFSZ, so the write fails instead of killing it."""
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": k} for k in range(200)])
    out = tmp_path / "out.jsonl"
    limit = 12_000  # room for the fingerprint, not for the 200 error lines

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    argv = [sys.executable, "-m", "llamabatch", "complete", str(src), "-o", str(out)]
    argv += ["--skip-bad", "--quiet", "--model", NO_MODEL]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, preexec_fn=limited, cwd=Path.cwd()
    )
    assert done.returncode == 1, done.stderr
    line = single_error_line(done.stderr)
    data = out.read_bytes()
    whole = data.count(b"\n")
    assert 0 < whole < 200 and not data.endswith(b"\n")  # a cut line after the whole ones
    assert re.search(rf"; {whole} of 200 items were written to {re.escape(str(out))}", line), line


@pytest.mark.real_model
def test_dev_full_after_the_model_ran_is_one_error_that_counts_none(capsys, tmp_path, model_path):
    """The close of OUT after the failure has nothing left to write: no second error."""
    src = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "a"}, {"prompt": "b"}])
    code, _, err = run_cli(
        capsys, "complete", src, "-o", "/dev/full", "--model", model_path, *FAST, "--quiet"
    )
    assert code == 1
    line = single_error_line(err)
    assert "no space left on the device" in line and "0 of 2 items were written" in line

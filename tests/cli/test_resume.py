"""``llamabatch complete --resume``: an existing output, its cut-off last line, a SIGKILL.

Without --resume or --overwrite a non-empty output is refused; with --resume the ids
already there are skipped (compared as JSON values) and the rest appended in input order.
"""

from __future__ import annotations

import fcntl
import io
import json
import signal
import string
import time

import pytest
from cli_util import FAST, popen_cli, read_jsonl, run_cli, single_error_line, write_jsonl

from llamabatch.cli.job.input import id_key
from llamabatch.cli.job.resume import OutputCorrupt, scan_output

NO_MODEL = "no-model.gguf"  # a path that does not exist: these jobs must not load a model


def _record(item_id: object) -> str:
    return (
        json.dumps(
            {
                "id": item_id,
                "text": " x",
                "finish_reason": "stop",
                "error": None,
                "n_prompt_tokens": 3,
                "n_tokens": 1,
                "path": "batch",
            }
        )
        + "\n"
    )


# -- scan_output --------------------------------------------------------------------------


def test_scan_reads_the_ids_of_whole_lines_and_measures_a_cut_off_end():
    whole = _record("a") + "\n" + _record(7) + _record("7")
    scan = scan_output(io.BytesIO((whole + '{"id": "b", "te').encode()))
    assert scan.done == {id_key("a"), id_key(7), id_key("7")}
    assert scan.n_lines == 3 and scan.good_size == len(whole.encode())
    assert scan.cut_bytes == len('{"id": "b", "te') and scan.is_cut
    assert not scan_output(io.BytesIO(whole.encode())).is_cut


def test_a_cut_off_line_that_happens_to_parse_is_still_cut_off():
    scan = scan_output(io.BytesIO((_record(1) + _record(2).rstrip("\n")).encode()))
    assert scan.done == {id_key(1)} and scan.cut_bytes == len(_record(2)) - 1


@pytest.mark.parametrize(
    "bad", ["not json\n", '["a list"]\n', '{"text": "no id"}\n', '{"id": 1, "te\n', "\xff\n"]
)
def test_a_bad_whole_line_is_corruption_named_by_line(bad):
    data = (_record(1) + bad + _record(3)).encode("utf-8", "surrogateescape")
    with pytest.raises(OutputCorrupt, match="out.jsonl:2: line 2 of the existing output"):
        scan_output(io.BytesIO(data), "out.jsonl")


def test_id_keys_compare_json_values():
    assert id_key(7) != id_key("7") and id_key("é") == id_key("é")


# -- the command, without a model ---------------------------------------------------------


@pytest.fixture
def bad_input(tmp_path):
    """Three malformed lines: with --skip-bad their error lines need no model (ids 1, 2, 3)."""
    path = tmp_path / "in.jsonl"
    path.write_text("one\ntwo\nthree\n", encoding="utf-8")
    return path


def test_a_non_empty_output_is_refused_without_resume_or_overwrite(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    out_path.write_text(_record("old"))
    code, _, err = run_cli(
        capsys, "complete", bad_input, "-o", out_path, "--skip-bad", "--model", tmp_path / NO_MODEL
    )
    assert code == 2
    line = single_error_line(err)
    assert "already exists and is not empty" in line
    assert "--resume" in line and "--overwrite" in line
    assert out_path.read_text() == _record("old")


def test_overwrite_replaces_and_an_empty_output_needs_no_flag(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    out_path.write_text(_record("old"))
    code, _, err = run_cli(
        capsys,
        "complete",
        bad_input,
        "-o",
        out_path,
        "--skip-bad",
        "--overwrite",
        "--quiet",
        "--model",
        tmp_path / NO_MODEL,
    )
    assert code == 0 and err == ""
    assert [r["id"] for r in read_jsonl(out_path)] == [1, 2, 3]
    out_path.write_text("")
    assert (
        run_cli(
            capsys,
            "complete",
            bad_input,
            "-o",
            out_path,
            "--skip-bad",
            "--quiet",
            "--model",
            tmp_path / NO_MODEL,
        )[0]
        == 0
    )
    assert len(read_jsonl(out_path)) == 3


def test_resume_skips_ids_already_there_compared_as_json_values(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    out_path.write_text(_record(2) + _record("3") + _record("elsewhere"))
    code, _, err = run_cli(
        capsys,
        "complete",
        bad_input,
        "-o",
        out_path,
        "--skip-bad",
        "--resume",
        "--keep-other-ids",
        "--model",
        tmp_path / NO_MODEL,
    )
    assert code == 0, err
    assert [r["id"] for r in read_jsonl(out_path)] == [2, "3", "elsewhere", 1, 3]
    assert f"{out_path} holds 2 ids that are not in {bad_input}" in err
    assert (
        "2 items, 2 errors (2 bad input lines), 0 completed alone, 1 skipped as already "
        f"done in {out_path}"
    ) in err.strip().splitlines()[-1]


def _job(capsys, bad_input, out_path, *flags):
    return run_cli(
        capsys, "complete", bad_input, "-o", out_path, "--skip-bad", "--model", NO_MODEL, *flags
    )


def test_resume_refuses_an_output_written_from_another_input(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    content = _record("x1") + _record(2) + _record("x3")
    out_path.write_text(content)
    code, _, err = _job(capsys, bad_input, out_path, "--resume")
    assert code == 2
    line = single_error_line(err)
    assert f'{out_path} holds 2 ids that are not in {bad_input} (the first: "x1")' in line
    assert "--overwrite" in line and "--keep-other-ids" in line
    assert out_path.read_text() == content  # left alone
    code, _, err = _job(capsys, bad_input, out_path, "--keep-other-ids")
    assert code == 2 and "--keep-other-ids needs --resume" in single_error_line(err)


def test_resume_refuses_another_output_format_than_out_holds(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    assert _job(capsys, bad_input, out_path, "--output-format", "openai", "--quiet")[0] == 0
    first = out_path.read_text().splitlines(keepends=True)[0]
    out_path.write_text(first)  # stopped after its first line
    for flags in ((), ("--allow-changed-options",)):  # one file, one format, always
        code, _, err = _job(capsys, bad_input, out_path, "--resume", *flags)
        assert code == 2
        line = single_error_line(err)
        assert "written with --output-format openai" in line
        assert "writes --output-format llamabatch" in line and "--overwrite" in line
        assert out_path.read_text() == first
    code, _, err = _job(capsys, bad_input, out_path, "--resume", "--output-format", "openai")
    assert code == 0, err
    assert [r["custom_id"] for r in read_jsonl(out_path)] == ["1", "2", "3"]


def test_resume_refuses_an_input_whose_done_lines_changed_naming_the_first(
    capsys, tmp_path, bad_input
):
    out_path = tmp_path / "out.jsonl"
    assert _job(capsys, bad_input, out_path, "--quiet")[0] == 0
    assert (tmp_path / "out.jsonl.fingerprint").is_file()
    done = _record(1) + _record(2) + _record(3)  # replies (an error line would be redone)
    out_path.write_text(done)
    bad_input.write_text("one\nTWO\nthree\n", encoding="utf-8")  # line 2 edited
    code, _, err = _job(capsys, bad_input, out_path, "--resume")
    assert code == 2
    line = single_error_line(err)
    assert f"{bad_input}:2: line 2 (id 2) changed since {out_path} was written" in line
    assert "--overwrite" in line
    # a line put in front moves every id (the line numbers): line 1 is named
    bad_input.write_text("zero\none\ntwo\nthree\n", encoding="utf-8")
    code, _, err = _job(capsys, bad_input, out_path, "--resume")
    assert code == 2 and f"{bad_input}:1: line 1 (id 1) changed" in single_error_line(err)
    assert out_path.read_text() == done
    # lines added after the done ones are fine: they are done now
    bad_input.write_text("one\ntwo\nthree\nfour\n", encoding="utf-8")
    code, _, err = _job(capsys, bad_input, out_path, "--resume", "--quiet")
    assert code == 0, err
    assert [r["id"] for r in read_jsonl(out_path)] == [1, 2, 3, 4]


def test_an_output_without_a_fingerprint_is_resumed_with_a_warning(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    out_path.write_text(_record(1))
    code, _, err = _job(capsys, bad_input, out_path, "--resume", "--quiet")
    assert code == 0
    assert f"{out_path} has no fingerprint of its input" in err
    assert [r["id"] for r in read_jsonl(out_path)] == [1, 2, 3]
    assert (tmp_path / "out.jsonl.fingerprint").is_file()  # from now on it has one


def test_resume_of_a_finished_job_does_nothing(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    out_path.write_text(_record(1) + _record(2) + _record(3))
    code, _, err = run_cli(
        capsys,
        "complete",
        bad_input,
        "-o",
        out_path,
        "--skip-bad",
        "--resume",
        "--model",
        tmp_path / NO_MODEL,
    )
    assert code == 0
    assert "nothing to do: all 3 items are already in" in err
    assert out_path.read_text() == _record(1) + _record(2) + _record(3)


def test_resume_of_a_missing_output_starts_it(capsys, tmp_path, bad_input):
    out_path = tmp_path / "new.jsonl"
    code, _, _ = run_cli(
        capsys,
        "complete",
        bad_input,
        "-o",
        out_path,
        "--skip-bad",
        "--resume",
        "--quiet",
        "--model",
        tmp_path / NO_MODEL,
    )
    assert code == 0 and len(read_jsonl(out_path)) == 3


def test_resume_refuses_an_output_with_a_corrupt_line_and_leaves_it_alone(
    capsys, tmp_path, bad_input
):
    out_path = tmp_path / "out.jsonl"
    content = _record(1) + "garbage\n" + _record(2) + '{"id": 3, "te'
    out_path.write_text(content)
    code, _, err = run_cli(
        capsys,
        "complete",
        bad_input,
        "-o",
        out_path,
        "--skip-bad",
        "--resume",
        "--model",
        tmp_path / NO_MODEL,
    )
    assert code == 2
    assert "out.jsonl:2: line 2 of the existing output is not valid JSON" in (
        single_error_line(err)
    )
    assert out_path.read_text() == content


def test_an_output_locked_by_another_job_is_refused(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    with open(out_path, "a") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        code, _, err = run_cli(
            capsys,
            "complete",
            bad_input,
            "-o",
            out_path,
            "--skip-bad",
            "--resume",
            "--model",
            tmp_path / NO_MODEL,
        )
    assert code == 2
    assert "is locked: another job is writing it" in single_error_line(err)


def test_an_output_that_cannot_be_fsynced_is_fine(capsys, tmp_path, bad_input):
    code, _, err = run_cli(
        capsys,
        "complete",
        bad_input,
        "-o",
        "/dev/null",
        "--skip-bad",
        "--quiet",
        "--model",
        tmp_path / NO_MODEL,
    )
    assert (code, err) == (0, "")


# -- the command, with the model ----------------------------------------------------------


def _letter_prompts(n: int) -> list[dict]:
    return [
        {
            "id": f"q{k:02d}",
            "prompt": "<|im_start|>user\nName an animal whose name "
            f"starts with {string.ascii_uppercase[k]}.<|im_end|>\n<|im_start|>assistant\n",
        }
        for k in range(n)
    ]


_RESULT_KEYS = ("id", "text", "finish_reason", "error", "n_prompt_tokens", "n_tokens")


def _results(records: list[dict]) -> list[tuple]:
    return [tuple(r[k] for k in _RESULT_KEYS) for r in records]


@pytest.mark.real_model
def test_resume_repairs_a_cut_off_last_line(capsys, tmp_path, model_path):
    src = write_jsonl(tmp_path / "in.jsonl", _letter_prompts(4))
    out_path = tmp_path / "out.jsonl"
    job = ("complete", src, "-o", out_path, "--model", model_path, "--slots", "2", *FAST)
    assert run_cli(capsys, *job, "--quiet")[0] == 0
    clean = out_path.read_bytes()
    lines = clean.splitlines(keepends=True)
    out_path.write_bytes(b"".join(lines[:2]) + lines[2][:17])  # killed while writing line 3
    code, _, err = run_cli(capsys, *job, "--resume", "--quiet")
    assert code == 0, err
    assert err.strip() == (
        f"llamabatch complete: warning: {out_path}: removed its cut-off "
        "last line (17 bytes without a newline, left by a job that was "
        "killed or could not finish writing, e.g. on a full disk); that item will be done again"
    )
    assert _results(read_jsonl(out_path)) == _results([json.loads(line) for line in lines])


@pytest.mark.real_model
def test_resume_after_sigkill_writes_every_item_once_in_input_order(capsys, tmp_path, model_path):
    items = _letter_prompts(24)
    src = write_jsonl(tmp_path / "in.jsonl", items)
    out_path = tmp_path / "out.jsonl"
    job = (
        "complete",
        src,
        "-o",
        out_path,
        "--model",
        model_path,
        "--slots",
        "2",
        "--lookahead",
        "2",
        *FAST,
    )
    proc = popen_cli(*job, "--quiet")
    deadline = time.monotonic() + 300
    while b"\n" not in (out_path.read_bytes() if out_path.exists() else b""):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    n_before = out_path.read_bytes().count(b"\n")
    assert 1 <= n_before < len(items), "the job was not killed in its middle"

    code, _, err = run_cli(capsys, *job, "--resume")
    assert code == 0, err
    resumed = read_jsonl(out_path)
    assert [r["id"] for r in resumed] == [item["id"] for item in items]
    assert f"skipped as already done in {out_path}" in err.strip().splitlines()[-1]

    clean_path = tmp_path / "clean.jsonl"
    clean_job = ("complete", src, "-o", clean_path, *job[4:], "--quiet")
    assert run_cli(capsys, *clean_job)[0] == 0
    assert _results(resumed) == _results(read_jsonl(clean_path))


def test_resume_refuses_changed_options_naming_each_unless_allowed(capsys, tmp_path, bad_input):
    """OUT.fingerprint keeps the options that shape a reply: a resume with others would
    mix replies of two jobs, so it is refused, each option named with both values."""
    out_path = tmp_path / "out.jsonl"
    assert _job(capsys, bad_input, out_path, "--quiet", "--temperature", "0.1")[0] == 0
    done = out_path.read_text()
    code, _, err = _job(
        capsys, bad_input, out_path, "--resume", "--temperature", "0.9", "--max-tokens", "3"
    )
    assert code == 2
    line = single_error_line(err)
    assert f"{out_path} was written with other options than these" in line
    assert "temperature: 0.1 -> 0.9" in line and "max_tokens: 200 -> 3" in line
    assert "--allow-changed-options" in line and "--overwrite" in line
    assert out_path.read_text() == done  # left alone
    code, _, err = _job(capsys, bad_input, out_path, "--resume", "--system", "Be short.")
    assert code == 2 and 'system: null -> "Be short."' in single_error_line(err)
    code, _, err = _job(
        capsys, bad_input, out_path, "--resume", "--temperature", "0.9", "--allow-changed-options"
    )
    assert code == 0, err
    assert "was written with other options, kept as they are (temperature: 0.1 -> 0.9)" in err
    code, _, err = _job(capsys, bad_input, out_path, "--allow-changed-options")
    assert code == 2 and "--allow-changed-options needs --resume" in single_error_line(err)


def test_a_fingerprint_without_options_is_resumed_with_a_warning(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    assert _job(capsys, bad_input, out_path, "--quiet")[0] == 0
    fingerprint = tmp_path / "out.jsonl.fingerprint"
    doc = json.loads(fingerprint.read_text())
    del doc["options"]  # as written before options were kept
    fingerprint.write_text(json.dumps(doc))
    code, _, err = _job(capsys, bad_input, out_path, "--resume", "--temperature", "0.9")
    assert code == 0, err
    assert "has no record of the options it was written with" in err
    assert "temperature" in json.loads(fingerprint.read_text())["options"]


def test_the_refusal_of_a_non_empty_output_names_every_way_on(capsys, tmp_path, bad_input):
    out_path = tmp_path / "out.jsonl"
    out_path.write_text(_record(1))
    code, _, err = _job(capsys, bad_input, out_path)
    line = single_error_line(err)
    assert code == 2 and "--resume" in line and "--overwrite" in line
    assert "another file (-o)" in line


def test_a_full_disk_names_the_output_the_cause_and_the_resume(capsys, tmp_path, bad_input):
    """/dev/full answers every write with ENOSPC, as a full disk does."""
    code, _, err = _job(capsys, bad_input, "/dev/full", "--quiet")
    assert code == 1
    line = single_error_line(err)
    assert "cannot write the output /dev/full: no space left on the device" in line


def test_a_sampling_field_newer_than_the_fingerprint_counts_as_its_default():
    """OUT written before a sampling field existed (XTC) resumes with that field at its
    default, and is refused when it is set."""
    from llamabatch.cli.job.resume import changed_options

    old = {"temperature": 0.1, "top_k": 40}  # an older record: no xtc_probability
    assert changed_options(old, {"temperature": 0.1, "top_k": 40, "xtc_probability": 0.0}) == []
    changed = changed_options(old, {"temperature": 0.1, "top_k": 40, "xtc_probability": 0.5})
    assert changed == ["xtc_probability: 0.0 -> 0.5"]

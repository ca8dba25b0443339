"""``llamabatch complete``: options, usage errors, the default model, real jobs, progress and
summary on stderr, SIGINT/SIGTERM. (Input: test_cli_input.py; resume: test_cli_resume.py;
chat templates: test_cli_chat.py; the default model and load_llama: test_cli_model.py.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from cli_util import (
    EXAMPLES,
    FAST,
    example_prompts,
    popen_cli,
    read_jsonl,
    run_cli,
    single_error_line,
    write_jsonl,
)
from without_llama_cpp import WITHOUT_LLAMA_CPP

from llamabatch.cli.job.input import read_prompts
from llamabatch.model import DEFAULT_MODEL

# -- usage errors: exit status 2 and one line on stderr, before any model work -------------


def test_no_command_prints_help_and_exits_2(capsys):
    code, _, err = run_cli(capsys)
    assert code == 2
    assert "complete" in err


#: ``python -m llamabatch`` where llama-cpp-python is not installed.
RUN_CLI = (
    WITHOUT_LLAMA_CPP
    + """
import runpy
sys.argv = ["llamabatch", *sys.argv[1:]]
runpy.run_module("llamabatch", run_name="__main__")
"""
)


def test_help_without_llama_cpp_lists_every_command_and_says_how_to_install_it():
    def run(*argv):
        cmd = [sys.executable, "-c", RUN_CLI, *argv]
        env = dict(os.environ, COLUMNS="300")  # argparse wraps at hyphens otherwise
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)

    done = run("--help")
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    for command in ("complete", "bench", "tune", "doctor"):
        assert f" {command} " in out, out
    assert "complete every prompt of a JSONL or text file (needs llama-cpp-python)" in out
    assert "complete, bench, tune and eval need llama-cpp-python, which cannot be used here" in out
    assert "llama-cpp-python is not installed" in out and "pip install 'llama-cpp-python" in out
    done = run("complete", "in.jsonl")
    assert done.returncode == 1 and "pip install 'llama-cpp-python" in done.stderr


#: Every option of ``complete`` with what its help must say: a unit and the default.
OPTION_HELP = {
    "--output": "(default: standard output)",
    "--resume": "(default: off)",
    "--overwrite": "(default: off: refuse)",
    "--keep-other-ids": "(default: off: such an OUT was written from another input and is refused)",
    "--allow-changed-options": "(default: off: refused, naming each option that changed)",
    "--skip-bad": "(default: off:",
    "--format": "(default: auto:",
    "--model": "(default: SmolLM2-135M-Instruct Q4_1,",
    "--slots": "sequences decoded together; 1 = no batching; auto = the most (up to 8)",
    "--n-ctx-seq": "tokens of context per sequence",
    "--max-tokens": "most generated tokens per reply (default: 200)",
    "--n-batch": "most tokens per llama_decode call (default: 512)",
    "--lookahead": "how far ahead of the oldest unfinished item others may start, a multiple",
    "--page-size": "with --server or --ray: most completions per page written together",
    "--temperature": "sampling temperature, >= 0; 0 = greedy (default: 0.1)",
    "--top-k": "keep the K likeliest tokens, 0 = off (default: 40)",
    "--top-p": "probability mass, in (0, 1] (default: 0.95)",
    "--min-p": "likeliest one's probability, in [0, 1] (default: 0.05)",
    "--repeat-penalty": "penalty factor on tokens among the last 64 generated, > 0; 1 = off "
    "(default: 1.0)",
    "--seed": "sampling seed, an integer in [0, 2**32 - 2] (default: random)",
    "--n-gpu-layers": "model layers offloaded to the GPU, -1 = all;",
    "--threads": "CPU threads (default: llama-cpp-python's",
    "--cache-ram-mib": "0 = off (default: 1024)",
    "--quiet": "(default: off)",
    "--server": "base URL of a server, e.g. http://10.0.0.2:8080; repeatable (default: none",
    "--servers-file": "one per line; blank lines and lines starting with # are skipped",
    "--concurrency": "requests in flight per server that does not report its slots",
    "--ray": "ray://HOST:10001 a Ray Client server (default: off: the local engine)",
    "--actors": "actors of the pool, each loading the model once (default: 1)",
    "--gpus-per-actor": "Ray waits until nodes with that many are free (default: 0)",
    "--output-format": "the Batch API's response lines, keyed by custom_id (default: llamabatch)",
    "--score-choices": "score every label instead of generating: output lines get "
    "choice_probs, text is the likeliest label (default: off)",
    "--n": "replies per prompt, sharing its cache, reply j with seed + j; output lines get "
    "samples (and votes with choices) (default: 1)",
    "--stop": "end a reply before this string; repeat for several (default: none)",
    "--choices": "exactly one of these comma-separated strings (default: none)",
    "--json-schema": "JSON valid against the JSON schema in FILE (default: none)",
    "--grammar": "GBNF grammar in FILE, rule root (default: none)",
    "--system": "system message put before each text line's message (default: none)",
    "--template": "TEXT with {text} where the line goes (default: the line as it is)",
    "--raw": "without the chat template (default: off: the model's chat template is applied)",
}


def _option_helps(help_text: str) -> dict[str, str]:
    """Each option's help text, whitespace collapsed, keyed by its long name."""
    helps: dict[str, str] = {}
    current = None
    for line in help_text.split("options:", 1)[1].splitlines():
        match = re.match(r"\s{2}(?:-\w(?: \S+)?, )?(--[\w-]+)", line)
        if match:
            current = match.group(1)
            helps[current] = line
        elif current:
            helps[current] += " " + line
    return {k: " ".join(v.split()) for k, v in helps.items()}


def test_help_documents_every_option_with_its_unit_and_default(capsys):
    code, out, _ = run_cli(capsys, "complete", "--help")
    assert code == 0
    helps = _option_helps(out)
    assert set(helps) == set(OPTION_HELP) | {"--help"}
    for option, text in OPTION_HELP.items():
        assert text in helps[option], (option, helps[option])
    assert "(default: 4096)" in helps["--n-ctx-seq"] and "(default: -1)" in helps["--n-gpu-layers"]


def test_missing_prompts_file(capsys, tmp_path):
    code, out, err = run_cli(capsys, "complete", tmp_path / "nope.jsonl")
    assert code == 2 and out == ""
    assert "not found" in single_error_line(err)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--slots", "0"], "--slots 0 is out of range: valid is an integer >= 1"),
        (["--slots", "abc"], "'abc' is not a slot count: give an integer >= 1 or auto"),
        (["--max-tokens", "0"], "--max-tokens 0 is out of range"),
        (["--n-ctx-seq", "0"], "--n-ctx-seq 0 is out of range"),
        (["--n-batch", "0"], "--n-batch 0 is out of range"),
        (["--temperature", "-1"], "--temperature -1.0 is out of range"),
        (["--temperature", "nan"], "--temperature nan is out of range"),
        (["--top-k", "-1"], "--top-k -1 is out of range"),
        (["--top-p", "1.5"], "--top-p 1.5 is out of range"),
        (["--min-p", "2"], "--min-p 2.0 is out of range"),
        (["--repeat-penalty", "0"], "--repeat-penalty 0.0 is out of range"),
        (["--seed", "-1"], "--seed -1 is out of range"),
        (["--threads", "0"], "--threads 0 is out of range"),
        (["--cache-ram-mib", "-1"], "--cache-ram-mib -1 is out of range"),
        (["--slots", "2", "--lookahead", "3"], "--lookahead 3 is out of range"),
        (["--format", "xml"], "--format"),
        (["--resume", "--overwrite"], "not allowed with argument"),
        (["--resume"], "--resume needs an output file"),
        (["--no-such-option"], "--no-such-option"),
    ],
)
def test_invalid_values_exit_2_naming_the_parameter(capsys, prompts_file, args, named):
    code, out, err = run_cli(capsys, "complete", prompts_file, *args)
    assert code == 2 and out == ""
    assert named in single_error_line(err)


@pytest.mark.real_model
def test_more_slots_than_llama_cpp_allows_names_the_flag_and_the_most(
    capsys, prompts_file, model_path
):
    code, _, err = run_cli(
        capsys, "complete", prompts_file, "--model", model_path, "--slots", "100000"
    )
    assert code == 2
    line = single_error_line(err)
    assert "--slots 100000 is out of range: valid is 1 to " in line and "slots=" not in line


@pytest.mark.real_model
def test_slots_auto_says_what_it_chose_and_why(capsys, model_path, tmp_path):
    out = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys, "complete", EXAMPLES, "-o", out, "--model", model_path, "--slots", "auto", *FAST
    )
    assert code == 0, err
    chose = next(line for line in err.splitlines() if 'slots="auto" chose' in line)
    slots = int(chose.split("chose ")[1].split(":")[0])
    assert "free on host" in chose and "per slot of 512 tokens" in chose
    assert f"batching on ({slots} slots" in err
    assert len(read_jsonl(out)) == 20


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


def test_an_input_without_prompts_is_refused_as_bench_and_tune_refuse_it(capsys, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("\n  \n")
    out_path = tmp_path / "out.jsonl"
    code, _, err = run_cli(capsys, "complete", path, "-o", out_path)
    assert code == 2 and not out_path.exists()
    assert f"{path} holds no prompts: a job needs at least one" in single_error_line(err)
    for command in ("bench", "tune"):
        argv = [command, path] if command == "tune" else [command, "--prompts", path]
        code, _, err = run_cli(capsys, *argv, "--model", tmp_path / "none.gguf")
        assert code == 2 and f"{path} holds no prompts" in single_error_line(err)


def test_python_dash_m_runs_the_command(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "llamabatch", "complete", tmp_path / "x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_python_dash_m_exits_with_the_status_after_an_interrupt_it_caught(tmp_path):
    """A Ctrl-C that lands in code run by exec() of a string (a dataclass being made, say,
    while the model loads) and that the command catches must still end in the command's
    status: CPython remembers the interrupt, and under -m the process used to die by
    SIGINT (-2) instead of exiting 130."""
    (tmp_path / "sitecustomize.py").write_text(
        "import llamabatch.cli.main as cli\n"
        "_main = cli.main\n"
        "def main(argv=None):\n"
        "    try:\n"
        "        exec('raise KeyboardInterrupt')\n"
        "    except KeyboardInterrupt:\n"
        "        pass\n"
        "    return _main(argv)\n"
        "cli.main = main\n",
        encoding="utf-8",
    )
    run = subprocess.run(
        [sys.executable, "-m", "llamabatch", "complete", tmp_path / "x"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)),
    )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr


# -- real model ------------------------------------------------------------------------


def test_example_file_is_20_chat_prompts_with_ids():
    items = read_prompts(EXAMPLES)
    assert [i.id for i in items] == [f"t{k:02d}" for k in range(1, 21)]
    for item in items:
        assert item.prompt.startswith("<|im_start|>system\n")
        assert item.prompt.endswith("<|im_end|>\n<|im_start|>assistant\nCategory:")


@pytest.mark.real_model
def test_complete_three_examples_with_two_slots_shows_progress_and_summary(
    capsys, tmp_path, model_path
):
    src = write_jsonl(
        tmp_path / "three.jsonl",
        [{"id": f"t{k:02d}", "prompt": p} for k, p in enumerate(example_prompts(3), start=1)],
    )
    out_path = tmp_path / "out.jsonl"
    code, out, err = run_cli(
        capsys,
        "complete",
        src,
        "-o",
        out_path,
        "--model",
        model_path,
        "--slots",
        "2",
        "--max-tokens",
        "8",
        "--n-ctx-seq",
        "1024",
        "--temperature",
        "0",
        "--threads",
        "1",
    )
    assert code == 0, err
    assert out == ""
    records = read_jsonl(out_path)
    assert [r["id"] for r in records] == ["t01", "t02", "t03"]
    for r in records:
        assert set(r) == {
            "id",
            "text",
            "finish_reason",
            "error",
            "n_prompt_tokens",
            "n_tokens",
            "path",
        }
        assert r["error"] is None
        assert r["finish_reason"] in ("stop", "length")
        assert r["n_prompt_tokens"] > 20
        assert 1 <= r["n_tokens"] <= 8 or r["finish_reason"] == "stop"
    # 3 items with 2 slots: the third takes the first slot that frees up
    assert [r["path"] for r in records] == ["batch", "batch", "batch"]
    # the tqdm bar: items done/total, items/s, ETA, share completed alone
    bar = err.replace("\r", "\n")
    rate = r"[\d.]+(item/s|s/item)"
    assert re.search(rf"complete: +67%\|.*\| 2/3 \[\d\d:\d\d<\d\d:\d\d, +{rate}, alone=0%\]", bar)
    assert re.search(rf"complete: 100%\|.*\| 3/3 .*{rate}, alone=0%\]", bar)
    summary = err.strip().splitlines()[-1]
    assert re.fullmatch(
        r"llamabatch: 3 items, 0 errors, 0 completed alone; tokens in \d+, out \d+; wall "
        r"[\d.]+ s \(generation [\d.]+ s\), [\d.]+ tokens/s out; batching on \(2 slots, "
        r"3 items batched\)",
        summary,
    ), summary


@pytest.mark.real_model
def test_complete_text_to_stdout_quietly(capsys, tmp_path, model_path):
    src = tmp_path / "in.txt"
    src.write_text("Name a fruit.\n\nName a colour.\n", encoding="utf-8")
    code, out, err = run_cli(
        capsys, "complete", src, "--model", model_path, "--quiet", "--slots", "2", *FAST
    )
    assert code == 0
    assert err == ""
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in records] == [1, 3]
    assert all(r["error"] is None and r["n_tokens"] >= 1 for r in records)


@pytest.mark.real_model
def test_without_model_uses_the_default_and_says_so(capsys, tmp_path, monkeypatch, model_path):
    cache = tmp_path / "xdg" / "llamabatch" / "models"
    cache.mkdir(parents=True)
    (cache / DEFAULT_MODEL.filename).symlink_to(model_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    src = tmp_path / "in.txt"
    src.write_text("Say hi.\n", encoding="utf-8")
    code, out, err = run_cli(
        capsys,
        "complete",
        src,
        "--slots",
        "1",
        "--max-tokens",
        "2",
        "--n-ctx-seq",
        "512",
        "--threads",
        "1",
    )
    assert code == 0, err
    assert "using the default model SmolLM2-135M-Instruct Q4_1" in err
    assert "batching off (--slots 1)" in err
    assert json.loads(out)["path"] == "alone"


@pytest.mark.real_model
def test_skip_bad_writes_error_lines_in_input_order_among_completions(capsys, tmp_path, model_path):
    src = tmp_path / "in.jsonl"
    src.write_text(
        'not json\n{"id": "a", "prompt": "Name a fruit."}\n{"prompt": 5}\n'
        '{"id": "b", "prompt": "Name a colour."}\n\n{"messages": {}}\n',
        encoding="utf-8",
    )
    code, out, err = run_cli(
        capsys, "complete", src, "--model", model_path, "--slots", "2", "--skip-bad", *FAST
    )
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in records] == [1, "a", 3, "b", 6]
    assert [r["finish_reason"] == "error" for r in records] == [True, False, True, False, True]
    assert records[2]["error"] == 'line 3: "prompt" is int, not a string'
    assert "5 items, 3 errors (3 bad input lines), 0 completed alone" in err


@pytest.mark.real_model
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_job_keeps_whole_groups_and_says_how_to_resume(tmp_path, model_path, signum):
    prompts = example_prompts(20) * 10
    src = write_jsonl(
        tmp_path / "many.jsonl", [{"id": n, "prompt": p} for n, p in enumerate(prompts)]
    )
    out_path = tmp_path / "out.jsonl"
    proc = popen_cli(
        "complete",
        src,
        "-o",
        out_path,
        "--model",
        model_path,
        "--slots",
        "4",
        "--max-tokens",
        "32",
        "--n-ctx-seq",
        "512",
        "--threads",
        "1",
        "--quiet",
    )
    deadline = time.monotonic() + 300
    while not (out_path.exists() and out_path.read_text().count("\n") >= 4):
        assert proc.poll() is None and time.monotonic() < deadline, "no group was written"
        time.sleep(0.05)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    written = read_jsonl(out_path)
    assert 4 <= len(written) < len(prompts)
    assert len(written) % 4 == 0  # whole groups of 4 only
    assert [r["id"] for r in written] == list(range(len(written)))
    assert single_error_line(err) == (
        f"llamabatch complete: error: interrupted: {len(written)} of {len(prompts)} items "
        f"were written to {out_path}, in input order; run the same command with --resume "
        "to continue"
    )


@pytest.mark.real_model
def test_a_prompt_longer_than_the_context_names_its_length_and_n_ctx_seq(
    capsys, tmp_path, model_path
):
    long = "apple, " * 300
    path = write_jsonl(tmp_path / "in.jsonl", [{"prompt": long}, {"prompt": "pear, pear,"}])
    out = tmp_path / "out.jsonl"
    argv = ["complete", path, "-o", out, "--model", model_path, *FAST[:2], "--quiet"]
    code, _, err = run_cli(capsys, *argv, "--n-ctx-seq", "256", "--temperature", "0")
    assert code == 0, err
    bad, fine = read_jsonl(out)
    assert bad["finish_reason"] == "error" and bad["n_prompt_tokens"] > 256  # not 0
    assert f"prompt has {bad['n_prompt_tokens']} tokens" in bad["error"]
    assert "--n-ctx-seq 256 sets it: raise --n-ctx-seq above" in bad["error"]
    assert fine["error"] is None


@pytest.mark.real_model
def test_a_busy_cpu_is_told_with_what_to_try(capsys, caplog, tmp_path, model_path, monkeypatch):
    """Other work on the cores collapses llama.cpp's default threads: the job says so, with
    a hint that fits the --threads in force, once (the generator's own warning is for
    library callers); the load figure is a stand-in, the machine is not loaded."""
    import llamabatch.cli.complete as complete

    src = tmp_path / "in.txt"
    src.write_text("Name a fruit.\n", encoding="utf-8")
    import llamabatch._util.busy as busy

    monkeypatch.setattr(complete, "BUSY_MIN_S", 0.0)
    monkeypatch.setattr(busy, "BUSY_MIN_S", 0.0)  # the generator's: muted in the CLI
    cores = os.cpu_count()
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5 * cores, 2.0 * cores, cores))
    code, _, err = run_cli(capsys, "complete", src, "--model", model_path, "--quiet", *FAST)
    assert code == 0, err
    assert f"the CPU was busy during the job (load average {2.5 * cores:.1f} on {cores} " in err
    assert err.count("the CPU was busy") == 1
    assert not [r for r in caplog.records if r.name == "llamabatch.busy"]
    # FAST runs with --threads 1: the hint does not ask for what is already in force
    assert "try --threads 1" not in err
    assert "it already runs with --threads 1: run it when the other work is done" in err
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    code, _, err = run_cli(capsys, "complete", src, "--model", model_path, "--quiet", *FAST)
    assert code == 0 and "busy" not in err


@pytest.mark.real_model
def test_a_reply_cut_inside_a_character_is_finished_in_the_output(capsys, tmp_path, model_path):
    prompt = "Chinese: 你好，世界。我们"  # greedy: "的" then "美" in 3 tokens
    src = write_jsonl(
        tmp_path / "cjk.jsonl", [{"id": "a", "prompt": prompt}, {"id": "b", "prompt": prompt}]
    )
    out_path = tmp_path / "out.jsonl"
    code, _, err = run_cli(
        capsys, "complete", src, "-o", out_path, "--model", model_path,
        "--max-tokens", "2", "--temperature", "0", "--threads", "1",
    )  # fmt: skip
    assert code == 0, err
    records = read_jsonl(out_path)
    assert [(r["text"], r["n_tokens"], r["finish_reason"]) for r in records] == [
        ("的美", 4, "length")
    ] * 2

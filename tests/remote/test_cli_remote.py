"""``llamabatch complete --server URL --server URL``: every item once, in input order, on
two real llama-cpp-python servers; ``--resume`` after a SIGKILL completes the rest.
No model is loaded by the command (``--model`` names a file that does not exist)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from llamabatch.cli.main import main

NO_MODEL = "no-model.gguf"
OPTIONS = ("--max-tokens", "6", "--temperature", "0", "--quiet")


def _items(path, n: int):
    lines = []
    for i in range(n):
        if i % 5 == 3:
            lines.append(
                {
                    "id": f"m{i}",
                    "messages": [{"role": "user", "content": f"Name fruit number {i}."}],
                }
            )
        else:
            lines.append({"id": f"p{i}", "prompt": f"Fruit number {i} is the"})
    path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    return [o["id"] for o in lines]


def _records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _server_args(servers):
    return [a for s in servers for a in ("--server", s.url)]


@pytest.mark.real_model
def test_complete_on_two_servers_writes_every_item_once_in_input_order(
    two_servers, tmp_path, capsys
):
    ids = _items(tmp_path / "items.jsonl", 12)
    out = tmp_path / "out.jsonl"
    code = main(
        [
            "complete",
            str(tmp_path / "items.jsonl"),
            "-o",
            str(out),
            *OPTIONS,
            "--model",
            str(tmp_path / NO_MODEL),
            *_server_args(two_servers),
        ]
    )
    assert code == 0, capsys.readouterr().err
    records = _records(out)
    assert [r["id"] for r in records] == ids
    assert all(r["error"] is None and r["path"] == "remote" and r["text"] for r in records)
    assert all(1 <= r["n_tokens"] <= 6 and r["n_prompt_tokens"] > 0 for r in records)


def test_servers_file_and_a_bad_url_are_usage_errors(tmp_path, capsys):
    _items(tmp_path / "items.jsonl", 2)
    listing = tmp_path / "servers.txt"
    listing.write_text("# the pool\n\nftp://nowhere\n", encoding="utf-8")
    code = main(["complete", str(tmp_path / "items.jsonl"), "--servers-file", str(listing)])
    err = capsys.readouterr().err
    assert code == 2 and "'ftp://nowhere' is not a URL" in err and "Traceback" not in err
    listing.write_text("# nothing\n", encoding="utf-8")
    assert main(["complete", str(tmp_path / "items.jsonl"), "--servers-file", str(listing)]) == 2
    assert "holds no server URL" in capsys.readouterr().err


@pytest.mark.real_model
def test_resume_after_sigkill_completes_the_rest_once_in_order(two_servers, tmp_path, capsys):
    ids = _items(tmp_path / "items.jsonl", 40)
    out = tmp_path / "out.jsonl"
    argv = [
        "complete",
        str(tmp_path / "items.jsonl"),
        "-o",
        str(out),
        *OPTIONS,
        "--max-tokens",
        "24",
        "--model",
        str(tmp_path / NO_MODEL),
        *_server_args(two_servers),
    ]
    job = subprocess.Popen(
        [sys.executable, "-m", "llamabatch", *argv],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and job.poll() is None:
            if out.exists() and out.read_text(encoding="utf-8").count("\n") >= 3:
                break
            time.sleep(0.05)
        assert job.poll() is None, f"the job ended before the kill: {job.stderr.read()}"
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
        job.stderr.close()
    whole_lines = out.read_text(encoding="utf-8").split("\n")[:-1]  # not a cut-off end
    first = [json.loads(line)["id"] for line in whole_lines]
    assert 3 <= len(first) < len(ids) and first == ids[: len(first)]
    code = main([*argv, "--resume"])
    assert code == 0, capsys.readouterr().err
    records = _records(out)
    assert [r["id"] for r in records] == ids
    assert all(r["error"] is None and r["path"] == "remote" for r in records)


def test_concurrency_without_a_server_is_a_usage_error(tmp_path, capsys):
    _items(tmp_path / "items.jsonl", 2)
    code = main(["complete", str(tmp_path / "items.jsonl"), "--concurrency", "4"])
    assert code == 2
    assert "--concurrency needs --server or --servers-file" in capsys.readouterr().err


def test_a_bad_concurrency_is_named(tmp_path, capsys):
    _items(tmp_path / "items.jsonl", 2)
    code = main(
        [
            "complete",
            str(tmp_path / "items.jsonl"),
            "--server",
            "http://127.0.0.1:9",
            "--concurrency",
            "0",
            "-o",
            str(tmp_path / "out.jsonl"),
        ]
    )
    assert code == 2 and "--concurrency 0 is out of range" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists() or not (tmp_path / "out.jsonl").read_text()


@pytest.mark.real_model
def test_score_choices_acts_only_on_lines_with_choices_and_a_cut_off_choice_is_an_error(
    two_servers, tmp_path, capsys
):
    ids = _items(tmp_path / "items.jsonl", 3)
    out = tmp_path / "out.jsonl"
    common = ["complete", "--model", str(tmp_path / NO_MODEL), *_server_args(two_servers)]
    code = main([*common, str(tmp_path / "items.jsonl"), "-o", str(out), *OPTIONS])
    assert code == 0, capsys.readouterr().err
    plain = _records(out)
    code = main(
        [*common, str(tmp_path / "items.jsonl"), "-o", str(out), *OPTIONS, "--overwrite"]
        + ["--score-choices"]
    )
    assert code == 0, capsys.readouterr().err
    records = _records(out)
    assert [r["id"] for r in records] == ids and all(r["error"] is None for r in records)
    assert [r["text"] for r in records] == [r["text"] for r in plain]  # greedy: the same
    labels = ["refund request for a double charge", "feature request for dark mode"]
    line = {"id": "cut", "prompt": "Ticket: I was charged twice. Category:", "choices": labels}
    (tmp_path / "cut.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    code = main([*common, str(tmp_path / "cut.jsonl"), "-o", str(out), "--overwrite", *OPTIONS])
    assert code == 0, capsys.readouterr().err
    (rec,) = _records(out)
    assert rec["finish_reason"] == "error" and rec["text"] == ""
    assert "before it was one of the choices" in rec["error"] and "raise max_tokens" in rec["error"]


def test_a_server_url_where_nothing_listens_fails_in_seconds_naming_it(tmp_path):
    from llamabatch.testing.servers import free_port

    _items(tmp_path / "items.jsonl", 2)
    url = f"http://127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "llamabatch", "complete", str(tmp_path / "items.jsonl")]
    argv += ["--server", url, "-o", str(tmp_path / "out.jsonl"), "--quiet"]
    # the 120 s give-up is for servers that stop answering; this one was never there
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert done.returncode == 1, done.stderr
    assert "could be connected to in 10 s" in done.stderr and url in done.stderr
    assert "check the URLs" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.real_model
def test_openai_lines_that_ask_for_logprobs_on_a_pool_are_errors_naming_the_way_out(
    two_servers, tmp_path, capsys
):
    # a pool's request carries no logprobs: a line that asks for them is its error, in
    # both output formats, never a reply with "logprobs": null
    chat = [{"role": "user", "content": "Name a fruit."}]
    lines = [
        {
            "custom_id": "chat",
            "url": "/v1/chat/completions",
            "body": {"messages": chat, "logprobs": True, "top_logprobs": 2},
        },
        {"custom_id": "text", "url": "/v1/completions", "body": {"prompt": "Sky", "logprobs": 2}},
        {"custom_id": "plain", "url": "/v1/completions", "body": {"prompt": "Sky"}},
    ]
    src = tmp_path / "batch.jsonl"
    src.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    argv = ["complete", str(src), "-o", str(out), *OPTIONS, "--output-format", "openai"]
    code = main([*argv, "--model", str(tmp_path / NO_MODEL), *_server_args(two_servers)])
    assert code == 0, capsys.readouterr().err
    chat_rec, text_rec, plain_rec = _records(out)
    for rec in (chat_rec, text_rec):
        assert rec["response"] is None, rec
        message = rec["error"]["message"]
        assert "logprobs cannot be sent to a server" in message
        assert "--server" in message and "--ray" in message
    assert plain_rec["error"] is None
    assert plain_rec["response"]["body"]["choices"][0]["logprobs"] is None
